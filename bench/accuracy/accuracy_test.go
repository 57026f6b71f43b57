package main

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	buildOnce sync.Once
	binPath   string
	binErr    error
	binDir    string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// sluiceBinary builds cmd/sluice once for the tests that start nodes.
func sluiceBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		if binDir, binErr = os.MkdirTemp("", "sluice-accuracy-test"); binErr == nil {
			var out bytes.Buffer
			if binPath, binErr = buildSluice(context.Background(), binDir, &out); binErr != nil {
				binErr = fmt.Errorf("%w\n%s", binErr, out.String())
			}
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// runScenarios runs the named scenarios for d each on one 3-node cluster
// with the given sync interval, and returns the report.
func runScenarios(t *testing.T, d, sync time.Duration, names ...string) *report {
	t.Helper()
	cfg := Config{Binary: sluiceBinary(t), Nodes: 3, Conns: 4, Duration: d, Syncs: []time.Duration{sync}, Rate: 1000, LogDir: t.TempDir()}
	for _, n := range names {
		s, ok := findScenario(n)
		if !ok {
			t.Fatalf("no scenario %s", n)
		}
		cfg.Scenarios = append(cfg.Scenarios, s)
	}
	var progress bytes.Buffer
	rep, err := execute(context.Background(), &cfg, &progress)
	var table bytes.Buffer
	rep.write(&table, false)
	t.Logf("\n%s", table.String())
	if err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	if len(rep.rows) != len(names) {
		t.Fatalf("%d rows for %d scenarios", len(rep.rows), len(names))
	}
	return rep
}

// TestHarnessOnOneNode checks the instrument itself against real nodes:
// with all calls on one node the cluster is one exact node, so its
// admissions must match the ideal closely (the times are estimates, so
// not necessarily to the call).
func TestHarnessOnOneNode(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three sluice processes")
	}
	rep := runScenarios(t, 2*time.Second, 100*time.Millisecond, "one-node")
	r := rep.rows[0]
	if r.errors > 0 {
		t.Errorf("%d error replies: %s", r.errors, r.errMsg)
	}
	if r.calls < 1000 || r.admitted == 0 || r.admitted >= r.calls {
		t.Errorf("calls %d, admitted %d: the load did not overload the limit", r.calls, r.admitted)
	}
	if math.Abs(r.verdict.ratio) > 0.05 {
		t.Errorf("one node admitted %d, ideal %d (%s): the ideal does not model one node", r.admitted, r.ideal, pct(r.verdict.ratio))
	}
}

// TestAccuracyCI runs the hardest scenarios at --sync-interval 100ms
// against real processes and fails when the cluster admits more than the
// bound allows: (admitted − ideal − burst)/ideal > +1 %. It runs in every
// go test (not with -short); SLUICE_ACCURACY_DURATION sets each
// scenario's length (default 5s).
func TestAccuracyCI(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three real nodes for a few seconds per scenario")
	}
	d := 5 * time.Second
	if s := os.Getenv("SLUICE_ACCURACY_DURATION"); s != "" {
		var err error
		if d, err = parseDuration(s, minDuration, maxDuration); err != nil {
			t.Fatalf("SLUICE_ACCURACY_DURATION %v", err)
		}
	}
	// The hardest scenarios: a small burst, load rotating between nodes,
	// pulses that each start on the nodes' lease credits,
	// a fixed window, and a small calendar quota (reservations).
	rep := runScenarios(t, d, 100*time.Millisecond, "small-burst", "rotate-150ms", "pulse-small-burst", "algo-fixed_window", "quota-100-day")
	for _, r := range rep.rows {
		if r.errors > 0 {
			t.Errorf("%s: %d error replies: %s", r.scenario, r.errors, r.errMsg)
		}
		if !r.verdict.overOK() {
			t.Errorf("%s at --sync-interval %v: admitted %d, ideal %d, burst %d: %s over the ideal after one burst, above +%d %%",
				r.scenario, r.sync, r.admitted, r.ideal, r.burst, pct(r.verdict.over), overPct)
		}
	}
	if t.Failed() {
		t.Log(strings.TrimSpace(`
The bound: a client spread over the nodes is held within -2 % … +1 % of
what one node would admit, plus one burst. See docs/accuracy.md.`))
	}
}
