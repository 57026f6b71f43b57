package main

import (
	"bytes"
	"errors"
	"flag"
	"strings"
	"testing"
	"time"
)

func TestParseArgsDefaults(t *testing.T) {
	c, err := parseArgs(nil, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Nodes != 3 || c.Conns != 4 || c.Rate != 1000 || c.Duration != 30*time.Second ||
		len(c.Syncs) != 1 || c.Syncs[0] != 100*time.Millisecond || len(c.Scenarios) != len(scenarios) ||
		c.Binary != "" || c.ReportOnly || c.Markdown {
		t.Errorf("defaults: %+v", c)
	}
}

func TestParseArgs(t *testing.T) {
	c, err := parseArgs([]string{"-d", "5", "--sync-interval", "25ms, 100ms,1s", "--scenarios", "small-burst,quota-100-day",
		"--nodes", "5", "--conns", "2", "--rate", "500", "--report-only", "--markdown", "--binary", "/x/sluice"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Duration != 5*time.Second || c.Nodes != 5 || c.Conns != 2 || c.Rate != 500 || !c.ReportOnly || !c.Markdown || c.Binary != "/x/sluice" {
		t.Errorf("%+v", c)
	}
	if len(c.Syncs) != 3 || c.Syncs[0] != 25*time.Millisecond || c.Syncs[2] != time.Second {
		t.Errorf("syncs %v", c.Syncs)
	}
	if len(c.Scenarios) != 2 || c.Scenarios[0].name != "small-burst" || c.Scenarios[1].name != "quota-100-day" {
		t.Errorf("scenarios %v", c.Scenarios)
	}
}

func TestParseArgsErrorsNameTheFlagAndRange(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-d", "500ms"}, "-d must be a duration between 1s and 1h0m0s"},
		{[]string{"-d", "x"}, "-d must be a duration such as"},
		{[]string{"--sync-interval", "5ms"}, "--sync-interval must be durations between 10ms and 1m0s"},
		{[]string{"--sync-interval", "100ms,"}, "--sync-interval must be durations"},
		{[]string{"--scenarios", "nope"}, "--scenarios must be all or names among even, saturating"},
		{[]string{"--scenarios", "even,even"}, `--scenarios names "even" twice`},
		{[]string{"--nodes", "0"}, "must be an integer between 1 and 9"},
		{[]string{"--conns", "65"}, "must be an integer between 1 and 64"},
		{[]string{"--rate", "0"}, "must be an integer between 1 and 100000"},
		{[]string{"extra"}, `unexpected argument "extra"`},
	} {
		_, err := parseArgs(tc.args, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want one containing %q", tc.args, err, tc.want)
		}
	}
}

func TestHelpAndList(t *testing.T) {
	var out bytes.Buffer
	if _, err := parseArgs([]string{"--help"}, &out); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("--help: %v", err)
	}
	if !strings.Contains(out.String(), "Usage: go run ./bench/accuracy") || !strings.Contains(out.String(), "-sync-interval") {
		t.Errorf("--help printed:\n%s", out.String())
	}
	out.Reset()
	if code := run([]string{"--list"}, &out, &bytes.Buffer{}); code != 0 {
		t.Errorf("--list exit %d", code)
	}
	for i := range scenarios {
		if !strings.Contains(out.String(), scenarios[i].name) {
			t.Errorf("--list lacks %s", scenarios[i].name)
		}
	}
	var stderr bytes.Buffer
	if code := run([]string{"--nodes", "x"}, &out, &stderr); code != 2 || !strings.Contains(stderr.String(), "--help") {
		t.Errorf("bad flag: exit %d, stderr %q", code, stderr.String())
	}
}

func TestPatterns(t *testing.T) {
	r := rotating(150 * time.Millisecond)
	for _, tc := range []struct {
		t    time.Duration
		node int
	}{{0, 0}, {149 * time.Millisecond, 0}, {150 * time.Millisecond, 1}, {300 * time.Millisecond, 2}, {450 * time.Millisecond, 0}} {
		for n := 0; n < 3; n++ {
			if got := r(n, 3, tc.t); got != (n == tc.node) {
				t.Errorf("rotate at %v: node %d loaded %v", tc.t, n, got)
			}
		}
		if activeNodes(r, 3, tc.t) != 1 {
			t.Errorf("rotate at %v: %d nodes loaded", tc.t, activeNodes(r, 3, tc.t))
		}
	}
	p := pulsing(150*time.Millisecond, 300*time.Millisecond)
	for _, tc := range []struct {
		t  time.Duration
		on bool
	}{{0, true}, {149 * time.Millisecond, true}, {150 * time.Millisecond, false}, {449 * time.Millisecond, false}, {450 * time.Millisecond, true}} {
		if activeNodes(p, 3, tc.t) != map[bool]int{true: 3, false: 0}[tc.on] {
			t.Errorf("pulse at %v: %d nodes loaded", tc.t, activeNodes(p, 3, tc.t))
		}
	}
	if activeNodes(firstNode, 3, 0) != 1 || !firstNode(0, 3, time.Hour) || activeNodes(everyNode, 3, 0) != 3 {
		t.Error("one-node or every-node pattern")
	}
}

func TestShareDividesTheLoadAmongLoadedConnections(t *testing.T) {
	spec := loadSpec{addrs: []string{"a", "b", "c"}, conns: 4, perSec: 3000, pattern: everyNode}
	if got := share(&spec, 1, 0); got != 250 {
		t.Errorf("even: %v per connection, want 250", got)
	}
	spec.pattern = rotating(time.Second)
	if got := share(&spec, 0, 0); got != 750 {
		t.Errorf("rotating, loaded node: %v per connection, want 750", got)
	}
	if got := share(&spec, 1, 0); got != 0 {
		t.Errorf("rotating, idle node: %v per connection, want 0", got)
	}
}
