package main

import (
	"fmt"
	"strconv"
	"time"
)

// pattern says whether node (of nodes) receives load at t, the time since
// the scenario started.
type pattern func(node, nodes int, t time.Duration) bool

// everyNode loads all nodes all the time.
func everyNode(int, int, time.Duration) bool { return true }

// firstNode loads node 0 only.
func firstNode(node, _ int, _ time.Duration) bool { return node == 0 }

// rotating loads one node at a time, moving to the next every period.
func rotating(period time.Duration) pattern {
	return func(node, nodes int, t time.Duration) bool {
		return int(t/period)%nodes == node
	}
}

// pulsing loads every node for on, then none for off, repeatedly.
func pulsing(on, off time.Duration) pattern {
	return func(_, _ int, t time.Duration) bool {
		return t%(on+off) < on
	}
}

// activeNodes counts the nodes p loads at t.
func activeNodes(p pattern, nodes int, t time.Duration) int {
	n := 0
	for i := 0; i < nodes; i++ {
		if p(i, nodes, t) {
			n++
		}
	}
	return n
}

// limitKind is what a scenario's calls are limited by.
type limitKind uint8

const (
	inlineRate  limitKind = iota // RL.ACQUIRE key RATE r [BURST b] [ALGO a]
	inlineQuota                  // RL.ACQUIRE key QUOTA n PER day (no RATE)
	budgetTree                   // RL.ACQUIRE system/partner/tenant KEY u1
)

// scenario is one named load pattern against one limit. Its names are
// stable: scripts and docs/accuracy.md refer to them.
type scenario struct {
	name    string
	about   string
	load    float64 // calls per second over the loaded nodes, as a multiple of --rate
	pattern pattern
	kind    limitKind
	algo    string // ALGO, "" for the server's default (token_bucket)
	burst   int64  // BURST, 0 for the default (= RATE)
	quota   int64  // QUOTA n PER day, inlineQuota only
}

// scenarios is every scenario, in the order a full run takes them. Add a
// row to add one.
var scenarios = []scenario{
	{name: "even", about: "3x the limit, spread evenly over every node", load: 3, pattern: everyNode},
	{name: "saturating", about: "30x the limit, spread evenly over every node", load: 30, pattern: everyNode},
	{name: "rotate-150ms", about: "3x the limit, all on one node, moving to the next every 150 ms", load: 3, pattern: rotating(150 * time.Millisecond)},
	{name: "rotate-5s", about: "3x the limit, all on one node, moving to the next every 5 s", load: 3, pattern: rotating(5 * time.Second)},
	{name: "pulse", about: "9x the limit (3x on average) on every node for 150 ms, then nothing for 300 ms", load: 9, pattern: pulsing(150*time.Millisecond, 300*time.Millisecond)},
	{name: "pulse-small-burst", about: "pulse, with BURST 100: each pulse starts with the nodes' lease credits", load: 9, pattern: pulsing(150*time.Millisecond, 300*time.Millisecond), burst: 100},
	{name: "one-node", about: "3x the limit, all on the first node", load: 3, pattern: firstNode},
	{name: "small-burst", about: "even, with BURST 10", load: 3, pattern: everyNode, burst: 10},
	{name: "large-burst", about: "even, with BURST 1000", load: 3, pattern: everyNode, burst: 1000},
	{name: "algo-token_bucket", about: "even, ALGO token_bucket", load: 3, pattern: everyNode, algo: "token_bucket"},
	{name: "algo-gcra", about: "even, ALGO gcra", load: 3, pattern: everyNode, algo: "gcra"},
	{name: "algo-leaky_bucket", about: "even, ALGO leaky_bucket", load: 3, pattern: everyNode, algo: "leaky_bucket"},
	{name: "algo-fixed_window", about: "even, ALGO fixed_window", load: 3, pattern: everyNode, algo: "fixed_window"},
	{name: "algo-sliding_window", about: "even, ALGO sliding_window", load: 3, pattern: everyNode, algo: "sliding_window"},
	{name: "quota-100-day", about: "even, QUOTA 100 PER day alone (no RATE)", load: 3, pattern: everyNode, kind: inlineQuota, quota: 100},
	{name: "quota-5000-day", about: "even, QUOTA 5000 PER day alone (no RATE)", load: 3, pattern: everyNode, kind: inlineQuota, quota: 5000},
	{name: "budget-3level", about: "even, budget form system/partner/tenant KEY u1; system enforces the limit", load: 3, pattern: everyNode, kind: budgetTree},
}

// findScenario returns the scenario called name.
func findScenario(name string) (*scenario, bool) {
	for i := range scenarios {
		if scenarios[i].name == name {
			return &scenarios[i], true
		}
	}
	return nil, false
}

// scenarioNames lists the names in table order.
func scenarioNames() []string {
	out := make([]string, len(scenarios))
	for i := range scenarios {
		out[i] = scenarios[i].name
	}
	return out
}

// The budget tree of budget-3level. Calls go to budgetPath with KEY
// budgetSubject. The system node holds the limit (RATE = --rate) and
// enforces it on everything below; the partner and the tenant have looser
// limits of their own, so the effective limit of the tenant is the
// system's (docs/budgets.md, "Effective limits") and a call charges three buckets: the tenant's
// own (per subject) and the aggregates of partner and system.
const (
	budgetPath    = "system/partner/tenant"
	budgetSubject = "u1"
)

// budgetSetup returns the RL.BUDGET SET commands of budget-3level for a
// limit of rate per second.
func budgetSetup(rate int64) [][]string {
	r := func(m int64) string { return strconv.FormatInt(rate*m, 10) }
	return [][]string{
		{"RL.BUDGET", "SET", "system", "RATE", r(1), "SHARING", "enforce"},
		{"RL.BUDGET", "SET", "system/partner", "RATE", r(2), "SHARING", "enforce"},
		{"RL.BUDGET", "SET", budgetPath, "RATE", r(4), "SCOPE", "user"},
	}
}

// command returns the command every call of s sends, for a limit of rate
// per second on key (inline forms; the budget form has a fixed path).
func (s *scenario) command(rate int64, key string) []string {
	switch s.kind {
	case inlineQuota:
		return []string{"RL.ACQUIRE", key, "QUOTA", strconv.FormatInt(s.quota, 10), "PER", "day"}
	case budgetTree:
		return []string{"RL.ACQUIRE", budgetPath, "KEY", budgetSubject}
	}
	cmd := []string{"RL.ACQUIRE", key, "RATE", strconv.FormatInt(rate, 10)}
	if s.burst > 0 {
		cmd = append(cmd, "BURST", strconv.FormatInt(s.burst, 10))
	}
	if s.algo != "" {
		cmd = append(cmd, "ALGO", s.algo)
	}
	return cmd
}

// setup returns the commands to send once, through one node, before s's
// load starts.
func (s *scenario) setup(rate int64) [][]string {
	if s.kind == budgetTree {
		return budgetSetup(rate)
	}
	return nil
}

// String names s with its load, for logs.
func (s *scenario) String() string {
	return fmt.Sprintf("%s (%gx)", s.name, s.load)
}
