package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-rl/sluice/internal/flagx"
)

// Ranges of the flags.
const (
	maxNodes    = 9
	maxConns    = 64
	maxRate     = 100_000 // the generator paces calls in 1 ms ticks; 30x of this is already more than one machine sends
	minDuration = time.Second
	maxDuration = time.Hour
	minSync     = 10 * time.Millisecond // the server's own range of --sync-interval
	maxSync     = time.Minute
)

// Config is one run of the accuracy benchmark, as the flags describe it.
type Config struct {
	Binary     string          // sluice binary; "" builds cmd/sluice
	Nodes      int             // nodes per cluster
	Conns      int             // connections per node
	Duration   time.Duration   // per scenario
	Syncs      []time.Duration // --sync-interval of each cluster, in order
	Scenarios  []*scenario     // in table order
	Rate       int64           // the limit, per second
	ReportOnly bool            // exit 0 even when a scenario is out of bounds
	Markdown   bool            // print the table as Markdown
	LogDir     string          // keep the nodes' data and logs here; "" uses a temporary directory
}

// usageText heads the --help output; the flags follow.
const usageText = `Usage: go run ./bench/accuracy [flags]

Measures how closely a sluice cluster holds a limit that clients spread
over its nodes. For each --sync-interval it starts --nodes fresh sluice
processes on loopback (--bootstrap-peers), waits for a leader, and runs
each scenario for -d: several connections per node send RL.ACQUIRE calls
in the scenario's pattern, and every call's time and answer is recorded.
The ideal is what one exact node admits of the same calls at the same
times, computed by feeding the recorded calls through sluice's own engine
(and budget tree). A scenario is within bounds when

  (admitted - ideal - burst) / ideal <= +1 %   and   (admitted - ideal) / ideal >= -2 %

where burst is the capacity of the tightest bucket (0 for a quota alone).

Exit status: 0 when every scenario is within bounds (or --report-only),
1 when one is not or the run failed, 2 for bad flags.

Flags (- and -- are the same):
`

// rawFlags are the flags read as text and checked once all are known.
type rawFlags struct {
	dur, syncs, scenarios string
	list                  bool
}

func newFlagSet(c *Config, raw *rawFlags) *flag.FlagSet {
	fs := flag.NewFlagSet("accuracy", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	*c = Config{Nodes: 3, Conns: 4, Rate: 1000}
	*raw = rawFlags{dur: "30s", syncs: "100ms", scenarios: "all"}
	fs.StringVar(&c.Binary, "binary", "", "sluice `path` to run; empty builds ./cmd/sluice first")
	fs.Var(flagx.Int[int]{P: &c.Nodes, Lo: 1, Hi: maxNodes}, "nodes", "`number` of nodes in the cluster")
	fs.Var(flagx.Int[int]{P: &c.Conns, Lo: 1, Hi: maxConns}, "conns", "`connections` per node")
	fs.StringVar(&raw.dur, "d", raw.dur, "each scenario's `duration`, such as 10s, or whole seconds")
	fs.StringVar(&raw.syncs, "sync-interval", raw.syncs, "the nodes' --sync-interval: one `list` of durations, comma-separated; the nodes are started afresh for each")
	fs.StringVar(&raw.scenarios, "scenarios", raw.scenarios, "comma-separated scenario `names`, or all (see --list)")
	fs.Var(flagx.Int[int64]{P: &c.Rate, Lo: 1, Hi: maxRate}, "rate", "the `limit` per second of the rate scenarios (and the budget's system node)")
	fs.BoolVar(&c.ReportOnly, "report-only", false, "report only: exit 0 even when a scenario is out of bounds")
	fs.BoolVar(&c.Markdown, "markdown", false, "print the table as Markdown")
	fs.StringVar(&c.LogDir, "log-dir", "", "keep the nodes' data directories and logs under `dir` (default: a temporary directory, removed at the end)")
	fs.BoolVar(&raw.list, "list", false, "list the scenarios and exit")
	return fs
}

// errList is returned by parseArgs for --list, having written the list.
var errList = errors.New("scenarios listed")

// parseArgs parses and validates the command line. It returns
// flag.ErrHelp or errList, having written to out, when asked for help or
// the list of scenarios.
func parseArgs(args []string, out io.Writer) (Config, error) {
	var c Config
	var raw rawFlags
	fs := newFlagSet(&c, &raw)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(out, usageText)
			fs.SetOutput(out)
			fs.PrintDefaults()
		}
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q: every setting is a flag", fs.Arg(0))
	}
	if raw.list {
		writeList(out)
		return c, errList
	}
	var err error
	if c.Duration, err = parseDuration(raw.dur, minDuration, maxDuration); err != nil {
		return c, fmt.Errorf("-d %v", err)
	}
	if c.Syncs, err = parseSyncs(raw.syncs); err != nil {
		return c, err
	}
	if c.Scenarios, err = parseScenarios(raw.scenarios); err != nil {
		return c, err
	}
	return c, nil
}

// parseDuration reads a Go duration ("30s") or whole seconds ("30")
// within [lo, hi].
func parseDuration(s string, lo, hi time.Duration) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		n, nerr := strconv.ParseInt(s, 10, 64)
		if nerr != nil || n < 0 || n > int64(hi/time.Second) {
			return 0, fmt.Errorf("must be a duration such as 10s or 1m, or whole seconds, between %v and %v (got %q)", lo, hi, s)
		}
		d = time.Duration(n) * time.Second
	}
	if d < lo || d > hi {
		return 0, fmt.Errorf("must be a duration between %v and %v (got %q)", lo, hi, s)
	}
	return d, nil
}

// parseSyncs reads --sync-interval: durations, comma-separated, each in
// the server's range.
func parseSyncs(s string) ([]time.Duration, error) {
	var out []time.Duration
	for _, f := range strings.Split(s, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(f))
		if err != nil || d < minSync || d > maxSync {
			return nil, fmt.Errorf("--sync-interval must be durations between %v and %v, comma-separated, such as 25ms,100ms,1s (got %q)", minSync, maxSync, f)
		}
		out = append(out, d)
	}
	return out, nil
}

// parseScenarios reads --scenarios: "all", or names from the table,
// comma-separated, each at most once.
func parseScenarios(s string) ([]*scenario, error) {
	if strings.TrimSpace(s) == "all" {
		out := make([]*scenario, len(scenarios))
		for i := range scenarios {
			out[i] = &scenarios[i]
		}
		return out, nil
	}
	var out []*scenario
	seen := map[string]bool{}
	for _, f := range strings.Split(s, ",") {
		name := strings.TrimSpace(f)
		sc, ok := findScenario(name)
		if !ok {
			return nil, fmt.Errorf("--scenarios must be all or names among %s (got %q)", strings.Join(scenarioNames(), ", "), name)
		}
		if seen[name] {
			return nil, fmt.Errorf("--scenarios names %q twice", name)
		}
		seen[name] = true
		out = append(out, sc)
	}
	return out, nil
}

// writeList prints every scenario with what it does.
func writeList(w io.Writer) {
	for i := range scenarios {
		fmt.Fprintf(w, "%-20s %s\n", scenarios[i].name, scenarios[i].about)
	}
}
