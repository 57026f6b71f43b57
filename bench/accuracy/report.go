package main

import (
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"text/tabwriter"
	"time"
)

// row is one scenario run on one cluster.
type row struct {
	scenario string
	sync     time.Duration
	duration time.Duration
	calls    int64 // decided calls (error replies excluded)
	admitted int64
	ideal    int64
	burst    int64 // the allowance of the upper bound
	errors   int64
	errMsg   string
	load1    string // 1-minute load average when the scenario ended
	verdict  verdict
}

// report is the outcome of a run: a row per scenario and sync interval.
type report struct {
	cfg       *Config
	rows      []row
	loadStart string
	loadEnd   string
}

// ok reports whether every row is within bounds and without error replies.
func (r *report) ok() bool {
	for _, x := range r.rows {
		if !x.verdict.ok || x.errors > 0 {
			return false
		}
	}
	return true
}

// columns of the table.
var columns = []string{"scenario", "sync", "calls", "calls/s", "admitted", "ideal", "burst",
	"admitted/ideal-1", "over after burst", "result", "errors", "load"}

// cells returns x's values in the order of columns.
func (x *row) cells() []string {
	result := x.verdict.why
	if x.errors > 0 {
		result += ", errors"
	}
	errs := fmt.Sprint(x.errors)
	if x.errMsg != "" {
		errs += " (" + x.errMsg + ")"
	}
	return []string{x.scenario, x.sync.String(), fmt.Sprint(x.calls),
		fmt.Sprintf("%.0f", float64(x.calls)/x.duration.Seconds()),
		fmt.Sprint(x.admitted), fmt.Sprint(x.ideal), fmt.Sprint(x.burst),
		pct(x.verdict.ratio), pct(x.verdict.over), result, errs, x.load1}
}

// pct formats a fraction as a signed percentage.
func pct(f float64) string {
	if math.IsNaN(f) {
		return "n/a"
	}
	return fmt.Sprintf("%+.2f %%", 100*f)
}

// write prints the header, the table and the load averages.
func (r *report) write(w io.Writer, markdown bool) {
	c := r.cfg
	fmt.Fprintf(w, "sluice accuracy: %d nodes, %d connections per node, limit %d/s, %v per scenario\n",
		c.Nodes, c.Conns, c.Rate, c.Duration)
	fmt.Fprintf(w, "bound: (admitted - ideal - burst)/ideal <= +%d %% and (admitted - ideal)/ideal >= -%d %%\n", overPct, underPct)
	fmt.Fprintf(w, "load average (1, 5, 15 min) at start: %s\n\n", r.loadStart)
	if markdown {
		r.writeMarkdown(w)
	} else {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, strings.Join(columns, "\t")+"\t")
		for i := range r.rows {
			fmt.Fprintln(tw, strings.Join(r.rows[i].cells(), "\t")+"\t")
		}
		tw.Flush()
	}
	end := r.loadEnd
	if end == "" {
		end = loadAvg()
	}
	fmt.Fprintf(w, "\nload average (1, 5, 15 min) at end: %s\n", end)
}

func (r *report) writeMarkdown(w io.Writer) {
	fmt.Fprintln(w, "| "+strings.Join(columns, " | ")+" |")
	seps := make([]string, len(columns))
	for i := range seps {
		seps[i] = "---:"
	}
	seps[0] = "---"
	fmt.Fprintln(w, "|"+strings.Join(seps, "|")+"|")
	for i := range r.rows {
		fmt.Fprintln(w, "| "+strings.Join(r.rows[i].cells(), " | ")+" |")
	}
}

// loadAvg returns the machine's 1, 5 and 15 minute load averages, or
// "n/a" where /proc/loadavg cannot be read.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "n/a"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "n/a"
	}
	return strings.Join(f[:3], " ")
}
