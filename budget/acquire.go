package budget

import (
	"fmt"
	"time"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/fault"
	"github.com/sluice-rl/sluice/quota"
)

// Call is one RL.ACQUIRE, RL.PEEK or RL.REFUND: the budget form, whose
// plan is the tree's levels for Path, or the inline form (Rate or Quota
// set), whose plan is one level on the key Path: its bucket under Rate
// and its quota counter under Quota.
type Call struct {
	Path    []byte
	Subject []byte // KEY; required when the target's scope is user, ip or route
	// The inline form's limits; both nil for the budget form.
	Rate    *engine.Limit
	Quota   *quota.Spec
	Cost    int64
	HasCost bool
	// Now, if not 0, is the time the call is decided at (Unix ns): a
	// front that has read the clock already passes it on.
	Now     int64
	WaitMs  int64
	HasWait bool
	DryRun  bool
	// Quotas says whether a new quota counter may start (the store reads
	// the committed counts from its own quota source); nil: always.
	Quotas QuotaCounts
	// With are further parts admitted together with this call, all or
	// none (the descriptors of one Envoy request): each part's levels join
	// the plan. A part has its own Path, Subject, limits and Cost (an
	// inline part costs 1 unless it says otherwise, a budget part its
	// node's cost); Wait, DryRun and Quotas are the call's, and a call
	// with parts takes no WAIT and no queue strategy. Parts that charge
	// the same bucket charge it once with their costs added. Parts of the
	// parts are ignored.
	With []Call
	// EachPart asks Acquire to describe every part of the call (itself
	// and each of With) on its own, from the one decision, in the
	// caller's Scratch (Scratch.Parts): a front that answers per part
	// (Envoy's descriptor statuses) then looks at no bucket again. Such a
	// call takes no WAIT, as a call with parts.
	EachPart bool
}

// Inline reports whether the call carries its own limits.
func (c *Call) Inline() bool { return c.Rate != nil || c.Quota != nil }

// CheckSubject is the rule every front and the service apply to a call's
// subject: a subject splits a budget node by user, ip or route, so it
// belongs to the budget form, and a call that names its own key (ownKey:
// an inline limit) takes none. It returns ErrKeyInline, or nil.
func CheckSubject(ownKey bool, subject []byte) error {
	if ownKey && subject != nil {
		return ErrKeyInline
	}
	return nil
}

// ErrKeyInline refuses a subject given to an inline limit, in the words of
// the RESP commands (KEY subject), which the service uses too.
var ErrKeyInline = SubjectInline("KEY", "an inline limit's key is the first argument")

// SubjectInline is CheckSubject's refusal in a front's own name for the
// subject (HTTP: "subject"), with why the call at hand is inline.
func SubjectInline(subject, why string) *fault.Error {
	return &fault.Error{Code: "ERR", Msg: subject + " belongs to the budget form; " + why}
}

// QuotaCounts decides whether a call may start a quota counter.
type QuotaCounts interface {
	// QuotaRoom reports whether a call may count against the counter key:
	// it exists, or there is room for a new one.
	QuotaRoom(key []byte) bool
}

// ErrBucketsFull refuses a call that needs a new bucket while the store
// is at --max-buckets and no bucket is full: forgetting one that is not
// would let its key exceed its limit.
var ErrBucketsFull = &Error{Code: "ERR", Msg: "no room for a new bucket: the store is at --max-buckets and every bucket holds consumption; new keys are refused until buckets refill (keys in use are limited as before)"}

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
	// Node is the configured node whose config the call followed (the
	// target, or an implicit child's deepest configured ancestor); nil for
	// an inline call.
	Node *Node
	// Levels is the number of buckets charged.
	Levels int
}

// Scratch is a per-connection buffer for bucket keys built from the call
// (path#subject), so that building them allocates nothing after warm-up.
type Scratch struct {
	keys
	name []byte
	// more holds the keys of a call's further parts (Call.With).
	more []keys
	// held and slot hold what a reservation reads after its call (the
	// names of the levels it charged, its concurrency key), apart from
	// name, which the call's limited_by may point into.
	held, slot []byte
	ch         charges
	// each and parts hold what the last Acquire of a call with EachPart
	// decided: each request's word (engine.Store.AcquireEach) and, from
	// it, each part's outcome (Parts).
	each  [engine.MaxLevels]engine.Result
	parts []Outcome
}

// Parts returns what the last Acquire through sc decided for each part of
// its call, when the call asked (Call.EachPart): [0] the call itself, [i]
// its With[i-1]; empty otherwise, or when it failed. Each is described as a
// call of that part alone would be, from the requests it shares in the
// one decision (no second look at the buckets): Allowed (1 its levels
// admit it at the cost charged to them — a bucket two parts share is
// decided at their costs added —, 2 only degrade levels refuse it, 0 one
// refuses), Result (its tightest level, as the call left it: after the
// charge when the call was admitted and stored, untouched otherwise; a
// refusing part's level that holds it back longest, with RetryAfter),
// Unlimited, Cost, Label, Node and Levels; LimitedBy is not set. The slice
// is the scratch's: valid until its next call.
func (sc *Scratch) Parts() []Outcome { return sc.parts }

// keys are the keys built for one part of a call.
type keys struct {
	b, q []byte
	r    []byte       // a requests level's key, when built per call
	qlim engine.Limit // an inline part's quota limit
}

// charges is every request one call makes: from[i] is the plan level of
// reqs[i], quota[i] whether it is that level's quota counter, and part[i]
// the part of the call it comes from (0 the call, i its With[i-1]).
// plans[p] is part p's plan, nil for an inline part; plan is part 0's.
// seq lists, part after part in their own order, the requests each part
// charges (one another part added first included): part p's are
// seq[ends[p-1]:ends[p]]; costs[p] is its cost.
type charges struct {
	reqs  [engine.MaxLevels]engine.Request
	from  [engine.MaxLevels]uint8
	quota [engine.MaxLevels]bool
	part  [engine.MaxLevels]uint8
	n     int
	plan  *Plan
	plans [engine.MaxLevels]*Plan
	seq   [MaxParts * engine.MaxLevels]uint8
	ns    int
	ends  [MaxParts]int
	costs [MaxParts]int64
}

// planOf returns the plan request i comes from, nil for an inline part.
func (ch *charges) planOf(i int) *Plan { return ch.plans[ch.part[i]] }

// MaxParts bounds the parts of one call (itself and Call.With).
const MaxParts = engine.MaxLevels

// errTooManyLevels refuses a call whose parts charge more buckets than
// one atomic acquire can hold.
var errTooManyLevels = &Error{Code: "ERR", Msg: fmt.Sprintf("the call's parts charge more than %d buckets and quota counters together; split it", engine.MaxLevels)}

// Every plan fits: at most MaxDepth aggregates and an own level, each with
// a bucket and a quota.
var _ [engine.MaxLevels - 2*(MaxDepth+1)]struct{}

// Errors of the budget form, with their reply codes.
var (
	errWaitParts   = &Error{Code: "ERR", Msg: "a call of several parts cannot wait: WAIT and queue strategies apply to single calls"}
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

// charge fills ch with the requests of c's plan at now, each taking cost
// tokens: for the budget form each level's bucket, then its quota counter
// with the period holding now; for the inline form the call's bucket and
// quota counter. The parts of c.With follow, each at its own cost.
func (t *Tree) charge(now int64, c *Call, sc *Scratch, ch *charges, cost int64, plan *Plan) error {
	ch.n, ch.ns = 0, 0
	if err := t.chargePart(now, c, plan, &sc.keys, ch, cost, 0); err != nil {
		return err
	}
	ch.plan = ch.plans[0]
	ch.ends[0], ch.costs[0] = ch.ns, cost
	if len(c.With) == 0 {
		return nil
	}
	if len(c.With) >= MaxParts {
		return errTooManyLevels
	}
	for len(sc.more) < len(c.With) {
		sc.more = append(sc.more, keys{})
	}
	for i := range c.With {
		p := &c.With[i]
		pc := int64(1)
		if p.HasCost {
			pc = p.Cost
		} else if !p.Inline() {
			if plan, _, ok := t.Resolve(p.Path); ok {
				pc = plan.Config.Config.Cost
			}
		}
		if err := t.chargePart(now, p, nil, &sc.more[i], ch, pc, uint8(i+1)); err != nil {
			return err
		}
		ch.ends[i+1], ch.costs[i+1] = ch.ns, pc
	}
	return nil
}

// add appends request r (level from of part, a quota counter or not) to
// ch; a later part that charges a bucket already in ch adds its cost to it.
func (ch *charges) add(r engine.Request, from uint8, isQuota bool, part uint8) error {
	if part > 0 {
		for i := 0; i < ch.n; i++ {
			if q := &ch.reqs[i]; q.Space == r.Space && string(q.Key) == string(r.Key) {
				if ch.ns == len(ch.seq) {
					return errTooManyLevels
				}
				q.Cost += r.Cost
				ch.seq[ch.ns] = uint8(i)
				ch.ns++
				return nil
			}
		}
	}
	if ch.n == engine.MaxLevels || ch.ns == len(ch.seq) {
		return errTooManyLevels
	}
	ch.reqs[ch.n], ch.from[ch.n], ch.quota[ch.n], ch.part[ch.n] = r, from, isQuota, part
	ch.seq[ch.ns] = uint8(ch.n)
	ch.n++
	ch.ns++
	return nil
}

// chargePart adds the requests of one part of a call to ch: plan is c's,
// if the caller has resolved it already, else nil.
func (t *Tree) chargePart(now int64, c *Call, plan *Plan, sc *keys, ch *charges, cost int64, part uint8) error {
	if c.Inline() {
		ch.plans[part] = nil
		if c.Rate != nil {
			if err := ch.add(engine.Request{Space: engine.SpaceInline, Key: c.Path, Limit: c.Rate, Cost: cost}, 0, false, part); err != nil {
				return err
			}
		}
		if c.Quota != nil {
			sc.qlim, _ = c.Quota.Limit() // checked when the call was parsed
			sc.q = quota.AppendKey(sc.q[:0], quota.InlineKey, c.Path)
			if err := ch.add(c.Quota.Request(&sc.qlim, sc.q, now, cost), 0, true, part); err != nil {
				return err
			}
		}
		return nil
	}
	if plan == nil {
		var ok bool
		if plan, _, ok = t.Resolve(c.Path); !ok {
			return NoBudget(c.Path)
		}
	}
	ch.plans[part] = plan
	for i := range plan.Levels {
		lv := &plan.Levels[i]
		key := lv.Key
		if lv.PerCall {
			// Each call counts 1 on its node's requests, whatever its cost
			// (a call of COST 0, which only looks, counts nothing).
			if key == nil {
				sc.r = append(sc.r[:0], ReqPrefix...)
				switch s := lv.Node.Config.Scope; s {
				case User, IP, Route:
					if len(c.Subject) == 0 {
						return errKeyRequired(c.Path, s)
					}
					sc.r = append(append(append(sc.r, c.Path...), '#'), c.Subject...)
				default:
					sc.r = append(sc.r, c.Path...)
				}
				key = sc.r
			}
			if err := ch.add(engine.Request{Space: engine.SpaceBudget, Key: key, Limit: lv.Limit, Cost: min(cost, 1)}, uint8(i), false, part); err != nil {
				return err
			}
			continue
		}
		if key == nil {
			switch s := lv.Node.Config.Scope; s {
			case User, IP, Route:
				if len(c.Subject) == 0 {
					return errKeyRequired(c.Path, s)
				}
				sc.b = append(append(append(sc.b[:0], c.Path...), '#'), c.Subject...)
				key = sc.b
			default:
				key = c.Path
			}
		}
		if !lv.QuotaOnly {
			if err := ch.add(engine.Request{Space: engine.SpaceBudget, Key: key, Limit: lv.Limit, Cost: cost}, uint8(i), false, part); err != nil {
				return err
			}
		}
		if q := lv.Quota; q != nil {
			qkey := lv.QuotaKey
			if qkey == nil {
				sc.q = quota.AppendKey(sc.q[:0], quota.BudgetKey, key)
				qkey = sc.q
			}
			start, end := q.per.Bounds(now)
			if err := ch.add(engine.Request{Space: engine.SpaceQuota, Key: qkey, Limit: &q.lim, Cost: cost,
				PeriodStart: start, PeriodEnd: end}, uint8(i), true, part); err != nil {
				return err
			}
		}
	}
	return nil
}

// describeCost describes an admitted call r by its tightest level that
// counts cost rather than calls, as RL.PEEK with COST 0 would: a node's
// requests count in another unit (calls), and their few left would
// otherwise always be the fewest. With no such level, r stays.
func (ch *charges) describeCost(s *engine.Store, now int64, r engine.Result) engine.Result {
	var among uint32
	for i := 0; i < ch.n; i++ {
		if !ch.perCall(i) {
			among |= 1 << i
		}
	}
	if d, ok := s.PeekAmong(now, ch.reqs[:ch.n], among); ok {
		r.Remaining, r.Limit, r.ResetAfter, r.Level = d.Remaining, d.Limit, d.ResetAfter, d.Level
	}
	return r
}

// perCall reports whether request i counts calls (a node's requests).
func (ch *charges) perCall(i int) bool {
	plan := ch.planOf(i)
	return plan != nil && plan.Levels[ch.from[i]].PerCall
}

// period returns the period of quota request i.
func (ch *charges) period(c *Call, i int) quota.Period {
	plan := ch.planOf(i)
	if plan == nil {
		if p := ch.part[i]; p > 0 {
			c = &c.With[p-1]
		}
		return c.Quota.Period
	}
	return plan.Levels[ch.from[i]].Quota.per
}

// limitedBy names request i of ch as limited_by reports it.
func (ch *charges) limitedBy(i int, sc *Scratch) []byte { return ch.name(i, &sc.name) }

// name names request i of ch as limited_by reports it, building the name
// in *buf when it is not kept in the plan.
func (ch *charges) name(i int, buf *[]byte) []byte {
	plan := ch.planOf(i)
	if plan == nil {
		if ch.quota[i] {
			*buf = quota.AppendName((*buf)[:0], ch.reqs[i].Key[len(quota.InlineKey):])
			return *buf
		}
		return ch.reqs[i].Key
	}
	lv := &plan.Levels[ch.from[i]]
	switch {
	case ch.quota[i] && lv.QuotaName != nil:
		return lv.QuotaName
	case ch.quota[i]:
		*buf = quota.AppendName((*buf)[:0], ch.reqs[i].Key[len(quota.BudgetKey):])
		return *buf
	case lv.Name != nil:
		return lv.Name
	case lv.PerCall:
		*buf = append(append((*buf)[:0], RequestsPrefix...), ch.reqs[i].Key[len(ReqPrefix):]...)
		return *buf
	}
	return ch.reqs[i].Key
}

// Acquire runs c against the store at now: every level of the plan is
// charged, or none (docs/budgets.md). WAIT comes from the call, else from
// a queue strategy's max_wait_ms; a refusal by a level whose strategy is
// degrade lets the call through as allowed=2 without consuming. An inline
// call costs 1 unless it says otherwise; a budget call its node's cost.
func (t *Tree) Acquire(s *engine.Store, now int64, c *Call, sc *Scratch) (Outcome, error) {
	ch := &sc.ch // kept in the scratch: a fresh one would be zeroed on every call
	cost, wait := int64(1), c.WaitMs
	var (
		out  Outcome
		plan *Plan
	)
	if !c.Inline() {
		var ok bool
		plan, _, ok = t.Resolve(c.Path)
		if !ok {
			return Outcome{}, NoBudget(c.Path)
		}
		cfg := &plan.Config.Config
		cost, out.Label, out.Node = cfg.Cost, plan.Config.label, plan.Config
		if !c.HasWait && cfg.Strategy == Queue {
			wait = cfg.MaxWaitMs
		}
	}
	if c.HasCost {
		cost = c.Cost
	}
	sc.parts = sc.parts[:0]
	if (len(c.With) > 0 || c.EachPart) && wait > 0 {
		return Outcome{}, errWaitParts
	}
	if err := t.charge(now, c, sc, ch, cost, plan); err != nil {
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
	out.Cost, out.Levels = cost, n
	parts := c.EachPart
	if n == 0 {
		out.Allowed, out.Unlimited, out.LimitedBy = 1, true, c.Path
		out.Result = engine.Result{Allowed: true, Remaining: -1, Limit: -1}
		if parts {
			sc.describeParts(len(c.With) + 1)
		}
		return out, nil
	}
	var r engine.Result
	switch {
	case parts:
		// Each part is described from this one decision (Parts).
		r = s.AcquireEach(now, ch.reqs[:n], wait*int64(time.Millisecond), c.DryRun, sc.each[:])
	case n == 1:
		r = s.Acquire(now, ch.reqs[0], wait*int64(time.Millisecond), c.DryRun)
	default:
		r = s.AcquireAll(now, ch.reqs[:n], wait*int64(time.Millisecond), c.DryRun)
	}
	if r.Allowed && n > 1 && ch.perCall(r.Level) {
		if parts {
			ch.costTightest(allRequests[:n], &sc.each, &r) // what the decision saw
		} else {
			r = ch.describeCost(s, now, r)
		}
	}
	if r.Refused && ch.plan != nil {
		// An inline call (and CL.THROTTLE) is denied with the retry
		// time; a budget call is told why (docs/operations.md).
		return Outcome{}, ErrBucketsFull
	}
	out.Result, out.LimitedBy = r, ch.limitedBy(r.Level, sc)
	out.Allowed = ch.allowed(&r)
	if parts {
		sc.describeParts(len(c.With) + 1)
	}
	return out, nil
}

// allowed is Outcome.Allowed for r, a decision reported at one of ch's
// requests: 1 admitted, 2 refused by a level whose strategy is degrade.
func (ch *charges) allowed(r *engine.Result) int {
	switch {
	case r.Allowed:
		return 1
	case ch.planOf(r.Level) != nil && ch.planOf(r.Level).Levels[ch.from[r.Level]].Node.Config.Strategy == Degrade:
		return 2
	}
	return 0
}

// describeParts sets sc.parts to the outcomes of the call's k parts, each
// from the words of its own requests in sc.each (Parts).
func (sc *Scratch) describeParts(k int) {
	for len(sc.parts) < k {
		sc.parts = append(sc.parts, Outcome{})
	}
	sc.parts = sc.parts[:k]
	ch := &sc.ch
	for p := range sc.parts {
		sc.parts[p] = ch.describePart(p, &sc.each)
	}
}

// describePart answers for part p as a call of its requests alone would
// be answered (Tree.Acquire, engine's combine): a request that can never
// admit, else the refusing one that holds it back longest, else the one
// with the fewest tokens left (the last of equals) — a node's requests
// giving way to the levels that count cost (describeCost).
func (ch *charges) describePart(p int, each *[engine.MaxLevels]engine.Result) Outcome {
	from := 0
	if p > 0 {
		from = ch.ends[p-1]
	}
	seq := ch.seq[from:ch.ends[p]]
	out := Outcome{Cost: ch.costs[p], Levels: len(seq)}
	if plan := ch.plans[p]; plan != nil {
		out.Label, out.Node = plan.Config.label, plan.Config
	}
	if len(seq) == 0 {
		out.Allowed, out.Unlimited = 1, true
		out.Result = engine.Result{Allowed: true, Remaining: -1, Limit: -1}
		return out
	}
	pick := -1
	for _, i := range seq {
		if e := &each[i]; !e.Allowed && e.RetryAfter < 0 {
			pick = int(i)
			break
		}
	}
	if pick < 0 {
		for _, i := range seq {
			if e := &each[i]; !e.Allowed && (pick < 0 || e.RetryAfter > each[pick].RetryAfter) {
				pick = int(i)
			}
		}
	}
	if pick < 0 {
		pick = int(seq[0])
		for _, i := range seq[1:] {
			if each[i].Remaining <= each[pick].Remaining {
				pick = int(i)
			}
		}
	}
	out.Result = each[pick]
	if out.Result.Allowed && len(seq) > 1 && ch.perCall(pick) {
		ch.costTightest(seq, each, &out.Result)
	}
	out.Allowed = ch.allowed(&out.Result)
	return out
}

// costTightest describes r, admitted, by the tightest of the requests seq
// (their words in each) that counts cost rather than calls, as
// describeCost does with a look; with none, r stays.
func (ch *charges) costTightest(seq []uint8, each *[engine.MaxLevels]engine.Result, r *engine.Result) {
	tight := -1
	for _, i := range seq {
		if !ch.perCall(int(i)) && (tight < 0 || each[i].Remaining <= each[tight].Remaining) {
			tight = int(i)
		}
	}
	if tight >= 0 {
		d := &each[tight]
		r.Remaining, r.Limit, r.ResetAfter, r.Level = d.Remaining, d.Limit, d.ResetAfter, tight
	}
}

// allRequests lists the indexes of a call's requests, in order.
var allRequests = func() (a [engine.MaxLevels]uint8) {
	for i := range a {
		a[i] = uint8(i)
	}
	return a
}()

// Waits reports whether c may wait for tokens: its WAIT, or without one
// its node's queue strategy. Such calls are decided on this node's own
// buckets, not leases (engine: route).
func (t *Tree) Waits(c *Call) bool {
	if c.HasWait || c.Inline() {
		return c.WaitMs > 0
	}
	plan, _, ok := t.Resolve(c.Path)
	return ok && plan.Config.Config.Strategy == Queue && plan.Config.Config.MaxWaitMs > 0
}

// Refund gives n tokens back to every level c charges, quotas included,
// and describes the target's tightest level afterwards. A call that
// waits (WAIT, or a node whose strategy is queue) was charged to this
// node's own buckets, and gets them back there (engine.Store.RefundWaited).
func (t *Tree) Refund(s *engine.Store, now int64, c *Call, n int64, sc *Scratch) (Outcome, error) {
	waited := t.Waits(c)
	return t.adjust(s, now, c, sc, func(r *engine.Request, quota bool) engine.Result {
		var res engine.Result
		switch {
		case quota:
			s.RefundQuota(now, r, n)
		case waited:
			res, _ = s.RefundWaited(now, r.Space, r.Key, r.Limit, n)
		default:
			res, _ = s.Refund(now, r.Space, r.Key, r.Limit, n)
		}
		return res
	})
}

// Charge takes n tokens from every level c charges, quotas included,
// without asking whether they fit (engine.Store.Charge: a bucket may go
// into debt, which later calls wait out), and describes the target's
// tightest level afterwards. It is for a cost known once the work is done,
// when refusing would undo nothing.
func (t *Tree) Charge(s *engine.Store, now int64, c *Call, n int64, sc *Scratch) (Outcome, error) {
	return t.adjust(s, now, c, sc, func(r *engine.Request, quota bool) engine.Result {
		s.Charge(now, r, n)
		if quota {
			return engine.Result{}
		}
		peek := *r
		peek.Cost = 0
		return s.Acquire(now, peek, 0, true)
	})
}

// adjust applies one change to every level c charges (apply is told
// whether the level is a quota counter, and returns the level's state
// afterwards), then describes the target's tightest level, always
// admitted: an inline bucket alone by what apply returned, else as RL.PEEK
// with COST 0 would.
func (t *Tree) adjust(s *engine.Store, now int64, c *Call, sc *Scratch, apply func(r *engine.Request, quota bool) engine.Result) (Outcome, error) {
	ch := &sc.ch // kept in the scratch: a fresh one would be zeroed on every call
	if err := t.charge(now, c, sc, ch, 0, nil); err != nil {
		return Outcome{}, err
	}
	for i := 0; i < ch.n; i++ {
		if ch.perCall(i) {
			continue // a refund or a charge is of cost; the call counted 1
		}
		res := apply(&ch.reqs[i], ch.quota[i])
		if ch.n == 1 && ch.plan == nil && !ch.quota[i] {
			// An inline bucket alone: what apply left describes it.
			return Outcome{Allowed: 1, Result: res, LimitedBy: c.Path, Levels: 1}, nil
		}
	}
	if ch.n == 0 {
		return Outcome{Allowed: 1, Unlimited: true, LimitedBy: c.Path, Label: ch.plan.Config.label,
			Result: engine.Result{Allowed: true, Remaining: -1, Limit: -1}}, nil
	}
	peek := *c
	peek.Cost, peek.HasCost, peek.DryRun, peek.HasWait, peek.WaitMs = 0, true, true, true, 0
	out, err := t.Acquire(s, now, &peek, sc)
	out.Allowed = 1
	return out, err
}

// Reset forgets the target's own bucket (for the call's subject) and
// reports whether there was one; aggregate buckets and quota counters are
// left alone. An enforcing node called by its own path has no bucket but
// its aggregate (its plan marks that level Own), which counts the traffic
// of its children too: there is nothing to reset.
func (t *Tree) Reset(s *engine.Store, c *Call, sc *Scratch) (bool, error) {
	ch := &sc.ch // kept in the scratch: a fresh one would be zeroed on every call
	if err := t.charge(0, c, sc, ch, 0, nil); err != nil {
		return false, err
	}
	for i := 0; i < ch.n; i++ {
		if !ch.quota[i] && (ch.plan == nil || ch.plan.Levels[ch.from[i]].Own && !isAggregate(ch.reqs[i].Key)) {
			return s.Reset(ch.reqs[i].Space, ch.reqs[i].Key), nil
		}
	}
	return false, nil
}

// isAggregate reports whether key is an aggregate bucket's (path + aggSuffix).
func isAggregate(key []byte) bool {
	return len(key) > 0 && key[len(key)-1] == aggSuffix[0]
}

// Quota describes the tightest of the quotas a call c would count against
// at now (the one with the fewest tokens left; the deepest on a tie); ok is
// false when none does.
func (t *Tree) Quota(s *engine.Store, now int64, c *Call, sc *Scratch) (st quota.Status, ok bool, err error) {
	ch := &sc.ch // kept in the scratch: a fresh one would be zeroed on every call
	if err = t.charge(now, c, sc, ch, 0, nil); err != nil {
		return st, false, err
	}
	k := 0
	for i := 0; i < ch.n; i++ {
		if ch.quota[i] {
			ch.reqs[k], ch.from[k], ch.quota[k], ch.part[k] = ch.reqs[i], ch.from[i], true, ch.part[i]
			k++
		}
	}
	if k == 0 {
		return st, false, nil
	}
	r := s.AcquireAll(now, ch.reqs[:k], 0, true)
	q := &ch.reqs[r.Level]
	name := ch.limitedBy(r.Level, sc)
	used := s.QuotaUsed(q)
	return quota.Status{Level: name[len(quota.NamePrefix):], Limit: r.Limit, Used: used,
		Period: ch.period(c, r.Level), Start: q.PeriodStart, End: q.PeriodEnd}, true, nil
}

// QuotaKeys returns the counters RL.QUOTA RESET forgets for c: those of
// the quotas of the target itself — its own counter (per subject where its
// scope says so) and, when that is per node, its aggregate's; an inline
// call's own counter.
func (t *Tree) QuotaKeys(c *Call, sc *Scratch) ([]string, error) {
	cs, err := t.QuotaCounters(0, c, sc)
	keys := make([]string, len(cs))
	for i := range cs {
		keys[i] = cs[i].Key
	}
	return keys, err
}

// QuotaCounter is one counter QuotaCounters names: its key, its quota,
// and the period that holds the time it was asked at.
type QuotaCounter struct {
	Key        string
	Limit      int64
	Period     quota.Period
	Start, End int64
}

// QuotaCounters returns the counters of QuotaKeys with their quota and
// their period at now (RL.QUOTA SET sets their count).
func (t *Tree) QuotaCounters(now int64, c *Call, sc *Scratch) ([]QuotaCounter, error) {
	ch := &sc.ch // kept in the scratch: a fresh one would be zeroed on every call
	if err := t.charge(now, c, sc, ch, 0, nil); err != nil {
		return nil, err
	}
	var out []QuotaCounter
	add := func(i int) {
		r := &ch.reqs[i]
		out = append(out, QuotaCounter{Key: string(r.Key), Limit: r.Limit.Rate, Period: ch.period(c, i), Start: r.PeriodStart, End: r.PeriodEnd})
	}
	plan := ch.plan
	if plan == nil {
		for i := 0; i < ch.n; i++ {
			if ch.quota[i] {
				add(i)
			}
		}
		return out, nil
	}
	perCall := false // the own counter's key comes from the call
	for i := 0; i < ch.n; i++ {
		if lv := &plan.Levels[ch.from[i]]; ch.quota[i] && lv.Own && lv.QuotaKey == nil {
			perCall = true
		}
	}
	for i := 0; i < ch.n; i++ {
		lv := &plan.Levels[ch.from[i]]
		if ch.quota[i] && (lv.Own || lv.Node == plan.Config && !perCall && lv.Node.Path == string(c.Path)) {
			add(i)
		}
	}
	return out, nil
}
