#!/usr/bin/env bash
# Memory per live bucket: sluice against Redis running the Lua token bucket
# (make bench-memory).
#
# Loads N distinct keys user:0 … user:N-1 (default 1,000,000) into each
# server with limits that keep every bucket live for an hour, through
# redis-cli --pipe, and reads the heap before and after:
#
#   sluice  RL.ACQUIRE user:<i> RATE 1 PER hour BURST 100, then MEMORY PURGE
#           (a full GC) and INFO memory used_memory (the live Go heap)
#   Redis   EVALSHA <token_bucket.lua> 1 user:<i> 0.000277… 100 (1/hour),
#           INFO memory used_memory (jemalloc's allocated bytes)
#
# and prints (after − before − key bytes) / N for each: what a bucket costs
# beyond the bytes of its key.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh

N=${N:-1000000}
if ! [[ $N =~ ^[1-9][0-9]*$ ]]; then
  echo "N must be a positive integer (got '$N')" >&2
  exit 2
fi
for tool in go redis-server redis-cli; do
  command -v "$tool" >/dev/null 2>&1 || { echo "$tool is required (apt-get install redis-server redis-tools)" >&2; exit 2; }
done
TMP=$(mktemp -d)
trap stop_all EXIT

used_memory() { redis-cli -p "$1" INFO memory | tr -d '\r' | awk -F: '$1 == "used_memory" { print $2 }'; }
# key_bytes: the bytes of the keys user:0 … user:N-1.
key_bytes=$(awk -v n="$N" 'BEGIN { b = 0; for (d = 1; d <= 7; d++) { lo = (d == 1) ? 0 : 10^(d-1); hi = 10^d - 1; if (hi > n - 1) hi = n - 1; if (hi >= lo) b += (hi - lo + 1) * (5 + d) } print b }')

go build -o "$TMP/sluice" ./cmd/sluice
start_sluice "$TMP/sluice"
redis-cli -p "$SLUICE_PORT" MEMORY PURGE >/dev/null
before=$(used_memory "$SLUICE_PORT")
awk -v n="$N" 'BEGIN { for (i = 0; i < n; i++) printf "RL.ACQUIRE user:%d RATE 1 PER hour BURST 100\r\n", i }' |
  redis-cli -p "$SLUICE_PORT" --pipe >/dev/null
redis-cli -p "$SLUICE_PORT" MEMORY PURGE >/dev/null
after=$(used_memory "$SLUICE_PORT")
live=$(redis-cli -p "$SLUICE_PORT" DBSIZE)
sluice_per=$(awk -v a="$after" -v b="$before" -v k="$key_bytes" -v n="$live" 'BEGIN { printf "%.1f", (a - b - k) / n }')

free_port REDIS_PORT
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no >"$TMP/redis.log" 2>&1 &
STARTED_PIDS+=("$!")
wait_pong "$REDIS_PORT" 30
sha=$(redis-cli -p "$REDIS_PORT" SCRIPT LOAD "$(cat bench/token_bucket.lua)")
rbefore=$(used_memory "$REDIS_PORT")
awk -v n="$N" -v sha="$sha" 'BEGIN { for (i = 0; i < n; i++) printf "EVALSHA %s 1 user:%d 0.000277778 100\r\n", sha, i }' |
  redis-cli -p "$REDIS_PORT" --pipe >/dev/null
rafter=$(used_memory "$REDIS_PORT")
rlive=$(redis-cli -p "$REDIS_PORT" DBSIZE)
redis_per=$(awk -v a="$rafter" -v b="$rbefore" -v k="$key_bytes" -v n="$rlive" 'BEGIN { printf "%.1f", (a - b - k) / n }')

echo "machine   $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(uname -sr)"
echo "versions  $(go version | cut -d' ' -f3); $(redis-server --version | cut -d' ' -f3)"
echo "keys      $N distinct (user:0 … user:$((N - 1)), $key_bytes key bytes)"
printf '%-34s %12s %14s %12s %22s\n' "server" "live keys" "heap before" "heap after" "bytes/bucket beyond key"
printf '%-34s %12s %14s %12s %22s\n' "sluice RL.ACQUIRE (Go heap, GC'd)" "$live" "$before" "$after" "$sluice_per"
printf '%-34s %12s %14s %12s %22s\n' "Redis EVALSHA Lua token bucket" "$rlive" "$rbefore" "$rafter" "$redis_per"
