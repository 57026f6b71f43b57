#!/usr/bin/env bash
# A short smoke benchmark (make bench): builds sluice, starts one node on
# free loopback ports, runs the bench tool for 20000 inline RL.ACQUIREs
# and prints its report, then stops the node and checks that it exited
# cleanly. Extra arguments go to the bench tool.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh

TMP=$(mktemp -d "${TMPDIR:-/tmp}/sluice-bench.XXXXXX")
trap stop_all EXIT
trap 'exit 130' INT TERM

go build -o "$TMP/sluice" ./cmd/sluice
start_sluice "$TMP/sluice"
echo "sluice on 127.0.0.1:$SLUICE_PORT (pid $SLUICE_PID)"

go run ./bench -h "127.0.0.1:$SLUICE_PORT" -n 20000 --mix acquire=100 "$@"

kill -TERM "$SLUICE_PID"
if ! wait "$SLUICE_PID"; then
  echo "sluice did not exit cleanly on SIGTERM; its log:" >&2
  cat "$TMP/sluice.log" >&2
  exit 1
fi
STARTED_PIDS=()
