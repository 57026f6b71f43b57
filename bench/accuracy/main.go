// Command accuracy measures how closely a sluice cluster holds a limit
// when one client's calls are spread over its nodes: within −2 % … +1 %
// of what one node would admit, plus one burst (docs/accuracy.md).
//
// It starts real sluice processes on loopback, drives named scenarios of
// RL.ACQUIRE calls over them in patterns (even, saturating, rotating,
// pulsing, one node; bursts, every algorithm, calendar quotas, a budget
// hierarchy), records the time and answer of every call, and compares the
// cluster's admissions with the ideal: the same calls at the same times
// fed through sluice's own engine as one exact node. See docs/accuracy.md.
//
//	go run ./bench/accuracy -d 10s
//	go run ./bench/accuracy -d 5s --scenarios small-burst,quota-100-day --sync-interval 25ms,100ms,1s
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
// status: 0 when every scenario is within bounds (or --report-only), 1
// when one is not or the run failed, 2 for bad flags.
func run(args []string, stdout, stderr io.Writer) int {
	cfg, err := parseArgs(args, stdout)
	if errors.Is(err, flag.ErrHelp) || errors.Is(err, errList) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "accuracy:", err)
		fmt.Fprintln(stderr, "accuracy: see --help for every flag and its range")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := execute(ctx, &cfg, stderr)
	rep.write(stdout, cfg.Markdown)
	if err != nil {
		fmt.Fprintln(stderr, "accuracy:", err)
		return 1
	}
	if !rep.ok() && !cfg.ReportOnly {
		fmt.Fprintln(stderr, "accuracy: some scenarios are out of bounds")
		return 1
	}
	return 0
}
