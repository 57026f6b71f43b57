#!/usr/bin/env bash
# Sets sluice against Redis on this machine (make bench-compare).
#
# Starts redis-server and one sluice node on free loopback ports, loads
# bench/token_bucket.lua (a Lua token bucket answering like RL.ACQUIRE)
# into Redis, then for ROUNDS rounds measures, interleaved so that drift
# in the machine touches every workload alike:
#
#   Redis INCR                                   (the ceiling of a trivial command)
#   Redis EVALSHA <sha> 1 key:<n> 100 100        (the usual Redis rate limiter)
#   sluice RL.ACQUIRE key:<n> RATE 100 BURST 100
#
# each unpipelined and with -P 16, with -c 50 -r 100000, first with
# redis-benchmark, then with the bench tool. It prints every figure and
# at the end the medians and the ratios sluice/INCR and sluice/EVALSHA.
#
# Environment: ROUNDS (default 3); N_UNPIPELINED (default 200000) and
# N_PIPELINED (default 1000000) requests per run, or N for both;
# SLUICE_GOMAXPROCS, the GOMAXPROCS of the sluice process only;
# BENCH_GOMAXPROCS, that of the bench tool (on a small machine the tool
# and the server share the CPUs, and a single-threaded server such as
# Redis can gain when the tool keeps to one).
# Run from anywhere: bash bench/compare.sh
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh

ROUNDS=${ROUNDS:-3}
N_UNPIPELINED=${N_UNPIPELINED:-${N:-200000}}
N_PIPELINED=${N_PIPELINED:-${N:-1000000}}
CONNS=50
KEYS=100000
DEPTH=16
RATE=100
BURST=100

for v in ROUNDS N_UNPIPELINED N_PIPELINED; do
  if ! [[ ${!v} =~ ^[1-9][0-9]*$ ]]; then
    echo "$v must be a positive integer (got '${!v}')" >&2
    exit 2
  fi
done
for v in SLUICE_GOMAXPROCS BENCH_GOMAXPROCS; do
  if [ -n "${!v:-}" ] && ! [[ ${!v} =~ ^[1-9][0-9]*$ ]]; then
    echo "$v must be a positive integer (got '${!v}')" >&2
    exit 2
  fi
done
for tool in go redis-server redis-cli redis-benchmark; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "$tool is not installed (apt-get install redis-server redis-tools)" >&2
    exit 2
  fi
done

TMP=$(mktemp -d "${TMPDIR:-/tmp}/sluice-compare.XXXXXX")
trap stop_all EXIT
trap 'exit 130' INT TERM

cpu=$(grep -m1 -E '^(model name|Model|cpu model)' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ *//' || true)
echo "machine   $(nproc) CPUs, ${cpu:-unknown CPU}, $(uname -srm)"
echo "versions  $(go version | sed 's/^go version //'); $(redis-server --version | cut -d' ' -f1-3); $(redis-benchmark --version)"

go build -o "$TMP/sluice" ./cmd/sluice
go build -o "$TMP/bench" ./bench
echo "sluice    $("$TMP/sluice" version), GOMAXPROCS ${SLUICE_GOMAXPROCS:-unset (all CPUs)}; bench tool GOMAXPROCS ${BENCH_GOMAXPROCS:-unset (all CPUs)}"
echo "load      -c $CONNS -r $KEYS; $N_UNPIPELINED requests unpipelined, $N_PIPELINED with -P $DEPTH; $ROUNDS rounds"
echo

free_port REDIS_PORT
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no \
  --dir "$TMP" --logfile "$TMP/redis.log" &
STARTED_PIDS+=("$!")
if ! wait_pong "$REDIS_PORT" 30; then
  echo "redis-server did not answer PING on 127.0.0.1:$REDIS_PORT; its log:" >&2
  cat "$TMP/redis.log" >&2
  exit 1
fi
SHA=$(redis-cli -p "$REDIS_PORT" SCRIPT LOAD "$(cat bench/token_bucket.lua)")
start_sluice "$TMP/sluice"

# Both limiters must answer a first call the same way before they are timed.
lua=$(redis-cli -p "$REDIS_PORT" EVALSHA "$SHA" 1 key:check $RATE $BURST | tr '\n' ' ')
rl=$(redis-cli -p "$SLUICE_PORT" RL.ACQUIRE key:check RATE $RATE BURST $BURST | tr '\n' ' ')
echo "first call  Redis Lua: $lua"
echo "            sluice:    $rl"
if [ "$lua" != "$rl" ]; then
  echo "the Lua token bucket and RL.ACQUIRE disagree on a first call" >&2
  exit 1
fi
echo

# The workloads: name, port, redis-benchmark arguments, bench tool mix.
NAMES=(incr evalsha sluice)
declare -A PORT=([incr]=$REDIS_PORT [evalsha]=$REDIS_PORT [sluice]=$SLUICE_PORT)
declare -A LABEL=([incr]="Redis INCR" [evalsha]="Redis EVALSHA" [sluice]="sluice RL.ACQUIRE")
declare -A RB_ARGS=(
  [incr]="-t incr"
  [evalsha]="EVALSHA $SHA 1 key:__rand_int__ $RATE $BURST"
  [sluice]="RL.ACQUIRE key:__rand_int__ RATE $RATE BURST $BURST"
)
declare -A MIX=([incr]="incr=1" [evalsha]="evalsha=1" [sluice]="acquire=1")
declare -A FIGURES # "tool name depth" → figures of every round

# redis_benchmark NAME DEPTH N prints the requests per second.
redis_benchmark() {
  local name=$1 depth=$2 n=$3 out=$TMP/rb.out rps
  # shellcheck disable=SC2086 # RB_ARGS holds several words
  redis-benchmark -h 127.0.0.1 -p "${PORT[$name]}" -c $CONNS -n "$n" -r $KEYS -P "$depth" -q \
    ${RB_ARGS[$name]} >"$out" 2>&1 || true
  rps=$(tr '\r' '\n' <"$out" | sed -n -E 's/.*: ([0-9.]+) requests per second.*/\1/p' | tail -1)
  if [ -z "$rps" ]; then
    echo "redis-benchmark ($name, -P $depth) gave no figure:" >&2
    tr '\r' '\n' <"$out" | tail -5 >&2
    return 1
  fi
  echo "$rps"
}

# bench_tool NAME DEPTH N prints the requests per second.
bench_tool() {
  local name=$1 depth=$2 n=$3 out=$TMP/bench.json rps
  if ! env ${BENCH_GOMAXPROCS:+GOMAXPROCS=$BENCH_GOMAXPROCS} "$TMP/bench" -h "127.0.0.1:${PORT[$name]}" -c $CONNS -n "$n" -r $KEYS -P "$depth" \
    --mix "${MIX[$name]}" --rate $RATE --burst $BURST --evalsha "$SHA" --json >"$out" 2>"$TMP/bench.err"; then
    echo "the bench tool ($name, -P $depth) failed:" >&2
    cat "$out" "$TMP/bench.err" >&2
    return 1
  fi
  rps=$(sed -n -E 's/^  "throughput_rps": ([0-9.]+),?$/\1/p' "$out")
  echo "$rps"
}

for round in $(seq 1 "$ROUNDS"); do
  for tool in redis-benchmark bench; do
    for depth in 1 $DEPTH; do
      n=$N_UNPIPELINED
      [ "$depth" -eq 1 ] || n=$N_PIPELINED
      for name in "${NAMES[@]}"; do
        if [ "$tool" = redis-benchmark ]; then
          rps=$(redis_benchmark "$name" "$depth" "$n")
        else
          rps=$(bench_tool "$name" "$depth" "$n")
        fi
        FIGURES["$tool $name $depth"]+="$rps "
        printf 'round %d  %-15s  -P %-2d  %-18s %12.0f requests/s\n' "$round" "$tool" "$depth" "${LABEL[$name]}" "$rps"
      done
    done
  done
done

# median FIGURES… prints the median.

echo
echo "medians of $ROUNDS rounds, requests/s (-c $CONNS -r $KEYS)"
printf '%-15s  %-5s  %12s  %14s  %18s  %11s  %14s\n' tool depth "Redis INCR" "Redis EVALSHA" "sluice RL.ACQUIRE" sluice/INCR sluice/EVALSHA
for tool in redis-benchmark bench; do
  for depth in 1 $DEPTH; do
    declare -A med=()
    for name in "${NAMES[@]}"; do
      # shellcheck disable=SC2086 # the figures are words
      med[$name]=$(median ${FIGURES["$tool $name $depth"]})
    done
    printf '%-15s  %-5s  %12s  %14s  %18s  %11s  %14s\n' "$tool" "-P $depth" \
      "${med[incr]}" "${med[evalsha]}" "${med[sluice]}" \
      "$(awk -v a="${med[sluice]}" -v b="${med[incr]}" 'BEGIN { printf "%.2f", a / b }')" \
      "$(awk -v a="${med[sluice]}" -v b="${med[evalsha]}" 'BEGIN { printf "%.2f", a / b }')"
    unset med
  done
done

# Each round measures the three workloads back to back, so a round's ratio
# compares figures taken under the same conditions; the median of those
# paired ratios is less sensitive to the machine's drift than the ratio of
# the medians above.
ratio_median() { # tool depth base
  local tool=$1 depth=$2 base=$3 s b i
  read -r -a s <<<"${FIGURES["$tool sluice $depth"]}"
  read -r -a b <<<"${FIGURES["$tool $base $depth"]}"
  for i in "${!s[@]}"; do
    awk -v a="${s[$i]}" -v c="${b[$i]}" 'BEGIN { printf "%.4f\n", a / c }'
  done | sort -g | awk '{ v[NR] = $1 } END {
    if (NR % 2) printf "%.2f", v[(NR + 1) / 2]; else printf "%.2f", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
echo
echo "median of the per-round ratios"
printf '%-15s  %-5s  %11s  %14s\n' tool depth sluice/INCR sluice/EVALSHA
for tool in redis-benchmark bench; do
  for depth in 1 $DEPTH; do
    printf '%-15s  %-5s  %11s  %14s\n' "$tool" "-P $depth" "$(ratio_median "$tool" "$depth" incr)" "$(ratio_median "$tool" "$depth" evalsha)"
  done
done
