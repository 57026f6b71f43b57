package main

import (
	"fmt"
	"slices"
	"time"

	"github.com/sluice-rl/sluice/budget"
	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/quota"
)

// simulator is one exact node: it decides calls of cost 1 at the times
// given (Unix ns, non-decreasing) with the server's own engine and budget
// code, and nothing else: no clock, no network, no other node.
type simulator interface {
	acquire(now int64) bool
}

// newSimulator returns a fresh single-node simulation of s's limit for a
// limit of rate per second on key, and the burst the bound allows: the
// capacity of the tightest bucket the call charges (0 for a quota alone,
// which has no bucket).
func (s *scenario) newSimulator(rate int64, key string) (simulator, int64, error) {
	switch s.kind {
	case inlineQuota:
		sim, err := newQuotaSim(key, s.quota)
		return sim, 0, err
	case budgetTree:
		return newBudgetSim(s.setup(rate))
	}
	algo := engine.TokenBucket
	if s.algo != "" {
		var ok bool
		if algo, ok = engine.ParseAlgo(s.algo); !ok {
			return nil, 0, fmt.Errorf("scenario %s: unknown ALGO %q", s.name, s.algo)
		}
	}
	burst := rate
	if s.burst > 0 {
		burst = s.burst
	}
	lim, err := engine.NewLimit(algo, rate, time.Second, burst)
	if err != nil {
		return nil, 0, fmt.Errorf("scenario %s: %w", s.name, err)
	}
	return newRateSim(key, lim), burst, nil
}

// rateSim is an inline RATE limit: one bucket, as RL.ACQUIRE key RATE …
// charges it (commands.inlineCall).
type rateSim struct {
	store *engine.Store
	lim   engine.Limit
	key   []byte
}

func newRateSim(key string, lim engine.Limit) *rateSim {
	return &rateSim{store: engine.New(engine.Options{Shards: 1}), lim: lim, key: []byte(key)}
}

func (r *rateSim) acquire(now int64) bool {
	req := engine.Request{Space: engine.SpaceInline, Key: r.key, Limit: &r.lim, Cost: 1}
	return r.store.Acquire(now, req, 0, false).Allowed
}

// quotaSim is an inline quota alone (RL.ACQUIRE key QUOTA n PER day): one
// counter in the period holding each call, in UTC, with nothing committed
// elsewhere, so that it admits min(calls, n) within a period.
type quotaSim struct {
	store  *engine.Store
	lim    engine.Limit
	period quota.Period
	key    []byte
}

func newQuotaSim(key string, n int64) (*quotaSim, error) {
	p, err := quota.ParsePeriod("day", "")
	if err != nil {
		return nil, err
	}
	lim, err := engine.NewQuotaLimit(n, p.Code())
	if err != nil {
		return nil, err
	}
	// The server keys an inline quota's counter "i|" + key.
	return &quotaSim{store: engine.New(engine.Options{Shards: 1}), lim: lim, period: p, key: []byte("i|" + key)}, nil
}

func (q *quotaSim) acquire(now int64) bool {
	start, end := q.period.Bounds(now)
	req := engine.Request{Space: engine.SpaceQuota, Key: q.key, Limit: &q.lim, Cost: 1, PeriodStart: start, PeriodEnd: end}
	return q.store.AcquireAll(now, []engine.Request{req}, 0, false).Allowed
}

// budgetSim is the budget form: the tree built from the same RL.BUDGET SET
// commands the nodes receive, charged by budget.Tree.Acquire, which admits
// a call only if every level admits it and charges nothing otherwise.
type budgetSim struct {
	tree  *budget.Tree
	store *engine.Store
	call  budget.Call
	sc    budget.Scratch
}

// newBudgetSim builds the tree of setup (RL.BUDGET SET path keywords…
// commands) and returns it with the burst of the tightest level a call to
// budgetPath charges.
func newBudgetSim(setup [][]string) (*budgetSim, int64, error) {
	tree := budget.Empty
	for i, cmd := range setup {
		if len(cmd) < 3 || cmd[0] != "RL.BUDGET" || cmd[1] != "SET" {
			return nil, 0, fmt.Errorf("budget setup: %q is not RL.BUDGET SET", cmd)
		}
		args := make([][]byte, 0, len(cmd)-3)
		for _, a := range cmd[3:] {
			args = append(args, []byte(a))
		}
		cfg, err := budget.ParseKeywords(args)
		if err != nil {
			return nil, 0, fmt.Errorf("budget setup %s: %w", cmd[2], err)
		}
		ch, err := tree.Set(cmd[2], cfg, uint64(i+1))
		if err != nil {
			return nil, 0, fmt.Errorf("budget setup %s: %w", cmd[2], err)
		}
		tree = ch.Tree
	}
	plan, _, ok := tree.Resolve([]byte(budgetPath))
	if !ok {
		return nil, 0, fmt.Errorf("budget setup: no node on %s", budgetPath)
	}
	burst := int64(0)
	for _, lv := range plan.Levels {
		if lv.Limit != nil && (burst == 0 || lv.Limit.Burst < burst) {
			burst = lv.Limit.Burst
		}
	}
	b := &budgetSim{tree: tree, store: engine.New(engine.Options{Shards: 1}),
		call: budget.Call{Path: []byte(budgetPath), Subject: []byte(budgetSubject)}}
	if _, err := tree.Acquire(b.store, 0, &budget.Call{Path: b.call.Path, Subject: b.call.Subject, DryRun: true}, &b.sc); err != nil {
		return nil, 0, fmt.Errorf("budget setup: %w", err)
	}
	return b, burst, nil
}

func (b *budgetSim) acquire(now int64) bool {
	out, err := b.tree.Acquire(b.store, now, &b.call, &b.sc)
	return err == nil && out.Allowed == 1
}

// call is one recorded call: when it was sent and when its reply was read
// (ns since the scenario's start, monotonic), and whether it was admitted.
type call struct {
	sent, recv int64
	ok         bool
}

// at is the call's time for the ideal: the midpoint between writing its
// batch and reading its reply, the best estimate of when the server read
// its clock for it.
func (c call) at() int64 { return c.sent + (c.recv-c.sent)/2 }

// sortCalls orders calls by their time, keeping the order of calls with
// the same time (a connection's calls are recorded in order).
func sortCalls(calls []call) {
	slices.SortStableFunc(calls, func(a, b call) int {
		switch x, y := a.at(), b.at(); {
		case x < y:
			return -1
		case x > y:
			return 1
		}
		return 0
	})
}

// idealAdmitted feeds calls, sorted by time, to sim at start+at (start in
// Unix ns) and returns how many it admits: what one exact node would have
// admitted of the same calls at the same times.
func idealAdmitted(sim simulator, start int64, calls []call) int64 {
	var n int64
	for _, c := range calls {
		if sim.acquire(start + c.at()) {
			n++
		}
	}
	return n
}

// verdict is how a scenario's admitted count compares with the ideal.
type verdict struct {
	ratio float64 // admitted/ideal − 1; NaN when ideal is 0
	over  float64 // (admitted − ideal − burst)/ideal; NaN when ideal is 0
	ok    bool
	why   string // "ok", "over" or "under"
}

// The bounds of docs/accuracy.md ("The bound"), in percent of the ideal.
const (
	overPct  = 1 // admitted − ideal − burst ≤ 1 % of ideal
	underPct = 2 // admitted − ideal ≥ −2 % of ideal
)

// judge applies the bound: over = (admitted − ideal − burst)/ideal must be
// at most +1 %, and under = (admitted − ideal)/ideal at least −2 %. The
// comparison is done in integers, exactly. With an ideal of 0 only
// admitted ≤ burst is within bounds.
func judge(admitted, ideal, burst int64) verdict {
	v := verdict{ratio: nan(), over: nan()}
	if ideal > 0 {
		v.ratio = float64(admitted)/float64(ideal) - 1
		v.over = float64(admitted-ideal-burst) / float64(ideal)
	}
	switch {
	case 100*(admitted-ideal-burst) > overPct*ideal:
		v.why = "over"
	case 100*(admitted-ideal) < -underPct*ideal:
		v.why = "under"
	default:
		v.ok, v.why = true, "ok"
	}
	return v
}

// overOK reports whether v holds the upper bound alone (the CI test's
// check).
func (v verdict) overOK() bool { return v.why != "over" }
