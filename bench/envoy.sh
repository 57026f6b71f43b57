#!/usr/bin/env bash
# ShouldRateLimit over gRPC beside RL.ACQUIRE over RESP (make bench-envoy):
# builds sluice and the bench tool, starts one node with --grpc-addr (and
# rules for the domain bench) on free loopback ports, and for ROUNDS rounds (default 3) runs back to back
#   RESP:  RL.ACQUIRE key:N RATE 1000000000 PER minute   (-c C -P 1)
#   gRPC:  ShouldRateLimit domain bench, descriptor (key, key:N) with a
#          limit override of 1000000000 per minute        (-c C/8 -P 8)
# so that both keep C calls in flight, unpipelined, over the same keys and
# a limit that admits them all. N requests per run (default 200000), C
# (default 64). Prints one JSON report per run. SLUICE_GOMAXPROCS and
# BENCH_GOMAXPROCS split the CPUs as in compare.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh

ROUNDS=${ROUNDS:-3}
N=${N:-200000}
C=${C:-64}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/sluice-envoy.XXXXXX")
trap stop_all EXIT
trap 'exit 130' INT TERM

go build -o "$TMP/sluice" ./cmd/sluice
go build -o "$TMP/bench" ./bench
free_port GRPC_PORT
# A limit override counts only in a domain with rules (as in
# envoyproxy/ratelimit): the domain bench has rules, none of which match.
printf 'domain: bench\n' > "$TMP/rules.yaml"
start_sluice "$TMP/sluice" --grpc-addr "127.0.0.1:$GRPC_PORT" --envoy-config "$TMP/rules.yaml"

bench() {
  if [ -n "${BENCH_GOMAXPROCS:-}" ]; then
    GOMAXPROCS="$BENCH_GOMAXPROCS" "$TMP/bench" "$@"
  else
    "$TMP/bench" "$@"
  fi
}
for round in $(seq 1 "$ROUNDS"); do
  echo "# round $round: RESP RL.ACQUIRE"
  bench -h "127.0.0.1:$SLUICE_PORT" -c "$C" -P 1 -n "$N" --rate 1000000000 --burst 1000000000 --per minute --json
  echo "# round $round: gRPC ShouldRateLimit"
  bench --grpc -h "127.0.0.1:$GRPC_PORT" -c $((C / 8)) -P 8 -n "$N" --rate 1000000000 --per minute --json
done
