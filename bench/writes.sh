#!/usr/bin/env bash
# Configuration writes and replay on one node (docs/benchmarks.md):
# N1 distinct RL.BUDGET SETs on a fresh node, then N2 in all, a restart on
# the same data directory, and the time until /readyz says 200.
#   N1=10000 N2=100000 bash bench/writes.sh
set -euo pipefail
cd "$(dirname "$0")/.."
N1=${N1:-10000}
N2=${N2:-100000}
CONNS=${CONNS:-64}
dir=$(mktemp -d)
trap 'kill $pid 2>/dev/null || true; rm -rf "$dir"' EXIT
go build -o "$dir/sluice" ./cmd/sluice
go build -o "$dir/writes" ./bench/writes
ports=(6395 9395 7395)
start() {
  "$dir/sluice" --resp-addr 127.0.0.1:${ports[0]} --http-addr 127.0.0.1:${ports[1]} --raft-addr 127.0.0.1:${ports[2]} \
    --data-dir "$dir/data" 2>>"$dir/log" &
  pid=$!
}
start
"$dir/writes" --ready 127.0.0.1:${ports[1]} >/dev/null
echo "== $N1 writes on a fresh node"
"$dir/writes" --addr 127.0.0.1:${ports[0]} -n "$N1" -c "$CONNS" --prefix a
echo "== $((N2 - N1)) more writes"
"$dir/writes" --addr 127.0.0.1:${ports[0]} -n $((N2 - N1)) -c "$CONNS" --prefix b
kill -TERM $pid; wait $pid || true
echo "== restart with $N2 entries in the data directory ($(du -sh "$dir/data" | cut -f1))"
t0=$(date +%s%N)
start
"$dir/writes" --ready 127.0.0.1:${ports[1]} --since "$t0"
echo "budgets after the restart: $(redis-cli -p ${ports[0]} INFO raft | grep '^budgets:' | tr -d '\r')"
