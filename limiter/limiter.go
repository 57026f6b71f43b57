// Package limiter is the service core every front of sluice calls — the
// RESP commands today, the Envoy gRPC and HTTP fronts, the background jobs
// of a node. It takes typed calls and returns typed outcomes and
// *fault.Error values; it knows nothing of any wire protocol.
//
// A call is either inline (its limits travel with it: a bucket under
// Rate, a calendar quota under Quota) or addresses a budget path; both are
// one plan of levels that budget.Tree charges all together or not at all.
// A call admitted as a reservation (WAIT, or a queue strategy) is held
// here until its tokens are due, and refunded here if its caller goes away
// or the server stops first. See DESIGN.md.
package limiter

import (
	"sync/atomic"
	"time"

	"github.com/sluice-rl/sluice/budget"
	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/fault"
	"github.com/sluice-rl/sluice/keyspace"
	"github.com/sluice-rl/sluice/quota"
	"github.com/sluice-rl/sluice/raftfsm"
	"github.com/sluice-rl/sluice/reserve"
	"github.com/sluice-rl/sluice/script"
	"github.com/sluice-rl/sluice/usage"
)

// Call is one limiting call (budget.Call: inline when Rate or Quota is
// set, else the budget form on Path).
type Call = budget.Call

// Outcome is the answer to a call.
type Outcome = budget.Outcome

// Scratch is a caller's reusable buffer for the keys and names a call
// builds; one per connection (or goroutine), so that calls do not allocate.
type Scratch struct {
	b    budget.Scratch
	lim  engine.Limit // a bucket's own limit, when the call names none
	slot []byte       // an inline reservation's concurrency key
	// slotGen is the reservation store's generation when SlotOwner chose
	// to decide here (slotHere): the decision is taken again if another
	// member asked for the key's holds meanwhile.
	slotGen  uint64
	slotHere bool
	usage    usage.Local // the console's memo of this caller's budget node
}

// Parts returns what the last successful Acquire through sc decided for
// each part of a call that asked (Call.EachPart): [0] the call itself, [i]
// its With[i-1] (Call.With), each described as a call of that part alone
// would be, from the one decision that admitted or refused them all
// (budget.Scratch.Parts); empty for a call that did not ask. The slice
// is sc's, valid until its next call: a front describes every part from
// it, with no Peek per part.
func (sc *Scratch) Parts() []Outcome { return sc.b.Parts() }

// Cluster is the replicated state a service reads and writes; a
// *raftfsm.Node wrapped by the server implements it.
type Cluster interface {
	// State is this replica's state, for the hot path.
	State() *raftfsm.State
	// ReadState is the state for a read (raftfsm.Node.ReadState).
	ReadState(consistent bool) (*raftfsm.State, error)
	// Write proposes an entry wherever the leader is.
	Write(e *raftfsm.Entry) (raftfsm.Response, error)
	// Forward relays a client command to the leader and returns its raw
	// reply (raftfsm.Node.Forward).
	Forward(args [][]byte) ([]byte, error)
}

// QuotaState is the cluster's committed quota counters (*raftfsm.FSM).
type QuotaState interface {
	QuotaRoom(key []byte) bool
	Quota(key string) (raftfsm.QuotaItem, bool)
}

// Watcher tells a held call that its caller has gone away.
type Watcher interface {
	// Watch returns a channel closed when the caller goes away, and a
	// function to call when the hold ends.
	Watch() (gone <-chan struct{}, stop func())
}

// Service is the limiter of one node.
type Service struct {
	Store   *engine.Store
	Cluster Cluster
	// Quotas holds the committed quota counts; nil counts only this node's.
	Quotas QuotaState
	// Clock is the service's time in Unix ns.
	Clock func() int64
	// Shutdown is closed when the node begins to stop: held calls end.
	Shutdown <-chan struct{}
	// Waiting, if set, hears +1 when a call starts being held, -1 when
	// it ends; Counted, if set, hears every admission decision that is not
	// a dry run (label "" for inline calls).
	Waiting func(delta int)
	Counted func(tree *budget.Tree, label string, allowed int, cost int64)
	// Reserve, if set, asks the cluster for quota units now and reports
	// whether it answered within wait (quota.Reserver.Reserve): a call a
	// quota refused for want of units reserved here tries once more.
	Reserve func(wait time.Duration) bool
	// Holds keeps the node's open reservations (RL.RESERVE); nil: none.
	Holds *reserve.Store
	// Reserved, if set, hears each reservation event — "reserved",
	// "settled", "released" or "expired" — with the metrics label of its
	// budget ("inline" for the inline form).
	Reserved func(event, budget string)
	// ReserveTTL is a reservation's lifetime when its call gives none, in
	// ns (0: DefaultReserveTTL).
	ReserveTTL int64
	// Recorder, if set, records every decided call that is not a dry run:
	// the keys admitted and refused most, each budget node's counts.
	Recorder *usage.Recorder

	// Slots reaches the other members about concurrency slots (slots.go);
	// nil: this node counts its own.
	Slots SlotPeers
	slots slotState
	// Relays runs at the member it belongs to what another member holds
	// (relays.go); nil: this node holds everything.
	Relays Relays
	// Keys holds the data commands' values (data.go); nil: none.
	Keys *keyspace.Store
	// Scripts runs EVAL and EVALSHA over Keys (script.go); nil: none.
	Scripts *script.Engine
	// keysView is the member list Keys were last placed over
	// (DropMovedKeys).
	keysView atomic.Uint64
	// dropAgain: the member list changed at the last drop, and the next
	// call drops again.
	dropAgain atomic.Bool

	peers peerTimes // when each peer's consumption last arrived (peer.go)

	gate loadGate // limiting calls wait while the node loads (loading.go)
}

// reserveWait bounds how long a call waits for a quota reservation: one
// Raft commit, which takes milliseconds on a quiet cluster and may take
// hundreds on a loaded one (a call waits only as long as the commit).
const reserveWait = time.Second

// QuotaRoom reports whether a call may count against the quota counter
// key: the counter exists, here or in the cluster, or the cluster has room
// for another (--max-quota-counters).
func (s *Service) QuotaRoom(key []byte) bool {
	return s.Quotas == nil || s.Store.HasQuota(key) || s.Quotas.QuotaRoom(key)
}

// tree returns the budget tree a call works on (none for an inline call
// whose parts are all inline).
func (s *Service) tree(c *Call) *budget.Tree {
	if !c.Inline() {
		return s.Cluster.State().Tree
	}
	for i := range c.With {
		if !c.With[i].Inline() {
			return s.Cluster.State().Tree
		}
	}
	return nil
}

// Acquire charges c at the service clock, with its parts (Call.With) all
// together or not at all. An admission that is a
// reservation (Result.Wait > 0) is held until due — the outcome then
// describes the levels as they are when it returns — or refunded and
// refused if w's caller goes away or the node stops first.
func (s *Service) Acquire(c *Call, sc *Scratch, w Watcher) (Outcome, error) {
	if err := s.loaded(); err != nil {
		return Outcome{}, err
	}
	tree := s.tree(c)
	c.Quotas = s
	now := c.Now
	if now == 0 {
		now = s.Clock()
	}
	out, err := tree.Acquire(s.Store, now, c, &sc.b)
	if err == nil && out.Allowed == 0 && out.Result.Reserve && !c.DryRun && s.Reserve != nil && s.Reserve(reserveWait) {
		now = s.Clock()
		out, err = tree.Acquire(s.Store, now, c, &sc.b)
	}
	if err != nil {
		return out, err
	}
	r := &out.Result
	if out.Allowed == 1 && r.Wait > 0 && !c.DryRun {
		if s.hold(r.Wait, w) {
			peek := *c
			peek.Cost, peek.HasCost, peek.WaitMs, peek.HasWait, peek.DryRun = 0, true, 0, true, true
			if cur, err := tree.Acquire(s.Store, s.Clock(), &peek, &sc.b); err == nil {
				r.Remaining, r.ResetAfter, out.LimitedBy = cur.Result.Remaining, cur.Result.ResetAfter, cur.LimitedBy
			}
		} else {
			// Gone or stopping: the reserved tokens go back rather than
			// be admitted early.
			later := s.Clock()
			back, _ := tree.Refund(s.Store, later, c, out.Cost, &sc.b)
			out.Allowed, r.RetryAfter = 0, max(now+r.Wait-later, 1)
			r.Remaining, r.ResetAfter, out.LimitedBy = back.Result.Remaining, back.Result.ResetAfter, back.LimitedBy
		}
	}
	if !c.DryRun {
		if s.Counted != nil {
			s.Counted(tree, out.Label, out.Allowed, out.Cost)
		}
		if s.Recorder != nil {
			node := ""
			if out.Node != nil {
				node = out.Node.Path
			}
			s.Recorder.Record(now, c.Path, c.Subject, node, out.Allowed != 0, &sc.usage)
		}
	}
	return out, nil
}

// hold waits ns, and reports false if w's caller went away or the node
// began to stop first.
func (s *Service) hold(ns int64, w Watcher) bool { return s.wait(ns, nil, w) == timeUp }

// How a wait ended.
const (
	timeUp = iota
	woken  // the wake channel was closed
	ended  // the caller went away or the node began to stop
)

// wait waits ns, or until wake is closed (nil: never), w's caller goes
// away or the node begins to stop, and says which came first. The call is
// counted as held meanwhile (Waiting).
func (s *Service) wait(ns int64, wake <-chan struct{}, w Watcher) int {
	t := time.NewTimer(time.Duration(ns))
	defer t.Stop()
	if s.Waiting != nil {
		s.Waiting(1)
		defer s.Waiting(-1)
	}
	var gone <-chan struct{}
	if w != nil {
		var stop func()
		gone, stop = w.Watch()
		defer stop()
	}
	select {
	case <-t.C:
		return timeUp
	case <-wake:
		return woken
	case <-s.Shutdown:
	case <-gone:
	}
	return ended
}

// resolve decides the form of a call that may name either a budget path
// or an inline key without limits (RL.PEEK, RL.REFUND): a path the tree
// holds is the budget form; otherwise the call is inline, with the limit
// given or else the bucket's own (kept in sc). It returns the call to run,
// completed, and the tree (nil for an inline call).
func (s *Service) resolve(c *Call, sc *Scratch) (Call, *budget.Tree, error) {
	tree := s.Cluster.State().Tree
	if !c.Inline() {
		if _, _, ok := tree.Resolve(c.Path); ok {
			return *c, tree, nil
		}
	}
	if c.Subject != nil {
		if err := budget.CheckSubject(c.Inline(), c.Subject); err != nil {
			return Call{}, nil, err
		}
		return Call{}, nil, fault.New("NOBUDGET", "no budget node on path '%s'; KEY applies to budget paths only", fault.Printable(c.Path))
	}
	p := *c
	if !c.Inline() {
		l, ok := s.Store.Limit(engine.SpaceInline, c.Path)
		if !ok {
			return Call{}, nil, fault.New("NOBUDGET", "no budget node on path '%s' and no bucket for that key; give RATE … to name an inline limit", fault.Printable(c.Path))
		}
		sc.lim = l
		p.Rate = &sc.lim
	}
	return p, nil, nil
}

// Peek answers what Acquire would, consuming nothing.
func (s *Service) Peek(c *Call, sc *Scratch) (Outcome, error) {
	if err := s.loaded(); err != nil {
		return Outcome{}, err
	}
	p, tree, err := s.resolve(c, sc)
	if err != nil {
		return Outcome{}, err
	}
	p.DryRun, p.HasWait, p.WaitMs = true, true, 0
	return tree.Acquire(s.Store, s.Clock(), &p, &sc.b)
}

// Refund gives n tokens back to every level c charges (quotas included),
// up to each one's capacity, and describes the call afterwards.
func (s *Service) Refund(c *Call, n int64, sc *Scratch) (Outcome, error) {
	return s.onLevels(c, n, sc, (*budget.Tree).Refund)
}

// Reset forgets the bucket a call names (a budget node's own bucket, for
// the call's subject, or an inline key's) and reports whether there was one.
func (s *Service) Reset(c *Call, sc *Scratch) (bool, error) {
	tree := s.Cluster.State().Tree
	if _, _, ok := tree.Resolve(c.Path); ok {
		return tree.Reset(s.Store, c, &sc.b)
	}
	if c.Subject != nil {
		return false, fault.New("NOBUDGET", "no budget node on path '%s'; KEY applies to budget paths only", fault.Printable(c.Path))
	}
	return s.Store.Reset(engine.SpaceInline, c.Path), nil
}

// quotaCall completes a call that RL.QUOTA addresses: a budget path (with
// no QUOTA given), or an inline key, with the quota given or else the one
// the cluster last committed for it. The spec is filled in when needed.
func (s *Service) quotaCall(c *Call, spec *quota.Spec) (*budget.Tree, error) {
	tree := s.Cluster.State().Tree
	if c.Quota == nil {
		if _, _, ok := tree.Resolve(c.Path); ok {
			return tree, nil
		}
	}
	if c.Subject != nil {
		return nil, fault.New("NOBUDGET", "no budget node on path '%s'; KEY applies to budget paths only", fault.Printable(c.Path))
	}
	if c.Quota != nil {
		return nil, nil
	}
	if s.Quotas != nil {
		key := string(quota.AppendKey(nil, quota.InlineKey, c.Path))
		if it, found := s.Quotas.Quota(key); found && it.Limit > 0 {
			var p quota.Period
			if p.UnmarshalText([]byte(it.Period)) == nil {
				*spec = quota.Spec{N: it.Limit, Period: p}
				c.Quota = spec
				return nil, nil
			}
		}
	}
	return nil, fault.New("ERR", "no quota known for '%s': not a budget path, and no inline quota committed for that key; give QUOTA n PER period to describe one", fault.Printable(c.Path))
}

// Quota describes the tightest quota c counts against at the service
// clock.
func (s *Service) Quota(c *Call, sc *Scratch) (quota.Status, error) {
	if err := s.loaded(); err != nil {
		return quota.Status{}, err
	}
	q := *c
	var spec quota.Spec
	tree, err := s.quotaCall(&q, &spec)
	if err != nil {
		return quota.Status{}, err
	}
	st, found, err := tree.Quota(s.Store, s.Clock(), &q, &sc.b)
	if err == nil && !found {
		err = fault.New("ERR", "no quota applies to '%s': neither the node nor a level it charges has one", fault.Printable(c.Path))
	}
	return st, err
}

// QuotaReset forgets, cluster-wide, the counters of the quotas c names
// (one Raft entry; every node drops its pending count as it applies it),
// and reports whether there were any.
func (s *Service) QuotaReset(c *Call, sc *Scratch) (bool, error) {
	q := *c
	var spec quota.Spec
	tree, err := s.quotaCall(&q, &spec)
	if err != nil {
		return false, err
	}
	keys, err := tree.QuotaKeys(&q, &sc.b)
	if err != nil {
		return false, err
	}
	if len(keys) == 0 {
		return false, fault.New("ERR", "no quota applies to '%s': the node has none", fault.Printable(c.Path))
	}
	// A counter known only here (not yet committed) counts as existing.
	local := false
	e := raftfsm.Entry{Type: raftfsm.QuotaReset, Now: s.Clock()}
	for _, k := range keys {
		_, found := s.Store.Limit(engine.SpaceQuota, []byte(k))
		local = local || found
		e.Keys = append(e.Keys, raftfsm.QuotaKey(k))
	}
	r, err := s.write(&e)
	return err == nil && (r.N > 0 || local), err
}

// write proposes an entry and returns its response, a refusal by the
// state machine as the error.
func (s *Service) write(e *raftfsm.Entry) (raftfsm.Response, error) {
	r, err := s.Cluster.Write(e)
	if err == nil && r.Err != nil {
		err = r.Err
	}
	return r, err
}
