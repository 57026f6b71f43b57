package budget

import (
	"time"

	"github.com/sluice-rl/sluice/engine"
)

// Call is one budget-form RL.ACQUIRE, RL.PEEK or RL.REFUND.
type Call struct {
	Path    []byte
	Subject []byte // KEY; required when the target's scope is user, ip or route
	Cost    int64
	HasCost bool
	WaitMs  int64
	HasWait bool
	DryRun  bool
}

// Outcome is the answer to a Call.
type Outcome struct {
	// Allowed is 1 admitted, 0 denied, 2 let through over a degrade limit.
	Allowed int
	Result  engine.Result
	// LimitedBy names the tightest level: a node path, path#subject, or for
	// an implicit child its full path. It may point into the Scratch.
	LimitedBy []byte
	// Unlimited is set when nothing on the path limits the call.
	Unlimited bool
	Cost      int64
	Label     string // metrics label of the budget
	// Levels is the number of buckets charged.
	Levels int
}

// Scratch is a per-connection buffer for bucket keys built from the call
// (path#subject), so that building them allocates nothing after warm-up.
type Scratch struct{ b []byte }

// Errors of the budget form, with their reply codes.
var (
	errKeyRequired = func(path []byte, s Scope) error {
		return errf("budget '%s' has scope %s: KEY required", printable(path), s)
	}
)

// NoBudget is the reply for a path with no configured node, or one that
// is not a budget path at all.
func NoBudget(path []byte) error {
	if !checkPath(path) {
		return ValidPath(string(path))
	}
	return &Error{Code: "NOBUDGET", Msg: "no budget node on path '" + printable(path) + "'"}
}

// requests fills reqs with one request per level of the plan for c.
func (t *Tree) requests(c *Call, sc *Scratch, reqs *[engine.MaxLevels]engine.Request, cost int64) (*Plan, int, error) {
	plan, _, ok := t.Resolve(c.Path)
	if !ok {
		return nil, 0, NoBudget(c.Path)
	}
	n := 0
	for i := range plan.Levels {
		lv := &plan.Levels[i]
		key := lv.Key
		if key == nil {
			switch s := lv.Node.Config.Scope; s {
			case User, IP, Route:
				if len(c.Subject) == 0 {
					return nil, 0, errKeyRequired(c.Path, s)
				}
				sc.b = append(append(append(sc.b[:0], c.Path...), '#'), c.Subject...)
				key = sc.b
			default:
				key = c.Path
			}
		}
		reqs[n] = engine.Request{Space: engine.SpaceBudget, Key: key, Limit: lv.Limit, Cost: cost}
		n++
	}
	return plan, n, nil
}

// Acquire runs c against the store at now: every level of the plan is
// charged, or none (SPEC §4 rule 3). WAIT comes from the call, else from a
// queue strategy's max_wait_ms; a refusal by a level whose strategy is
// degrade lets the call through as allowed=2 without consuming.
func (t *Tree) Acquire(s *engine.Store, now int64, c *Call, sc *Scratch) (Outcome, error) {
	var reqs [engine.MaxLevels]engine.Request
	plan, _, ok := t.Resolve(c.Path)
	if !ok {
		return Outcome{}, NoBudget(c.Path)
	}
	cfg := &plan.Config.Config
	cost := cfg.Cost
	if c.HasCost {
		cost = c.Cost
	}
	_, n, err := t.requests(c, sc, &reqs, cost)
	if err != nil {
		return Outcome{}, err
	}
	out := Outcome{Cost: cost, Label: plan.Config.label, Levels: n}
	if n == 0 {
		out.Allowed, out.Unlimited, out.LimitedBy = 1, true, c.Path
		out.Result = engine.Result{Allowed: true, Remaining: -1, Limit: -1}
		return out, nil
	}
	wait := c.WaitMs
	if !c.HasWait && cfg.Strategy == Queue {
		wait = cfg.MaxWaitMs
	}
	r := s.AcquireAll(now, reqs[:n], wait*int64(time.Millisecond), c.DryRun)
	lv := &plan.Levels[r.Level]
	out.Result, out.LimitedBy = r, lv.Name
	if lv.Name == nil {
		out.LimitedBy = reqs[r.Level].Key
	}
	switch {
	case r.Allowed:
		out.Allowed = 1
	case lv.Node.Config.Strategy == Degrade:
		out.Allowed = 2
	}
	return out, nil
}

// Refund gives n tokens back to every level c charges and describes the
// target's tightest level afterwards.
func (t *Tree) Refund(s *engine.Store, now int64, c *Call, n int64, sc *Scratch) (Outcome, error) {
	var reqs [engine.MaxLevels]engine.Request
	plan, k, err := t.requests(c, sc, &reqs, 0)
	if err != nil {
		return Outcome{}, err
	}
	for i := 0; i < k; i++ {
		s.Refund(now, engine.SpaceBudget, reqs[i].Key, reqs[i].Limit, n)
	}
	if k == 0 {
		return Outcome{Allowed: 1, Unlimited: true, LimitedBy: c.Path, Label: plan.Config.label,
			Result: engine.Result{Allowed: true, Remaining: -1, Limit: -1}}, nil
	}
	peek := *c
	peek.Cost, peek.HasCost, peek.DryRun, peek.HasWait, peek.WaitMs = 0, true, true, true, 0
	return t.Acquire(s, now, &peek, sc)
}

// Reset forgets the target's own bucket (for the call's subject) and
// reports whether there was one; aggregate buckets are left alone.
func (t *Tree) Reset(s *engine.Store, c *Call, sc *Scratch) (bool, error) {
	var reqs [engine.MaxLevels]engine.Request
	plan, k, err := t.requests(c, sc, &reqs, 0)
	if err != nil {
		return false, err
	}
	for i := 0; i < k; i++ {
		if plan.Levels[i].Own {
			return s.Reset(engine.SpaceBudget, reqs[i].Key), nil
		}
	}
	return false, nil
}
