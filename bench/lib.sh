# Shell helpers of the benchmark scripts (sourced, not run): free loopback
# ports, waiting for a RESP server, starting sluice, stopping what was
# started. The caller sets -euo pipefail and TMP (a scratch directory).

# Every process started through these helpers, stopped by stop_all.
STARTED_PIDS=()
TAKEN_PORTS=" "

# free_port VAR sets VAR to a loopback TCP port nobody listens on. Ports
# come from 20000–32767, below Linux's ephemeral range, so an outgoing
# connection cannot be holding one; a port is never handed out twice.
free_port() {
  local p i
  for i in $(seq 1 500); do
    p=$((20000 + RANDOM % 12768))
    case "$TAKEN_PORTS" in *" $p "*) continue ;; esac
    # A refused connection means nobody listens there.
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
      TAKEN_PORTS="$TAKEN_PORTS$p "
      printf -v "$1" '%s' "$p"
      return 0
    fi
  done
  echo "no free loopback port found" >&2
  return 1
}

# wait_pong PORT SECONDS waits until 127.0.0.1:PORT answers PING with PONG,
# using bash's /dev/tcp so that no Redis client is needed.
wait_pong() {
  local port=$1 deadline=$((SECONDS + $2)) line
  while [ "$SECONDS" -lt "$deadline" ]; do
    # The braces confine 2>/dev/null to the attempt; on a bare exec it
    # would silence the script's stderr from then on.
    if { exec 3<>"/dev/tcp/127.0.0.1/$port"; } 2>/dev/null; then
      printf '*1\r\n$4\r\nPING\r\n' >&3
      line=""
      read -r -t 2 line <&3 || true
      exec 3>&-
      if [ "${line%$'\r'}" = "+PONG" ]; then
        return 0
      fi
    fi
    sleep 0.1
  done
  return 1
}

# start_sluice BINARY [FLAG...] sets SLUICE_PORT and SLUICE_PID: one node on
# free loopback ports, HTTP off, data in $TMP, with FLAGs added.
# SLUICE_GOMAXPROCS, if set, is the server's GOMAXPROCS (and only the
# server's).
start_sluice() {
  local bin=$1 raft
  shift
  free_port SLUICE_PORT
  free_port raft
  (
    if [ -n "${SLUICE_GOMAXPROCS:-}" ]; then
      export GOMAXPROCS="$SLUICE_GOMAXPROCS"
    fi
    exec "$bin" --resp-addr "127.0.0.1:$SLUICE_PORT" --http-addr '' \
      --raft-addr "127.0.0.1:$raft" --data-dir "$TMP/sluice-data" "$@"
  ) >"$TMP/sluice.log" 2>&1 &
  SLUICE_PID=$!
  STARTED_PIDS+=("$SLUICE_PID")
  if ! wait_pong "$SLUICE_PORT" 30; then
    echo "sluice did not answer PING on 127.0.0.1:$SLUICE_PORT within 30s; its log:" >&2
    cat "$TMP/sluice.log" >&2
    return 1
  fi
}

# stop_all stops every started process (SIGTERM, then SIGKILL after 10s)
# and removes $TMP. It is the scripts' EXIT trap.
stop_all() {
  local pid i
  for pid in "${STARTED_PIDS[@]}"; do
    kill -TERM "$pid" 2>/dev/null || true
  done
  for pid in "${STARTED_PIDS[@]}"; do
    for i in $(seq 1 100); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  STARTED_PIDS=()
  if [ -n "${TMP:-}" ] && [ -d "$TMP" ]; then
    rm -rf "$TMP"
  fi
}

# median FIGURE... prints the median of the figures, rounded to a whole
# number (of an even count, the mean of the middle two). Scripts whose
# figures are kept otherwise define their own.
median() {
  printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END {
    if (NR % 2) printf "%.0f", v[(NR + 1) / 2]; else printf "%.0f", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
