#!/usr/bin/env bash
# sluice run as envoyproxy/ratelimit beside envoyproxy/ratelimit itself
# with Redis: the same rules, the same gRPC ShouldRateLimit load, side by
# side (make bench-peer).
#
#   PEER_SRC=/path/to/envoyproxy/ratelimit bash bench/peer.sh
#
# PEER_SRC is a checkout of github.com/envoyproxy/ratelimit (any commit; the
# script builds its ./src/service_cmd with the go on PATH, fetching its
# modules through the module proxy), or PEER_BIN an envoyproxy/ratelimit
# binary already built. Nothing of it is kept here. redis-server must be
# installed (Debian: apt-get install redis-server).
#
# Starts redis-server, envoyproxy/ratelimit (BACKEND_TYPE=redis, its
# defaults otherwise, statsd off) and `sluice ratelimit`, each on free
# loopback ports, both reading one runtime directory with one rule:
#
#   domain: bench
#   descriptors:
#     - key: key
#       rate_limit: {unit: minute, requests_per_unit: 1000000000}
#
# and for ROUNDS rounds (default 3), the servers in alternating order,
# drives each with the bench tool: ShouldRateLimit, domain bench, with 1
# and with 5 descriptors (key, key:N) (N over 100,000 keys: a counter per
# value, all admitted), C calls in flight (default 64: -c C/8 -P 8),
# N requests per run (default 100000). Prints every run, then the median
# of each figure per server and descriptor count, and sluice / peer.
# SLUICE_GOMAXPROCS, PEER_GOMAXPROCS and BENCH_GOMAXPROCS set the
# processes' GOMAXPROCS.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh

ROUNDS=${ROUNDS:-3}
N=${N:-100000}
C=${C:-64}
for v in ROUNDS N C; do
  if ! [[ ${!v} =~ ^[1-9][0-9]*$ ]]; then
    echo "$v must be a positive integer (got '${!v}')" >&2
    exit 2
  fi
done
if [ $((C % 8)) -ne 0 ]; then
  echo "C must be a multiple of 8 (8 connections, C/8 calls in flight on each; got $C)" >&2
  exit 2
fi
if [ -z "${PEER_BIN:-}" ] && [ -z "${PEER_SRC:-}" ]; then
  echo "set PEER_SRC to a checkout of github.com/envoyproxy/ratelimit, or PEER_BIN to its built binary" >&2
  exit 2
fi
if [ -n "${PEER_SRC:-}" ] && [ ! -d "${PEER_SRC}/src/service_cmd" ]; then
  echo "PEER_SRC=$PEER_SRC: not a checkout of github.com/envoyproxy/ratelimit (no src/service_cmd)" >&2
  exit 2
fi
if ! command -v redis-server >/dev/null; then
  echo "redis-server is not installed (Debian: apt-get install redis-server)" >&2
  exit 2
fi

TMP=$(mktemp -d "${TMPDIR:-/tmp}/sluice-peer.XXXXXX")
trap stop_all EXIT
trap 'exit 130' INT TERM

go build -o "$TMP/sluice" ./cmd/sluice
go build -o "$TMP/bench" ./bench
PEER=${PEER_BIN:-}
if [ -z "$PEER" ]; then
  PEER=$TMP/peer
  (cd "$PEER_SRC" && go build -o "$PEER" ./src/service_cmd)
fi

mkdir -p "$TMP/runtime/ratelimit/config"
cat >"$TMP/runtime/ratelimit/config/bench.yaml" <<'EOF'
domain: bench
descriptors:
  - key: key
    rate_limit: {unit: minute, requests_per_unit: 1000000000}
EOF
RUNTIME=(RUNTIME_ROOT="$TMP/runtime" RUNTIME_SUBDIRECTORY=ratelimit RUNTIME_WATCH_ROOT=false LOG_LEVEL=warn
  HOST=127.0.0.1 GRPC_HOST=127.0.0.1 DEBUG_HOST=127.0.0.1)

# wait_healthy NAME PORT: /healthcheck on 127.0.0.1:PORT answers 200.
wait_healthy() {
  local deadline=$((SECONDS + 60))
  while [ "$SECONDS" -lt "$deadline" ]; do
    if curl -fsS -o /dev/null "http://127.0.0.1:$2/healthcheck" 2>/dev/null; then
      return 0
    fi
    sleep 0.2
  done
  echo "$1 is not healthy on 127.0.0.1:$2 within 60s; its log:" >&2
  cat "$TMP/$1.log" >&2
  return 1
}

free_port REDIS_PORT
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no >"$TMP/redis.log" 2>&1 &
STARTED_PIDS+=($!)
wait_pong "$REDIS_PORT" 30

declare -A GRPC
for name in sluice peer; do
  free_port http
  free_port grpc
  free_port debug
  GRPC[$name]=$grpc
  if [ "$name" = sluice ]; then
    free_port resp
    free_port raft
    env "${RUNTIME[@]}" PORT="$http" GRPC_PORT="$grpc" DEBUG_PORT="$debug" \
      ${SLUICE_GOMAXPROCS:+GOMAXPROCS=$SLUICE_GOMAXPROCS} "$TMP/sluice" ratelimit \
      --resp-addr "127.0.0.1:$resp" --raft-addr "127.0.0.1:$raft" --data-dir "$TMP/sluice-data" >"$TMP/sluice.log" 2>&1 &
  else
    env "${RUNTIME[@]}" PORT="$http" GRPC_PORT="$grpc" DEBUG_PORT="$debug" USE_STATSD=false BACKEND_TYPE=redis \
      REDIS_SOCKET_TYPE=tcp REDIS_URL="127.0.0.1:$REDIS_PORT" ${PEER_GOMAXPROCS:+GOMAXPROCS=$PEER_GOMAXPROCS} \
      "$PEER" >"$TMP/peer.log" 2>&1 &
  fi
  STARTED_PIDS+=($!)
  wait_healthy "$name" "$http"
done

cpu=$(grep -m1 -E '^(model name|Model|cpu model)' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ *//' || true)
echo "machine   $(nproc) CPUs${cpu:+, $cpu}; load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "versions  $(go version | sed 's/^go version //'); $(redis-server --version | cut -d' ' -f1-3)"
echo "load      ShouldRateLimit domain bench, -c $((C / 8)) -P 8 ($C in flight), $N requests per run, $ROUNDS rounds"
echo

declare -A FIG # "name descriptors" → "rps p50 p99 p999" lines
run() {
  local name=$1 d=$2 out=$TMP/bench.json line
  if ! env ${BENCH_GOMAXPROCS:+GOMAXPROCS=$BENCH_GOMAXPROCS} "$TMP/bench" --grpc -h "127.0.0.1:${GRPC[$name]}" \
    -c $((C / 8)) -P 8 -n "$N" --descriptors "$d" --no-override --json >"$out" 2>"$TMP/bench.err"; then
    echo "the bench tool ($name, $d descriptors) failed:" >&2
    cat "$out" "$TMP/bench.err" >&2
    return 1
  fi
  local rps errs denied p50 p99 p999
  rps=$(sed -n -E 's/^  "throughput_rps": ([0-9.]+),?$/\1/p' "$out")
  errs=$(sed -n -E 's/^  "errors": ([0-9]+),?$/\1/p' "$out")
  p50=$(sed -n -E 's/^    "p50": ([0-9]+),?$/\1/p' "$out")
  p99=$(sed -n -E 's/^    "p99": ([0-9]+),?$/\1/p' "$out")
  p999=$(sed -n -E 's/^    "p999": ([0-9]+),?$/\1/p' "$out")
  denied=$(sed -n -E 's/^  "denied": ([0-9]+),?$/\1/p' "$out")
  if [ "$errs" != 0 ] || [ "$denied" != 0 ]; then
    echo "$name, $d descriptors: $errs errors, $denied refused (the rule admits every request):" >&2
    cat "$out" >&2
    return 1
  fi
  line="$rps $p50 $p99 $p999"
  FIG["$name $d"]+="$line"$'\n'
  printf 'round %d  %-6s  descriptors %d  %10.0f requests/s  p50 %6d µs  p99 %6d µs  p99.9 %6d µs\n' \
    "$round" "$name" "$d" "$rps" "$p50" "$p99" "$p999"
}

for round in $(seq 1 "$ROUNDS"); do
  order=(sluice peer)
  [ $((round % 2)) -eq 1 ] || order=(peer sluice)
  for d in 1 5; do
    for name in "${order[@]}"; do
      run "$name" "$d"
    done
  done
done

# median COLUMN NAME D: the median of a figure over the rounds.
median() {
  printf '%s' "${FIG["$2 $3"]}" | awk -v c="$1" 'NF { print $c }' | sort -g | awk '{ v[NR] = $1 } END {
    if (NR % 2) printf "%.0f", v[(NR + 1) / 2]; else printf "%.0f", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
echo
echo "medians of $ROUNDS rounds"
printf '%-28s  %-11s  %12s  %8s  %8s  %10s\n' server descriptors requests/s "p50 µs" "p99 µs" "p99.9 µs"
for d in 1 5; do
  for name in sluice peer; do
    label="sluice ratelimit"
    [ "$name" = sluice ] || label="envoyproxy/ratelimit + Redis"
    printf '%-28s  %-11s  %12s  %8s  %8s  %10s\n' "$label" "$d" "$(median 1 "$name" "$d")" "$(median 2 "$name" "$d")" \
      "$(median 3 "$name" "$d")" "$(median 4 "$name" "$d")"
  done
  printf '%-28s  %-11s  %12s\n' "sluice / peer" "$d" \
    "$(awk -v a="$(median 1 sluice "$d")" -v b="$(median 1 peer "$d")" 'BEGIN { printf "%.2f", a / b }')"
done
