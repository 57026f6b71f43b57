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
	// Quotas says whether a new quota counter may start (the store reads
	// the committed counts from its own quota source); nil: always.
	Quotas QuotaCounts
}

// QuotaCounts decides whether a call may start a quota counter.
type QuotaCounts interface {
	// QuotaRoom reports whether a call may count against the counter key:
	// it exists, or there is room for a new one.
	QuotaRoom(key []byte) bool
}

// ErrQuotaCountersFull refuses a call that would start a new quota
// counter when the node holds as many as it may.
var ErrQuotaCountersFull = &Error{Code: "ERR", Msg: "quota counters are at their limit (--max-quota-counters): no new quota counter can start until periods end or counters are reset (RL.QUOTA RESET)"}

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
type Scratch struct{ b, q, name []byte }

// charges is every request one call makes: from[i] is the plan level of
// reqs[i], and quota[i] whether it is that level's quota counter.
type charges struct {
	reqs  [engine.MaxLevels]engine.Request
	from  [engine.MaxLevels]uint8
	quota [engine.MaxLevels]bool
	n     int
}

// Every plan fits: at most MaxDepth aggregates and an own level, each with
// a bucket and a quota.
var _ [engine.MaxLevels - 2*(MaxDepth+1)]struct{}

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

// requests fills ch with the requests of c's plan at now: each level's
// bucket, then its quota counter with the period holding now and the
// cluster's committed count.
func (t *Tree) requests(now int64, c *Call, sc *Scratch, ch *charges, cost int64) (*Plan, error) {
	plan, _, ok := t.Resolve(c.Path)
	if !ok {
		return nil, NoBudget(c.Path)
	}
	ch.n = 0
	for i := range plan.Levels {
		lv := &plan.Levels[i]
		key := lv.Key
		if key == nil {
			switch s := lv.Node.Config.Scope; s {
			case User, IP, Route:
				if len(c.Subject) == 0 {
					return nil, errKeyRequired(c.Path, s)
				}
				sc.b = append(append(append(sc.b[:0], c.Path...), '#'), c.Subject...)
				key = sc.b
			default:
				key = c.Path
			}
		}
		if !lv.QuotaOnly {
			ch.reqs[ch.n] = engine.Request{Space: engine.SpaceBudget, Key: key, Limit: lv.Limit, Cost: cost}
			ch.from[ch.n], ch.quota[ch.n] = uint8(i), false
			ch.n++
		}
		if q := lv.Quota; q != nil {
			qkey := lv.QuotaKey
			if qkey == nil {
				sc.q = append(append(sc.q[:0], QuotaKeyPrefix...), key...)
				qkey = sc.q
			}
			start, end := q.per.Bounds(now)
			ch.reqs[ch.n] = engine.Request{Space: engine.SpaceQuota, Key: qkey, Limit: &q.lim, Cost: cost,
				PeriodStart: start, PeriodEnd: end}
			ch.from[ch.n], ch.quota[ch.n] = uint8(i), true
			ch.n++
		}
	}
	return plan, nil
}

// limitedBy names request i of ch as limited_by reports it.
func (ch *charges) limitedBy(plan *Plan, i int, sc *Scratch) []byte {
	lv := &plan.Levels[ch.from[i]]
	switch {
	case ch.quota[i] && lv.QuotaName != nil:
		return lv.QuotaName
	case ch.quota[i]:
		sc.name = append(append(sc.name[:0], quotaNamePfx...), ch.reqs[i].Key[len(QuotaKeyPrefix):]...)
		return sc.name
	case lv.Name != nil:
		return lv.Name
	}
	return ch.reqs[i].Key
}

// Acquire runs c against the store at now: every level of the plan is
// charged, or none (SPEC §4 rule 3). WAIT comes from the call, else from a
// queue strategy's max_wait_ms; a refusal by a level whose strategy is
// degrade lets the call through as allowed=2 without consuming.
func (t *Tree) Acquire(s *engine.Store, now int64, c *Call, sc *Scratch) (Outcome, error) {
	var ch charges
	plan, _, ok := t.Resolve(c.Path)
	if !ok {
		return Outcome{}, NoBudget(c.Path)
	}
	cfg := &plan.Config.Config
	cost := cfg.Cost
	if c.HasCost {
		cost = c.Cost
	}
	if _, err := t.requests(now, c, sc, &ch, cost); err != nil {
		return Outcome{}, err
	}
	n := ch.n
	if c.Quotas != nil && cost > 0 && !c.DryRun {
		for i := 0; i < n; i++ {
			if ch.quota[i] && !c.Quotas.QuotaRoom(ch.reqs[i].Key) {
				return Outcome{}, ErrQuotaCountersFull
			}
		}
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
	r := s.AcquireAll(now, ch.reqs[:n], wait*int64(time.Millisecond), c.DryRun)
	lv := &plan.Levels[ch.from[r.Level]]
	out.Result, out.LimitedBy = r, ch.limitedBy(plan, r.Level, sc)
	switch {
	case r.Allowed:
		out.Allowed = 1
	case lv.Node.Config.Strategy == Degrade:
		out.Allowed = 2
	}
	return out, nil
}

// Refund gives n tokens back to every level c charges, quotas included,
// and describes the target's tightest level afterwards.
func (t *Tree) Refund(s *engine.Store, now int64, c *Call, n int64, sc *Scratch) (Outcome, error) {
	var ch charges
	plan, err := t.requests(now, c, sc, &ch, 0)
	if err != nil {
		return Outcome{}, err
	}
	for i := 0; i < ch.n; i++ {
		r := &ch.reqs[i]
		if ch.quota[i] {
			s.RefundQuota(now, r, n)
		} else {
			s.Refund(now, engine.SpaceBudget, r.Key, r.Limit, n)
		}
	}
	if ch.n == 0 {
		return Outcome{Allowed: 1, Unlimited: true, LimitedBy: c.Path, Label: plan.Config.label,
			Result: engine.Result{Allowed: true, Remaining: -1, Limit: -1}}, nil
	}
	peek := *c
	peek.Cost, peek.HasCost, peek.DryRun, peek.HasWait, peek.WaitMs = 0, true, true, true, 0
	return t.Acquire(s, now, &peek, sc)
}

// Reset forgets the target's own bucket (for the call's subject) and
// reports whether there was one; aggregate buckets and quota counters are
// left alone. An enforcing node called by its own path has no bucket but
// its aggregate (its plan marks that level Own), which counts the traffic
// of its children too: there is nothing to reset.
func (t *Tree) Reset(s *engine.Store, c *Call, sc *Scratch) (bool, error) {
	var ch charges
	plan, err := t.requests(0, c, sc, &ch, 0)
	if err != nil {
		return false, err
	}
	for i := 0; i < ch.n; i++ {
		lv := &plan.Levels[ch.from[i]]
		if !ch.quota[i] && lv.Own && !isAggregate(lv.Key) {
			return s.Reset(engine.SpaceBudget, ch.reqs[i].Key), nil
		}
	}
	return false, nil
}

// isAggregate reports whether key is an aggregate bucket's (path + aggSuffix).
func isAggregate(key []byte) bool {
	return len(key) > 0 && key[len(key)-1] == aggSuffix[0]
}

// QuotaStatus describes one quota counter for RL.QUOTA.
type QuotaStatus struct {
	Level      []byte // the level as limited_by names it, without "quota:"
	Limit      int64
	Used       int64
	Period     Period
	Start, End int64 // the current period, Unix ns
}

// Quota describes the tightest of the quotas a call c would count against
// at now (the one with the fewest tokens left; the deepest on a tie); ok is
// false when none does.
func (t *Tree) Quota(s *engine.Store, now int64, c *Call, sc *Scratch) (st QuotaStatus, ok bool, err error) {
	var ch charges
	if _, err = t.requests(now, c, sc, &ch, 0); err != nil {
		return st, false, err
	}
	plan, _, _ := t.Resolve(c.Path)
	k := 0
	for i := 0; i < ch.n; i++ {
		if ch.quota[i] {
			ch.reqs[k], ch.from[k], ch.quota[k] = ch.reqs[i], ch.from[i], true
			k++
		}
	}
	if k == 0 {
		return st, false, nil
	}
	r := s.AcquireAll(now, ch.reqs[:k], 0, true)
	q := &ch.reqs[r.Level]
	name := ch.limitedBy(plan, r.Level, sc)
	used := s.QuotaUsed(q)
	return QuotaStatus{Level: name[len(quotaNamePfx):], Limit: r.Limit, Used: used,
		Period: plan.Levels[ch.from[r.Level]].Quota.per, Start: q.PeriodStart, End: q.PeriodEnd}, true, nil
}

// QuotaKeys returns the counters RL.QUOTA RESET forgets for c: those of
// the quotas of the target itself — its own counter (per subject where its
// scope says so) and, when that is per node, its aggregate's.
func (t *Tree) QuotaKeys(c *Call, sc *Scratch) ([]string, error) {
	var ch charges
	plan, err := t.requests(0, c, sc, &ch, 0)
	if err != nil {
		return nil, err
	}
	var keys []string
	perCall := false // the own counter's key comes from the call
	for i := 0; i < ch.n; i++ {
		if lv := &plan.Levels[ch.from[i]]; ch.quota[i] && lv.Own && lv.QuotaKey == nil {
			perCall = true
		}
	}
	for i := 0; i < ch.n; i++ {
		lv := &plan.Levels[ch.from[i]]
		if ch.quota[i] && (lv.Own || lv.Node == plan.Config && !perCall && lv.Node.Path == string(c.Path)) {
			keys = append(keys, string(ch.reqs[i].Key))
		}
	}
	return keys, nil
}
