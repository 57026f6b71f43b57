#!/usr/bin/env bash
# How sluice scales with cores (make bench-scaling): every figure of the
# "Scaling with cores" section of docs/benchmarks.md, from binaries built
# once and carried to the machine that measures them.
#
#   bash bench/scaling.sh bundle [DIR]  build the bundle into DIR (default
#                                       bin/scaling) and DIR.tar.gz
#   bash DIR/scaling.sh run [RESULTS]   run it: no Go, no network needed
#   bash bench/scaling.sh               both, here, in a temporary folder
#
# The bundle holds static binaries (CGO_ENABLED=0) of sluice, of the bench
# tool, and of the engine and budget test binaries; with BASELINE=<git
# revision> the same built from that revision too (the parallel benchmarks
# copied in from this tree), so that one run measures before and after
# alternately. It also holds redis-server, redis-cli and redis-benchmark
# of this machine with every shared library they load, the dynamic loader
# included, so that they start on a machine without Redis (BUNDLE_REDIS=0
# leaves them out; the run then takes REDIS_SERVER, REDIS_CLI and
# REDIS_BENCHMARK, default: the bundled ones, else those on the PATH).
# The target needs bash, awk, sort, and taskset (util-linux) to pin.
#
# The run has two parts (SKIP_GO=1 or SKIP_E2E=1 leaves one out):
#
# 1. go test -bench of the parallel benchmarks, -cpu $CPUS (default
#    1,2,4,8,16), ROUNDS rounds (default 3), new and baseline taking turns:
#    engine ParallelInline, ParallelHierarchy, ParallelHotKey,
#    AcquireParallel; budget ParallelAcquire/{private,enforce,enforce3}.
# 2. One node against Redis over loopback with redis-benchmark, the
#    server pinned to SERVER_CPUS and the client to CLIENT_CPUS (default:
#    the first and second half of the CPUs; on fewer than 4 CPUs neither is
#    pinned), -c CONNS (256) --threads THREADS (the client CPUs, at most 8)
#    -r 100000, each workload unpipelined (N_UNPIPELINED requests, default
#    1000000) and with -P 16 (N_PIPELINED, default 5000000), ROUNDS rounds,
#    interleaved:
#      incr      Redis INCR
#      lua       Redis EVALSHA of bench/token_bucket.lua, 100/s burst 100
#      inline    RL.ACQUIRE key:__rand_int__ RATE 100 BURST 100
#      private   RL.ACQUIRE free/api KEY __rand_int__   (free: private)
#      enforce   RL.ACQUIRE acme/api KEY __rand_int__   (acme: enforce)
#      enforce3  RL.ACQUIRE system/p/t KEY __rand_int__ (system and
#                system/p: enforce; system/p/t: 100/s burst 100, scope user)
#      hotkey    RL.ACQUIRE hot RATE 1000000000 BURST 1000000000
#    and, per core, a second node with GOMAXPROCS=1 pinned to PERCORE_CPU
#    (default: the first server CPU) running inline and enforce3, beside
#    Redis INCR (single-threaded in any case).
#
# With PROFILE=1 the run also writes CPU and mutex profiles of
# ParallelHierarchy and ParallelHotKey at the largest -cpu, of each build,
# to RESULTS/profiles (read them with go tool pprof -top FILE; the
# profiles carry their symbols).
#
# Results go to RESULTS (default: results-<date> in the bundle): raw
# outputs, and summary.md with the medians and ratios as markdown tables.
set -euo pipefail

SELF=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")

die() {
  echo "scaling: $*" >&2
  exit 2
}

# --- bundle -------------------------------------------------------------------

# copy_with_libs BIN DIR copies BIN into DIR/bin and every shared library
# it loads, the loader included, into DIR/lib, and writes DIR/NAME, which
# runs it through the copied loader.
copy_with_libs() {
  local bin=$1 dir=$2 name lib loader=""
  name=$(basename "$bin")
  mkdir -p "$dir/bin" "$dir/lib"
  cp -L "$bin" "$dir/bin/$name"
  while read -r lib; do
    [ -n "$lib" ] || continue
    cp -L "$lib" "$dir/lib/"
    case "$(basename "$lib")" in ld-linux*) loader=$(basename "$lib") ;; esac
  done < <(ldd "$bin" | awk '/=> \// { print $3; next } /^\t\// { print $1 }')
  [ -n "$loader" ] || die "no dynamic loader found for $bin"
  cat >"$dir/$name" <<EOF
#!/bin/sh
d=\$(dirname "\$0")
exec "\$d/lib/$loader" --library-path "\$d/lib" "\$d/bin/$name" "\$@"
EOF
  chmod +x "$dir/$name"
}

# build_tree SRC OUT builds the binaries of the source tree SRC into OUT.
build_tree() {
  local src=$1 out=$2
  mkdir -p "$out"
  (
    cd "$src"
    export CGO_ENABLED=0
    go build -trimpath -ldflags '-s -w' -o "$out/sluice" ./cmd/sluice
    go test -c -trimpath -ldflags '-s -w' -o "$out/engine.test" ./engine
    go test -c -trimpath -ldflags '-s -w' -o "$out/budget.test" ./budget
  )
}

bundle() {
  local out=${1:-bin/scaling} repo rev base
  repo=$(cd "$(dirname "$SELF")/.." && pwd)
  command -v go >/dev/null 2>&1 || die "go is needed to build the bundle"
  if [ -d "$out" ] && [ -n "$(ls -A "$out")" ] && [ ! -f "$out/MANIFEST" ]; then
    die "$out is not empty and holds no bundle: choose another folder"
  fi
  mkdir -p "$out"
  out=$(cd "$out" && pwd)
  rm -rf "${out:?}"/*
  rev=$(git -C "$repo" describe --always --dirty 2>/dev/null || echo unknown)
  echo "building the bundle of $rev into $out"
  build_tree "$repo" "$out/new"
  (cd "$repo" && CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$out/bench" ./bench)
  if [ -n "${BASELINE:-}" ]; then
    base=$(git -C "$repo" rev-parse --short "$BASELINE^{commit}") || die "BASELINE: no such revision '$BASELINE'"
    local tmp
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/sluice-baseline.XXXXXX")
    git -C "$repo" archive "$base" | tar -x -C "$tmp"
    # The baseline measures the same benchmarks: this tree's copies.
    cp "$repo/engine/parallel_bench_test.go" "$tmp/engine/"
    cp "$repo/budget/parallel_bench_test.go" "$tmp/budget/"
    echo "building the baseline $base"
    build_tree "$tmp" "$out/base"
    rm -rf "$tmp"
    echo "$base" >"$out/base/REVISION"
  fi
  echo "$rev" >"$out/new/REVISION"
  if [ "${BUNDLE_REDIS:-1}" != 0 ]; then
    for t in redis-server redis-cli redis-benchmark; do
      command -v "$t" >/dev/null 2>&1 || die "$t is not installed (apt-get install redis-server redis-tools), or set BUNDLE_REDIS=0"
      copy_with_libs "$(command -v "$t")" "$out/redis"
    done
    redis-server --version >"$out/redis/VERSION"
  fi
  cp "$repo/bench/lib.sh" "$repo/bench/token_bucket.lua" "$out/"
  cp "$SELF" "$out/scaling.sh"
  {
    echo "sluice $rev${BASELINE:+, baseline $(cat "$out/base/REVISION")}"
    echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) with $(go version | sed 's/^go version //')"
  } >"$out/MANIFEST"
  tar -C "$(dirname "$out")" -czf "$out.tar.gz" "$(basename "$out")"
  echo "bundle: $out ($(du -sh "$out" | cut -f1)), $out.tar.gz ($(du -sh "$out.tar.gz" | cut -f1))"
  echo "run it with: bash $out/scaling.sh run"
}

# --- run ----------------------------------------------------------------------

# median prints the median of its arguments.
median() {
  printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END {
    if (NR == 0) exit
    if (NR % 2) printf "%.6g", v[(NR + 1) / 2]; else printf "%.6g", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# cpu_list FROM TO prints FROM-TO, or FROM when they are equal.
cpu_list() { if [ "$1" -eq "$2" ]; then echo "$1"; else echo "$1-$2"; fi; }

# pinned CPUS CMD… runs CMD on CPUS (a taskset list), or unpinned if empty.
pinned() {
  local cpus=$1
  shift
  if [ -n "$cpus" ]; then
    exec taskset -c "$cpus" "$@"
  fi
  exec "$@"
}

# count_cpus LIST prints how many CPUs a taskset list names.
count_cpus() {
  echo "$1" | tr ',' '\n' | awk -F- 'NF == 2 { n += $2 - $1 + 1; next } NF == 1 && $1 != "" { n++ } END { print n + 0 }'
}

go_benchmarks() {
  local variants=("$@") round v
  echo "== go test -bench, -cpu $CPUS, $ROUNDS rounds, -benchtime $BENCHTIME"
  for round in $(seq 1 "$ROUNDS"); do
    for v in "${variants[@]}"; do
      echo "round $round  $v  ($(cat "$B/$v/REVISION"))"
      "$B/$v/engine.test" -test.run '^$' -test.bench 'Parallel' -test.benchmem -test.cpu "$CPUS" \
        -test.benchtime "$BENCHTIME" | tee -a "$RESULTS/gobench-$v.txt" | grep '^Benchmark'
      "$B/$v/budget.test" -test.run '^$' -test.bench 'ParallelAcquire' -test.benchmem -test.cpu "$CPUS" \
        -test.benchtime "$BENCHTIME" | tee -a "$RESULTS/gobench-$v.txt" | grep '^Benchmark'
    done
  done
}

# go_profiles VARIANT… writes CPU and mutex profiles of the hierarchy and
# hot-key benchmarks at the largest -cpu.
go_profiles() {
  local v b top
  top=$(echo "$CPUS" | tr ',' '\n' | sort -n | tail -1)
  mkdir -p "$RESULTS/profiles"
  for v in "$@"; do
    for b in ParallelHierarchy ParallelHotKey; do
      echo "profiling $b -cpu $top ($v)"
      (cd "$RESULTS/profiles" && "$B/$v/engine.test" -test.run '^$' -test.bench "^Benchmark$b\$" -test.cpu "$top" \
        -test.benchtime "$BENCHTIME" -test.cpuprofile "$v-$b-cpu.pprof" -test.mutexprofile "$v-$b-mutex.pprof" |
        grep '^Benchmark')
    done
  done
}

# go_summary VARIANT… writes the go benchmarks' medians as a markdown table:
# one row per benchmark and variant, M calls/s at each -cpu.
go_summary() {
  local cpus
  cpus=$(echo "$CPUS" | tr ',' ' ')
  {
    echo "### go test -bench: million calls per second (median of $ROUNDS rounds)"
    echo
    printf '| benchmark | build |'
    for c in $cpus; do printf ' -cpu %s |' "$c"; done
    printf ' allocs/op |\n|---|---|'
    for c in $cpus; do printf -- '---:|'; done
    printf -- '---:|\n'
    for f in "$@"; do awk -v v="$f" '/^Benchmark/ { print v, $0 }' "$RESULTS/gobench-$f.txt"; done |
      awk -v cpus="$cpus" '
        {
          v = $1; name = $2; cpu = 1
          if (match(name, /-[0-9]+$/)) { cpu = substr(name, RSTART + 1); name = substr(name, 1, RSTART - 1) }
          for (i = 3; i <= NF; i++) {
            if ($i == "ns/op") ns = $(i - 1)
            if ($i == "allocs/op" && $(i - 1) > allocs[name]) allocs[name] = $(i - 1)
          }
          key = name SUBSEP v
          if (!(key in seen)) { seen[key] = 1; order[++n] = key }
          vals[key, cpu] = vals[key, cpu] " " ns
        }
        function med(s,   a, k, i, j, t) {
          k = split(s, a, " ")
          for (i = 2; i <= k; i++) for (j = i; j > 1 && a[j - 1] + 0 > a[j] + 0; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
          if (k == 0) return ""
          return (k % 2) ? a[(k + 1) / 2] : (a[k / 2] + a[k / 2 + 1]) / 2
        }
        END {
          nc = split(cpus, cs, " ")
          for (o = 1; o <= n; o++) {
            split(order[o], kv, SUBSEP)
            printf "| %s | %s |", kv[1], kv[2]
            for (c = 1; c <= nc; c++) {
              m = med(vals[order[o], cs[c]])
              if (m == "") printf " |"; else printf " %.2f (%.0f ns) |", 1000 / m, m
            }
            printf " %d |\n", allocs[kv[1]]
          }
        }' | sort -t'|' -k2,2 -s
    echo
  } >>"$RESULTS/summary.md"
}

# start_server NAME CPUS GOMAXPROCS CMD… starts a server on a free port,
# sets PORT[NAME], and waits for PONG.
declare -A PORT
start_server() {
  # (free_port's own locals are p and i: these names must differ.)
  local name=$1 cpus=$2 procs=$3 srv_port raft_port k
  shift 3
  free_port srv_port
  PORT[$name]=$srv_port
  local args=("$@")
  for k in "${!args[@]}"; do args[$k]=${args[$k]//@PORT@/$srv_port}; done
  if [[ ${args[*]} == *@RAFT@* ]]; then
    free_port raft_port
    for k in "${!args[@]}"; do args[$k]=${args[$k]//@RAFT@/$raft_port}; done
  fi
  (
    if [ -n "$procs" ]; then export GOMAXPROCS=$procs; fi
    pinned "$cpus" "${args[@]}"
  ) >"$TMP/$name.log" 2>&1 &
  STARTED_PIDS+=("$!")
  if ! wait_pong "$srv_port" 30; then
    echo "$name did not answer PING on 127.0.0.1:$srv_port; its log:" >&2
    cat "$TMP/$name.log" >&2
    exit 1
  fi
}

# budget_tree PORT sets the budget tree of the budget workloads on a node,
# retrying while the lone node elects itself.
budget_tree() {
  local port=$1 i out
  local cmds=(
    "free RATE 1000000000 SHARING private"
    "free/api RATE 100 BURST 100 SCOPE user"
    "acme RATE 1000000000 SHARING enforce"
    "acme/api RATE 100 BURST 100 SCOPE user"
    "system RATE 1000000000 SHARING enforce"
    "system/p RATE 1000000000 SHARING enforce"
    "system/p/t RATE 100 BURST 100 SCOPE user"
  )
  for c in "${cmds[@]}"; do
    for i in $(seq 1 100); do
      # shellcheck disable=SC2086 # c holds the arguments
      out=$("$REDIS_CLI" -p "$port" RL.BUDGET SET $c 2>&1 | head -1)
      case "$out" in OK* | *OK*) break ;; esac
      sleep 0.1
    done
    case "$out" in OK* | *OK*) ;; *) echo "RL.BUDGET SET $c on port $port: $out" >&2; exit 1 ;; esac
  done
  # Each budget workload's first call must be admitted at its depth.
  for p in free/api acme/api system/p/t; do
    out=$("$REDIS_CLI" -p "$port" RL.ACQUIRE "$p" KEY check | head -1)
    [ "$out" = 1 ] || { echo "RL.ACQUIRE $p KEY check on port $port answered $out" >&2; exit 1; }
  done
}

# rb SERVER DEPTH N ARGS… runs redis-benchmark and prints requests/s.
rb() {
  local server=$1 depth=$2 n=$3 out=$TMP/rb.out rps
  shift 3
  (pinned "$CLIENT_CPUS" "$REDIS_BENCHMARK" -h 127.0.0.1 -p "${PORT[$server]}" -c "$CONNS" ${THREADS_ARG:+--threads "$THREADS"} \
    -n "$n" -r "$KEYS" -P "$depth" -q "$@") >"$out" 2>&1 || true
  rps=$(tr '\r' '\n' <"$out" | sed -n -E 's/.*: ([0-9.]+) requests per second.*/\1/p' | tail -1)
  if [ -z "$rps" ]; then
    echo "redis-benchmark ($server, -P $depth, $*) gave no figure:" >&2
    tr '\r' '\n' <"$out" | tail -5 >&2
    exit 1
  fi
  echo "$rps"
}

end_to_end() {
  local variants=("$@") v round depth w n rps server
  TMP=$(mktemp -d "${TMPDIR:-/tmp}/sluice-scaling.XXXXXX")
  trap stop_all EXIT
  trap 'exit 130' INT TERM

  start_server redis "$SERVER_CPUS" "" "$REDIS_SERVER" --port @PORT@ --bind 127.0.0.1 --save '' \
    --appendonly no --dir "$TMP" --protected-mode no
  local sha
  sha=$("$REDIS_CLI" -p "${PORT[redis]}" SCRIPT LOAD "$(cat "$B/token_bucket.lua")")
  for v in "${variants[@]}"; do
    mkdir -p "$TMP/data-$v" "$TMP/data-$v-1"
    start_server "$v" "$SERVER_CPUS" "" "$B/$v/sluice" --resp-addr 127.0.0.1:@PORT@ --http-addr '' \
      --raft-addr 127.0.0.1:@RAFT@ --data-dir "$TMP/data-$v"
    start_server "$v-1" "$PERCORE_CPU" 1 "$B/$v/sluice" --resp-addr 127.0.0.1:@PORT@ --http-addr '' \
      --raft-addr 127.0.0.1:@RAFT@ --data-dir "$TMP/data-$v-1"
    budget_tree "${PORT[$v]}"
    budget_tree "${PORT[$v-1]}"
  done

  declare -A CMD=(
    [incr]="-t incr"
    [lua]="EVALSHA $sha 1 key:__rand_int__ 100 100"
    [inline]="RL.ACQUIRE key:__rand_int__ RATE 100 BURST 100"
    [private]="RL.ACQUIRE free/api KEY __rand_int__"
    [enforce]="RL.ACQUIRE acme/api KEY __rand_int__"
    [enforce3]="RL.ACQUIRE system/p/t KEY __rand_int__"
    [hotkey]="RL.ACQUIRE hot RATE 1000000000 BURST 1000000000"
  )
  local sluice_work=(inline private enforce enforce3 hotkey) percore_work=(inline enforce3)
  declare -A FIG
  echo "== one node against Redis: server CPUs ${SERVER_CPUS:-all}, client CPUs ${CLIENT_CPUS:-all}," \
    "per-core node on CPU ${PERCORE_CPU:-any} with GOMAXPROCS=1; -c $CONNS ${THREADS_ARG:+--threads $THREADS} -r $KEYS;" \
    "$N_UNPIPELINED requests unpipelined, $N_PIPELINED with -P 16; $ROUNDS rounds"
  for round in $(seq 1 "$ROUNDS"); do
    for depth in 1 16; do
      n=$N_UNPIPELINED
      [ "$depth" = 1 ] || n=$N_PIPELINED
      for w in incr lua; do
        # shellcheck disable=SC2086 # CMD holds several words
        rps=$(rb redis "$depth" "$n" ${CMD[$w]})
        printf 'round %d  -P %-2d  %-16s %-9s %12.0f requests/s\n' "$round" "$depth" redis "$w" "$rps"
      done
      for w in "${sluice_work[@]}"; do
        for v in "${variants[@]}"; do
          # shellcheck disable=SC2086
          rps=$(rb "$v" "$depth" "$n" ${CMD[$w]})
          printf 'round %d  -P %-2d  %-16s %-9s %12.0f requests/s\n' "$round" "$depth" "sluice $v" "$w" "$rps"
        done
      done
      for w in "${percore_work[@]}"; do
        for v in "${variants[@]}"; do
          # shellcheck disable=SC2086
          rps=$(rb "$v-1" "$depth" "$n" ${CMD[$w]})
          printf 'round %d  -P %-2d  %-16s %-9s %12.0f requests/s\n' "$round" "$depth" "sluice $v 1 core" "$w" "$rps"
        done
      done
    done
  done | tee "$RESULTS/e2e.txt"

  # The loop ran in the pipeline's subshell: its figures come back from
  # the file.
  while read -r _ round _ depth server rest; do
    case "$server" in
      redis) FIG["redis $(echo "$rest" | awk '{ print $1 }') $depth"]+="$(echo "$rest" | awk '{ print $2 }') " ;;
      sluice)
        set -- $rest
        if [ "$2" = 1 ] && [ "$3" = core ]; then
          FIG["$1-1 $4 $depth"]+="$5 "
        else
          FIG["$1 $2 $depth"]+="$3 "
        fi
        ;;
    esac
  done <"$RESULTS/e2e.txt"

  med() { # KEY
    # shellcheck disable=SC2086 # the figures are words
    median ${FIG["$1"]:-}
  }
  ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else printf "-" }'; }
  {
    echo "### One node against Redis: requests/s (median of $ROUNDS rounds)"
    echo
    echo "server CPUs ${SERVER_CPUS:-all (unpinned)}, client CPUs ${CLIENT_CPUS:-all (unpinned)}; redis-benchmark -c $CONNS" \
      "${THREADS_ARG:+--threads $THREADS }-r $KEYS; $N_UNPIPELINED requests at -P 1, $N_PIPELINED at -P 16"
    echo
    printf '| workload | server | -P 1 | -P 16 |\n|---|---|---:|---:|\n'
    for w in incr lua; do
      printf '| %s | Redis | %.0f | %.0f |\n' "$w" "$(med "redis $w 1")" "$(med "redis $w 16")"
    done
    for w in "${sluice_work[@]}"; do
      for v in "${variants[@]}"; do
        printf '| %s | sluice %s (%s) | %.0f | %.0f |\n' "$w" "$v" "$(cat "$B/$v/REVISION")" "$(med "$v $w 1")" "$(med "$v $w 16")"
      done
    done
    for w in "${percore_work[@]}"; do
      for v in "${variants[@]}"; do
        printf '| %s, GOMAXPROCS=1 on CPU %s | sluice %s | %.0f | %.0f |\n' "$w" "${PERCORE_CPU:-any}" "$v" "$(med "$v-1 $w 1")" "$(med "$v-1 $w 16")"
      done
    done
    echo
    printf '| ratio | build | -P 1 | -P 16 |\n|---|---|---:|---:|\n'
    for v in "${variants[@]}"; do
      printf '| enforce3 / inline (goal ≥ 0.80) | %s | %s | %s |\n' "$v" \
        "$(ratio "$(med "$v enforce3 1")" "$(med "$v inline 1")")" "$(ratio "$(med "$v enforce3 16")" "$(med "$v inline 16")")"
      printf '| private / inline | %s | %s | %s |\n' "$v" \
        "$(ratio "$(med "$v private 1")" "$(med "$v inline 1")")" "$(ratio "$(med "$v private 16")" "$(med "$v inline 16")")"
      printf '| inline / Redis INCR | %s | %s | %s |\n' "$v" \
        "$(ratio "$(med "$v inline 1")" "$(med "redis incr 1")")" "$(ratio "$(med "$v inline 16")" "$(med "redis incr 16")")"
      printf '| per core: inline GOMAXPROCS=1 / Redis INCR (goal ≥ 1.0) | %s | %s | %s |\n' "$v" \
        "$(ratio "$(med "$v-1 inline 1")" "$(med "redis incr 1")")" "$(ratio "$(med "$v-1 inline 16")" "$(med "redis incr 16")")"
      printf '| hot key, M requests/s (goal ≥ 2 at -P 16) | %s | %.2f | %.2f |\n' "$v" \
        "$(awk -v a="$(med "$v hotkey 1")" 'BEGIN { print a / 1e6 }')" "$(awk -v a="$(med "$v hotkey 16")" 'BEGIN { print a / 1e6 }')"
    done
    echo
  } >>"$RESULTS/summary.md"
}

run() {
  B=$(cd "$(dirname "$SELF")" && pwd)
  [ -x "$B/new/sluice" ] || die "run this from a bundle (bash bench/scaling.sh bundle DIR, then bash DIR/scaling.sh run)"
  RESULTS=${1:-$B/results-$(date -u +%Y%m%dT%H%M%SZ)}
  mkdir -p "$RESULTS"
  RESULTS=$(cd "$RESULTS" && pwd)
  # shellcheck source=bench/lib.sh
  . "$B/lib.sh"

  CPUS=${CPUS:-1,2,4,8,16}
  ROUNDS=${ROUNDS:-3}
  BENCHTIME=${BENCHTIME:-1s}
  CONNS=${CONNS:-256}
  KEYS=${KEYS:-100000}
  N_UNPIPELINED=${N_UNPIPELINED:-1000000}
  N_PIPELINED=${N_PIPELINED:-5000000}
  [[ $CPUS =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]] || die "CPUS must be a list like 1,2,4,8 (got '$CPUS')"
  for v in ROUNDS CONNS KEYS N_UNPIPELINED N_PIPELINED; do
    [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive integer (got '${!v}')"
  done
  local ncpu
  ncpu=$(nproc)
  if [ -z "${SERVER_CPUS+set}" ] && [ -z "${CLIENT_CPUS+set}" ] && [ "$ncpu" -ge 4 ]; then
    SERVER_CPUS=$(cpu_list 0 $((ncpu / 2 - 1)))
    CLIENT_CPUS=$(cpu_list $((ncpu / 2)) $((ncpu - 1)))
  fi
  SERVER_CPUS=${SERVER_CPUS:-}
  CLIENT_CPUS=${CLIENT_CPUS:-}
  if [ -n "$SERVER_CPUS$CLIENT_CPUS" ] && ! command -v taskset >/dev/null 2>&1; then
    die "taskset (util-linux) is needed to pin to SERVER_CPUS/CLIENT_CPUS; set both empty to run unpinned"
  fi
  PERCORE_CPU=${PERCORE_CPU-$(echo "$SERVER_CPUS" | sed -E 's/[-,].*//')}
  local client_n
  client_n=$ncpu
  [ -z "$CLIENT_CPUS" ] || client_n=$(count_cpus "$CLIENT_CPUS")
  THREADS=${THREADS:-$((client_n < 8 ? client_n : 8))}
  [[ $THREADS =~ ^[1-9][0-9]*$ ]] || die "THREADS must be a positive integer (got '$THREADS')"
  THREADS_ARG=""
  [ "$THREADS" -le 1 ] || THREADS_ARG=1

  local bundled=$B/redis
  REDIS_SERVER=${REDIS_SERVER:-$([ -x "$bundled/redis-server" ] && echo "$bundled/redis-server" || command -v redis-server || true)}
  REDIS_CLI=${REDIS_CLI:-$([ -x "$bundled/redis-cli" ] && echo "$bundled/redis-cli" || command -v redis-cli || true)}
  REDIS_BENCHMARK=${REDIS_BENCHMARK:-$([ -x "$bundled/redis-benchmark" ] && echo "$bundled/redis-benchmark" || command -v redis-benchmark || true)}

  local variants=(new)
  [ -x "$B/base/sluice" ] && variants+=(base)

  {
    echo "## Scaling run $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo
    echo "- machine: $ncpu CPUs, $(grep -m1 -E '^(model name|Model)' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(uname -sr), load average $(cut -d' ' -f1-3 /proc/loadavg) at the start"
    sed 's/^/- /' "$B/MANIFEST"
    for v in "${variants[@]}"; do echo "- $v: $(cat "$B/$v/REVISION")"; done
    echo
  } >"$RESULTS/summary.md"
  cat "$RESULTS/summary.md"

  if [ "${SKIP_GO:-0}" != 1 ]; then
    go_benchmarks "${variants[@]}"
    go_summary "${variants[@]}"
    [ "${PROFILE:-0}" != 1 ] || go_profiles "${variants[@]}"
  fi
  if [ "${SKIP_E2E:-0}" != 1 ]; then
    for t in "$REDIS_SERVER" "$REDIS_CLI" "$REDIS_BENCHMARK"; do
      [ -n "$t" ] && [ -x "$t" ] || die "redis-server, redis-cli and redis-benchmark are needed: bundle them or set REDIS_SERVER, REDIS_CLI, REDIS_BENCHMARK"
    done
    echo "- Redis: $("$REDIS_SERVER" --version | cut -d' ' -f1-3)" >>"$RESULTS/summary.md"
    echo >>"$RESULTS/summary.md"
    end_to_end "${variants[@]}"
  fi
  echo "load average $(cut -d' ' -f1-3 /proc/loadavg) at the end" >>"$RESULTS/summary.md"
  echo
  cat "$RESULTS/summary.md"
  echo "results: $RESULTS"
}

case "${1:-}" in
  bundle) bundle "${2:-}" ;;
  run) run "${2:-}" ;;
  "")
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/sluice-bundle.XXXXXX")
    bundle "$tmp/scaling"
    bash "$tmp/scaling/scaling.sh" run "${RESULTS:-$PWD/scaling-results}"
    rm -rf "$tmp"
    ;;
  *) die "usage: bash bench/scaling.sh [bundle [DIR] | run [RESULTS]]" ;;
esac
