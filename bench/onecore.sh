#!/usr/bin/env bash
# One core of sluice against one core of Redis (make bench-onecore): the
# first measure of issue #33.
#
# Starts redis-server and one sluice node (GOMAXPROCS=1), both pinned to
# SERVER_CPU (default 0), and drives them with redis-benchmark pinned to
# LOAD_CPU (default 1), -c 50 over 100,000 random keys, unpipelined and
# with -P 16:
#
#   Redis INCR key:<n>                             (the ceiling of a trivial command)
#   sluice RL.ACQUIRE key:<n> RATE 100 BURST 100   (a limit that travels with the call)
#   sluice RL.ACQUIRE acme/api KEY <n>             (a budget node under an enforcing parent)
#
# ROUNDS rounds (default 5), the three workloads in turn and their order
# rotated each round, so that drift in the machine touches each alike
# (a multiple of 3 puts each first equally often).
# Only one server is busy at a time. Prints every figure, then the
# medians and the ratios inline/INCR and enforcing/inline.
#
# Environment: ROUNDS; N_UNPIPELINED (default 200000), N_PIPELINED
# (default 1000000); SERVER_CPU, LOAD_CPU; SLUICE_BIN, a sluice binary to
# run instead of building this tree's (to set two builds side by side).
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh

ROUNDS=${ROUNDS:-5}
N_UNPIPELINED=${N_UNPIPELINED:-200000}
N_PIPELINED=${N_PIPELINED:-1000000}
SERVER_CPU=${SERVER_CPU:-0}
LOAD_CPU=${LOAD_CPU:-1}
for v in ROUNDS N_UNPIPELINED N_PIPELINED; do
  if ! [[ ${!v} =~ ^[1-9][0-9]*$ ]]; then
    echo "$v must be a positive integer (got '${!v}')" >&2
    exit 2
  fi
done
for v in SERVER_CPU LOAD_CPU; do
  if ! [[ ${!v} =~ ^[0-9]+$ ]] || [ "${!v}" -ge "$(nproc)" ]; then
    echo "$v must be a CPU number below $(nproc) (got '${!v}')" >&2
    exit 2
  fi
done
for tool in go redis-server redis-cli redis-benchmark taskset; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "$tool is not installed (redis-server, redis-cli, redis-benchmark: apt-get install redis-server redis-tools; taskset: util-linux)" >&2
    exit 2
  fi
done

TMP=$(mktemp -d "${TMPDIR:-/tmp}/sluice-onecore.XXXXXX")
trap stop_all EXIT
trap 'exit 130' INT TERM

if [ -n "${SLUICE_BIN:-}" ]; then
  cp "$SLUICE_BIN" "$TMP/sluice"
else
  go build -o "$TMP/sluice" ./cmd/sluice
fi
free_port REDIS_PORT
taskset -c "$SERVER_CPU" redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no \
  --dir "$TMP" >"$TMP/redis.log" 2>&1 &
STARTED_PIDS+=($!)
wait_pong "$REDIS_PORT" 30
SLUICE_GOMAXPROCS=1 start_sluice "$TMP/sluice"
taskset -a -pc "$SERVER_CPU" "$SLUICE_PID" >/dev/null # every thread of it
redis-cli -p "$SLUICE_PORT" RL.BUDGET SET acme RATE 1000000000 PER second SHARING enforce >/dev/null
redis-cli -p "$SLUICE_PORT" RL.BUDGET SET acme/api RATE 1000000 PER second SCOPE user >/dev/null

# redis-benchmark counts error replies as answers: check each command's
# reply once before the rounds.
for c in "$REDIS_PORT INCR key:1" "$SLUICE_PORT RL.ACQUIRE key:1 RATE 100 BURST 100" "$SLUICE_PORT RL.ACQUIRE acme/api KEY 1"; do
  # shellcheck disable=SC2086
  if reply=$(redis-cli -p $c 2>&1) && [[ $reply == *ERR* || $reply == *WRONG* ]]; then
    echo "redis-cli -p $c answered an error: $reply" >&2
    exit 1
  fi
done

cpu=$(grep -m1 -E '^(model name|Model|cpu model)' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ *//' || true)
echo "machine   $(nproc) CPUs${cpu:+, $cpu}; load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "versions  $(go version | sed 's/^go version //'); $(redis-server --version | cut -d' ' -f1-3)"
echo "servers   on CPU $SERVER_CPU (sluice GOMAXPROCS=1); redis-benchmark on CPU $LOAD_CPU, -c 50 -r 100000; $ROUNDS rounds"
echo

declare -A FIG # "workload depth" → figures, one a round
run() {
  local w=$1 depth=$2 n=$N_UNPIPELINED port=$SLUICE_PORT cmd rps
  [ "$depth" -eq 1 ] || n=$N_PIPELINED
  case $w in
    incr) port=$REDIS_PORT cmd=(INCR key:__rand_int__) ;;
    inline) cmd=(RL.ACQUIRE key:__rand_int__ RATE 100 BURST 100) ;;
    enforcing) cmd=(RL.ACQUIRE acme/api KEY __rand_int__) ;;
  esac
  rps=$(taskset -c "$LOAD_CPU" redis-benchmark -p "$port" -c 50 -n "$n" -P "$depth" -r 100000 --csv "${cmd[@]}" |
    tail -1 | cut -d, -f2 | tr -d '"')
  if ! [[ $rps =~ ^[0-9.]+$ ]]; then
    echo "redis-benchmark gave no figure for $w -P $depth" >&2
    return 1
  fi
  FIG["$w $depth"]+="$rps "
  printf 'round %d  %-10s  -P %-2d  %10.0f requests/s\n' "$round" "$w" "$depth" "$rps"
}

workloads=(incr inline enforcing)
for round in $(seq 1 "$ROUNDS"); do
  # Rotate the order: each workload goes first, second and third in turn.
  k=$(((round - 1) % 3))
  order=("${workloads[@]:$k}" "${workloads[@]:0:$k}")
  for depth in 1 16; do
    for w in "${order[@]}"; do
      run "$w" "$depth"
    done
  done
done

echo
echo "medians of $ROUNDS rounds, requests/s"
printf '%-6s  %12s  %18s  %22s  %12s  %17s\n' depth "Redis INCR" "RL.ACQUIRE inline" "RL.ACQUIRE enforcing" "inline/INCR" "enforcing/inline"
for depth in 1 16; do
  # shellcheck disable=SC2086
  i=$(median ${FIG["incr $depth"]}) l=$(median ${FIG["inline $depth"]}) e=$(median ${FIG["enforcing $depth"]})
  printf '%-6s  %12s  %18s  %22s  %12s  %17s\n' "-P $depth" "$i" "$l" "$e" \
    "$(awk -v a="$l" -v b="$i" 'BEGIN { printf "%.2f", a / b }')" "$(awk -v a="$e" -v b="$l" 'BEGIN { printf "%.2f", a / b }')"
done
