#!/usr/bin/env bash
# The rate-limit libraries' calls through sluice beside the same calls
# through Redis (make bench-libraries): the figures of the "The libraries'
# calls beside Redis" section of docs/benchmarks.md.
#
#   bash bench/libraries.sh [RESULTS]
#
# It builds sluice and bench/libcalls, starts redis-server, a sluice node,
# a second node with --script-native=false (every script in the Lua
# interpreter) and a cluster of three nodes, every server pinned to
# SERVER_CPUS (default: the last CPU) and every client to CLIENT_CPUS
# (default: the others; on one CPU nothing is pinned). Then, ROUNDS times
# (default 3), the targets taking turns:
#
# 1. Each library's own call, unchanged, DURATION seconds (default 5;
#    SKIP_CALLS=1 leaves this part out):
#    go-redis/redis_rate Allow (bench/libcalls, 32 goroutines),
#    rate-limiter-flexible consume and rate-limit-redis increment
#    (bench/libcalls.js, 32 calls in flight), Python limits' fixed- and
#    moving-window hit (bench/libcalls.py, 8 threads) — against Redis, one
#    node, the interpreter node, and the three nodes with one library
#    instance per node.
# 2. The recognised scripts alone, as the libraries loaded them in 1:
#    redis-benchmark -c 50 -r 100000 (-P 1 and -P 16) of EVALSHA of each
#    against Redis, the node and the interpreter node, with GOMAXPROCS=1:
#    one core each. Redis INCR and RL.ACQUIRE inline beside them.
#
# It prints the medians as markdown tables. Needs: go, redis-server,
# redis-benchmark, node with SLUICE_NODE_MODULES holding ioredis,
# rate-limiter-flexible and rate-limit-redis (.ci/run's list), python3 with
# limits (Debian's python3-limits), taskset.
set -euo pipefail
cd "$(dirname "$0")/.."
RESULTS=${1:-}
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-5}
N=${N:-300000}
NCPU=$(nproc)
SERVER_CPUS=${SERVER_CPUS:-$((NCPU - 1))}
CLIENT_CPUS=${CLIENT_CPUS:-0-$((NCPU > 1 ? NCPU - 2 : 0))}
PY=${PYTHON:-/usr/bin/python3}
NM=${SLUICE_NODE_MODULES:?set SLUICE_NODE_MODULES to the folder holding node_modules (ioredis, rate-limiter-flexible, rate-limit-redis)}
TMP=$(mktemp -d)
# shellcheck source=bench/lib.sh
source bench/lib.sh
trap stop_all EXIT

pin() { # pin CPUS CMD...: run CMD on CPUS (unpinned on one CPU)
  local cpus=$1
  shift
  if [ "$NCPU" -gt 1 ]; then taskset -c "$cpus" "$@"; else "$@"; fi
}

go build -o "$TMP/sluice" ./cmd/sluice
go build -o "$TMP/libcalls" ./bench/libcalls

free_port REDIS
pin "$SERVER_CPUS" redis-server --port "$REDIS" --bind 127.0.0.1 --save '' --appendonly no >"$TMP/redis.log" 2>&1 &
STARTED_PIDS+=($!)
wait_pong "$REDIS" 30

# node NAME RESP RAFT [FLAG...]: one sluice node, one core, data in $TMP/NAME.
node() {
  local name=$1 resp=$2 raft=$3
  shift 3
  (GOMAXPROCS=${NODE_PROCS:-1} exec taskset -c "$SERVER_CPUS" "$TMP/sluice" --node-id "$name" --resp-addr "127.0.0.1:$resp" \
    --advertise "127.0.0.1:$resp" --raft-addr "127.0.0.1:$raft" --http-addr '' --data-dir "$TMP/$name" "$@") >"$TMP/$name.log" 2>&1 &
  STARTED_PIDS+=($!)
}
free_port ONE; free_port ONE_RAFT; node one "$ONE" "$ONE_RAFT"
free_port INT; free_port INT_RAFT; node interp "$INT" "$INT_RAFT" --script-native=false
PEERS=""
C=()
for i in 1 2 3; do
  free_port CPORT; free_port CRAFT
  C+=("$CPORT")
  PEERS="$PEERS${PEERS:+,}c$i=127.0.0.1:$CRAFT=127.0.0.1:$CPORT"
  eval "C${i}_RAFT=$CRAFT"
done
for i in 1 2 3; do
  r=C${i}_RAFT
  node "c$i" "${C[$((i - 1))]}" "${!r}" --bootstrap-peers "$PEERS"
done
for p in "$ONE" "$INT" "${C[@]}"; do wait_pong "$p" 60; done
# The cluster answers data commands once its members agree on a leader.
for i in $(seq 1 300); do
  if redis-cli -p "${C[0]}" SET bench:ready 1 2>/dev/null | grep -q OK; then break; fi
  sleep 0.2
done
THREE=$(IFS=,; echo "${C[*]}")

declare -A TARGET=([redis]=$REDIS [sluice]=$ONE [interpreter]=$INT [three-nodes]=$THREE)
ORDER=(redis sluice interpreter three-nodes)
OUT="$TMP/out"
: >"$OUT"
record() { echo "$1|$2|$3" >>"$OUT"; } # record TABLE ROW/COLUMN VALUE

calls() { # calls LIB PORTS: one library's calls/s
  local lib=$1 ports=$2 addrs=""
  case $lib in
  redis_rate)
    for p in ${ports//,/ }; do addrs="$addrs${addrs:+,}127.0.0.1:$p"; done
    pin "$CLIENT_CPUS" "$TMP/libcalls" -addrs "$addrs" -duration "${DURATION}s" ;;
  rate-limiter-flexible) NODE_PATH="$NM/node_modules" pin "$CLIENT_CPUS" node bench/libcalls.js flexible "$ports" 32 "$DURATION" ;;
  rate-limit-redis) NODE_PATH="$NM/node_modules" pin "$CLIENT_CPUS" node bench/libcalls.js store "$ports" 32 "$DURATION" ;;
  limits-fixed) pin "$CLIENT_CPUS" "$PY" bench/libcalls.py fixed "$ports" 8 "$DURATION" ;;
  limits-moving) pin "$CLIENT_CPUS" "$PY" bench/libcalls.py moving "$ports" 8 "$DURATION" ;;
  esac | awk '{print $1}'
}

LIBS=(redis_rate rate-limiter-flexible rate-limit-redis limits-fixed limits-moving)
for round in $(seq 1 "$ROUNDS"); do
  [ -n "${SKIP_CALLS:-}" ] && break
  for lib in "${LIBS[@]}"; do
    for t in "${ORDER[@]}"; do
      v=$(calls "$lib" "${TARGET[$t]}")
      record calls "$lib/$t" "$v"
      echo "round $round: $lib through $t: $v calls/s" >&2
    done
  done
done

# The scripts as the libraries loaded them (docs/redis-libraries.md lists
# the SHA-1s), with the arguments each sends.
declare -A SCRIPT=(
  [redis_rate-allowN]="EVALSHA f52a5b566060d79fd321d695df55bc918339c4aa 1 rr:__rand_int__ 100 100 60 1"
  [rate-limiter-flexible]="EVALSHA a1de965f42e177aa339706bd580f049065eca79a 1 fl:__rand_int__ 1 60"
  [rate-limit-redis-increment]="EVALSHA 81dbecea94d2d10514719b20ed51faf711529d9d 1 st:__rand_int__ 0 60000"
  [limits-incr_expire]="EVALSHA 628bd136a573a06b346879695681af12ccef300f 1 lf:__rand_int__ 60 1"
  [limits-acquire_moving_window]="EVALSHA d19f37c18768a509dbf1310a257bfc35be65609f 1 lm:__rand_int__ 1733097600.5 100 60 1"
  [INCR]="INCR c:__rand_int__"
  [RL.ACQUIRE]="RL.ACQUIRE a:__rand_int__ RATE 100 BURST 100"
)
SCRIPTS=(redis_rate-allowN rate-limiter-flexible rate-limit-redis-increment limits-incr_expire limits-acquire_moving_window INCR RL.ACQUIRE)
# Each library loads its scripts itself (a second of its calls), on every
# server, whether part 1 ran or not.
for t in redis sluice interpreter; do
  for lib in "${LIBS[@]}"; do DURATION=1 calls "$lib" "${TARGET[$t]}" >/dev/null; done
done
for round in $(seq 1 "$ROUNDS"); do
  for P in 1 16; do
    for s in "${SCRIPTS[@]}"; do
      for t in redis sluice interpreter; do
        [ "$s" = RL.ACQUIRE ] && [ "$t" = redis ] && continue
        # shellcheck disable=SC2086
        v=$(pin "$CLIENT_CPUS" redis-benchmark -p "${TARGET[$t]}" -c 50 -P "$P" -n "$N" -r 100000 -q ${SCRIPT[$s]} |
          tr '\r' '\n' | awk '/requests per second/ {for (i = 2; i <= NF; i++) if ($i == "requests") v = $(i - 1)} END {print v}')
        record "p$P" "$s/$t" "$v"
        echo "round $round: -P $P $s on $t: $v/s" >&2
      done
    done
  done
done

median() { sort -n | awk '{a[NR]=$1} END {if (NR) print a[int((NR+1)/2)]; else print "-"}'; }
cell() { grep -F "$1|$2|" "$OUT" | cut -d'|' -f3 | median; }
table() { # table NAME TITLE ROWS... : rows × ORDER columns
  local name=$1 title=$2 row t
  shift 2
  echo
  echo "$title"
  echo
  printf '| |'; for t in "$@"; do printf ' %s |' "$t"; done; echo
  printf '|---|'; for t in "$@"; do printf -- '---|'; done; echo
  for row in "${ROWS[@]}"; do
    printf '| %s |' "$row"
    for t in "$@"; do printf ' %s |' "$(cell "$name" "$row/$t")"; done
    echo
  done
}
{
  echo "machine: $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), servers on CPU $SERVER_CPUS, clients on $CLIENT_CPUS; $ROUNDS rounds, medians"
  ROWS=("${LIBS[@]}")
  table calls "Library calls per second (each library's own call, ${DURATION} s a round)" "${ORDER[@]}"
  ROWS=("${SCRIPTS[@]}")
  table p1 "One core each, redis-benchmark -c 50 -P 1 -r 100000 (requests/s)" redis sluice interpreter
  table p16 "One core each, redis-benchmark -c 50 -P 16 -r 100000 (requests/s)" redis sluice interpreter
} | tee "${RESULTS:-/dev/null}"
