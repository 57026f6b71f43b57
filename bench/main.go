// Command bench is a load generator for sluice in the manner of
// redis-benchmark and memtier: many connections, pipelining, a mix of
// limiting commands (RL.ACQUIRE inline and budget form, CL.THROTTLE,
// RL.BUDGET SET) over a uniform or Zipf key space, closed-loop or paced.
// It reports throughput, the limiting decisions, errors and latency
// percentiles from an HDR histogram.
//
// It speaks RESP2 itself over plain TCP, writing each pipeline batch in one
// write and parsing replies without allocating, so that on a small machine
// the generator is not what limits the measurement. INCR and EVALSHA kinds
// let the same tool measure a plain Redis for comparison. The tool runs on
// GOMAXPROCS threads; when it shares a small machine with the server,
// GOMAXPROCS=1 can leave the server more of it.
//
//	go run ./bench -h 127.0.0.1:6380 -c 50 -P 16 -n 1000000 --mix acquire=100
//	go run ./bench -h a:6380,b:6380,c:6380 -d 30s --dist zipf --mix acquire=90,budget=10 --json
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is the command with its streams as arguments; it returns the exit
// status: 0 when every reply was a valid answer, 1 when the run failed,
// was interrupted or some replies were errors, 2 for bad flags.
func run(args []string, stdout, stderr io.Writer) int {
	cfg, err := parseArgs(args, stdout)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		fmt.Fprintln(stderr, "bench: see --help for every flag and its range")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := execute(ctx, cfg, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		return 1
	}
	if cfg.JSON {
		if err := res.writeJSON(stdout); err != nil {
			fmt.Fprintln(stderr, "bench:", err)
			return 1
		}
	} else {
		res.writeText(stdout)
	}
	if res.Failure != "" {
		fmt.Fprintln(stderr, "bench: run failed:", res.Failure)
		return 1
	}
	if res.Errors > 0 || res.Interrupted {
		return 1
	}
	return 0
}
