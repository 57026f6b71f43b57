package limiter

import (
	"time"

	"github.com/sluice-rl/sluice/budget"
	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/fault"
	"github.com/sluice-rl/sluice/reserve"
)

// DefaultReserveTTL is how long a reservation lives when neither the call
// nor the node says otherwise.
const DefaultReserveTTL = int64(60 * time.Second)

// ReserveOpts are what RL.RESERVE takes besides the call itself.
type ReserveOpts struct {
	// TTL in ns; 0: the service's ReserveTTL.
	TTL int64
	// Concurrency is the inline form's limit on reservations in flight
	// for the key (0: none). The budget form's comes from the node.
	Concurrency int64
}

// errReserveOff answers reservation commands on a service built without
// a reservation store.
var errReserveOff = &fault.Error{Code: "ERR", Msg: "reservations are not enabled on this node"}

// Reservation admits c as RL.ACQUIRE with COST estimate would (c.Cost:
// every level and quota, all or nothing) and holds what it charged under
// the id it returns, after taking a concurrency slot if the target has a
// limit. A call refused (by a level, or for want of a slot) holds nothing
// and returns no id; with c's WAIT it first waits for a slot, then for
// tokens, within the same bound. It runs where the key's slots are
// decided (reserveWhereSlotsAre), here or at another member, so a
// concurrency limit holds across the cluster whichever front asks.
func (s *Service) Reservation(c *Call, o ReserveOpts, sc *Scratch, w Watcher) (Outcome, string, error) {
	// A decision chosen here while another member took the key's slots
	// over (reserve.ErrMoved) is chosen again: a few times at most, as a
	// takeover happens once per key and member list.
	for try := 0; ; try++ {
		if out, id, relayed, err := s.reserveWhereSlotsAre(c, o, sc); relayed {
			return out, id, err
		}
		out, id, err := s.reserveHere(c, o, sc, w)
		if err != reserve.ErrMoved || try == 3 {
			return out, id, err
		}
	}
}

// reserveHere is Reservation decided on this node.
func (s *Service) reserveHere(c *Call, o ReserveOpts, sc *Scratch, w Watcher) (Outcome, string, error) {
	if s.Holds == nil {
		return Outcome{}, "", errReserveOff
	}
	if err := s.loaded(); err != nil {
		return Outcome{}, "", err
	}
	if len(c.With) > 0 || c.DryRun {
		return Outcome{}, "", &fault.Error{Code: "ERR", Msg: "a reservation takes one call, not a dry run nor several parts"}
	}
	key, n, err := s.slotKey(c, o, sc)
	if err != nil {
		return Outcome{}, "", err
	}
	now := c.Now
	if now == 0 {
		now = s.Clock()
	}
	ttl := o.TTL
	if ttl == 0 {
		ttl = s.reserveTTL()
	}
	deadline := now + c.WaitMs*int64(time.Millisecond)
	here, gen := sc.slotHere && n > 0, sc.slotGen
	sc.slotHere = false
	if here {
		// This node decides the key for the cluster: it first learns the
		// holds the other members know of.
		if err := s.syncSlot(key, now); err != nil {
			return Outcome{}, "", err
		}
	}
	h, out, now, err := s.slot(now, deadline, ttl, key, n, w, here, gen)
	if h == nil {
		return out, "", err
	}
	if !c.Inline() && o.Concurrency > 0 {
		h.Label = "inline"
		s.event("reserved", h)
		out := s.slotOnly(h, key, n, now)
		id := s.Holds.Commit(h)
		if here {
			s.copySlot(key, id, h.Expires-now)
		}
		return out, id, nil
	}
	call := *c
	call.Now = now
	if c.HasWait {
		// What is left of WAIT after the slot is the bound on tokens.
		call.WaitMs = max(deadline-now, 0) / int64(time.Millisecond)
	}
	out, err = s.Acquire(&call, sc, w)
	if err != nil || out.Allowed != 1 {
		s.Holds.Abort(h)
		if here {
			s.slotEnded(h) // a member may have learnt of it meanwhile
		}
		return out, "", err
	}
	h.Estimate, h.Label, h.Waited = out.Cost, out.Label, s.Cluster.State().Tree.Waits(&call)
	if h.Label == "" {
		h.Label = "inline"
	}
	s.record(h, sc)
	s.event("reserved", h)
	id := s.Holds.Commit(h)
	if here {
		s.copySlot(key, id, h.Expires-now)
	}
	return out, id, nil
}

// record copies into h every request the call admitted on sc charged.
func (s *Service) record(h *reserve.Hold, sc *Scratch) {
	levels, size := sc.b.Charged(), 0
	for i := 0; i < levels; i++ {
		r, name := sc.b.ChargedLevel(i)
		size += len(r.Key) + len(name)
	}
	h.Grow(levels, size)
	for i := 0; i < levels; i++ {
		h.AddLevel(sc.b.ChargedLevel(i))
		h.Levels[i].PerCall = sc.b.ChargedPerCall(i)
	}
}

func (s *Service) reserveTTL() int64 {
	if s.ReserveTTL > 0 {
		return s.ReserveTTL
	}
	return DefaultReserveTTL
}

// slotKey returns the concurrency key and limit of c (n 0: none), built
// in sc. An inline concurrency (ReserveOpts) makes the call inline even
// with no RATE or QUOTA: a key limited only in flight.
func (s *Service) slotKey(c *Call, o ReserveOpts, sc *Scratch) ([]byte, int64, error) {
	if c.Inline() || o.Concurrency > 0 {
		if o.Concurrency == 0 {
			return nil, 0, nil
		}
		// A concurrency slot is keyed by the call's own key.
		if err := budget.CheckSubject(true, c.Subject); err != nil {
			return nil, 0, err
		}
		sc.slot = append(append(sc.slot[:0], budget.ConcurrencyPrefix...), c.Path...)
		return sc.slot, o.Concurrency, nil
	}
	return s.Cluster.State().Tree.Concurrency(c, &sc.b)
}

// SlotOwner returns the member that decides reservation c when c takes a
// concurrency slot and another member does (slots.go): the first member
// of the key's rendezvous ranking this node has not found unreachable.
// Every reservation of one key is then decided on one node, and the limit
// holds across the cluster. It returns "" when this node decides: no
// slot, a node alone, this node first in the ranking, or every member
// above it unreachable. Every member relays the same way, so a
// reservation relayed here whose key another member decides goes on to
// it: up the ranking only, never in a loop.
func (s *Service) SlotOwner(c *Call, o ReserveOpts, sc *Scratch) (string, error) {
	sc.slotHere = false
	if s.Holds == nil || len(c.With) > 0 || c.DryRun {
		return "", nil // Reservation answers these
	}
	// A node that has not caught up does not know the members yet: it
	// routes nothing before it has.
	if err := s.loaded(); err != nil {
		return "", err
	}
	sc.slotGen = s.Holds.Gen()
	key, n, err := s.slotKey(c, o, sc)
	if err != nil || n == 0 {
		return "", err
	}
	now := c.Now
	if now == 0 {
		now = s.Clock()
	}
	if s.Slots != nil {
		if err := s.ownersCurrent(); err != nil {
			return "", err
		}
	}
	id := s.routeSlot(key, now)
	sc.slotHere = id == "" && s.Slots != nil
	return id, nil
}

// SlotOwnerUnreachable records that member id did not answer about slots
// at now: for SlotOwnerPause the next member of each of its keys' ranking
// decides them — its backup, which keeps copies of its holds — so that
// calls do not each wait for it.
func (s *Service) SlotOwnerUnreachable(id string, now int64) {
	st := &s.slots
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.down == nil {
		st.down = map[string]int64{}
	}
	for m, till := range st.down { // members only: a handful
		if now >= till {
			delete(st.down, m)
		}
	}
	st.down[id] = now + int64(SlotOwnerPause)
}

// SlotOwnerPause is how long a member that did not answer about slots is
// not asked again.
const SlotOwnerPause = time.Second

// slotOnly describes a reservation that takes a slot and no tokens: the
// slots left of the key's n.
func (s *Service) slotOnly(h *reserve.Hold, key []byte, n, now int64) Outcome {
	left := n - int64(s.Holds.Counted(string(key), now))
	return Outcome{Allowed: 1, LimitedBy: key, Result: engine.Result{Allowed: true, Remaining: max(left, 0), Limit: n}}
}

// slot opens a hold with a slot of key (limit n), waiting until deadline
// for one to free if need be. It returns the hold and the time it got it,
// or no hold and the refusal (or error) to answer.
func (s *Service) slot(now, deadline, ttl int64, key []byte, n int64, w Watcher, here bool, gen uint64) (*reserve.Hold, Outcome, int64, error) {
	for {
		var h *reserve.Hold
		var retry int64
		var wake <-chan struct{}
		var err error
		if here {
			h, retry, wake, err = s.Holds.OpenAt(now, ttl, key, n, gen)
		} else {
			h, retry, wake, err = s.Holds.Open(now, ttl, key, n)
		}
		if h != nil || err != nil {
			return h, Outcome{}, now, err
		}
		refused := Outcome{LimitedBy: key, Result: engine.Result{Limit: n, RetryAfter: retry, ResetAfter: retry}}
		if now >= deadline || s.wait(deadline-now, wake, w) != woken {
			return nil, refused, now, nil
		}
		now = s.Clock()
	}
}

// Settle ends reservation id at its real cost n: the difference from the
// estimate is given back on every level it charged when n is less, and
// charged when n is more — never refused, the buckets may go into debt,
// and quotas count the real total. It describes the levels afterwards.
func (s *Service) Settle(id string, n int64) (Outcome, error) {
	if m, elsewhere, err := s.issuer(id); err != nil || elsewhere {
		if err != nil {
			return Outcome{}, err
		}
		return s.Relays.Settle(m, id, n)
	}
	h, err := s.take(id)
	if h == nil {
		if err == nil {
			err = reserve.ErrUnknown(id)
		}
		return Outcome{}, err
	}
	now := s.Clock()
	s.adjust(h, now, n-h.Estimate, false)
	s.slotEnded(h)
	s.event("settled", h)
	return s.describe(h, now), nil
}

// Release ends reservation id without the work: the whole estimate goes
// back. It reports false if there was no such reservation.
func (s *Service) Release(id string) (bool, error) {
	if m, elsewhere, err := s.issuer(id); err != nil || elsewhere {
		if err != nil {
			return false, err
		}
		return s.Relays.Release(m, id)
	}
	h, err := s.take(id)
	if h == nil {
		return false, err
	}
	s.adjust(h, s.Clock(), -h.Estimate, true)
	s.slotEnded(h)
	s.event("released", h)
	return true, nil
}

// Renew makes reservation id expire ttl ns from now (0: the service's
// default TTL) and reports whether it was open.
func (s *Service) Renew(id string, ttl int64) (bool, error) {
	if s.Holds == nil {
		return false, errReserveOff
	}
	if ttl == 0 {
		ttl = s.reserveTTL()
	}
	if m, elsewhere, err := s.issuer(id); err != nil || elsewhere {
		if err != nil {
			return false, err
		}
		return s.Relays.Renew(m, id, ttl)
	}
	ok, err := s.Holds.Renew(id, s.Clock(), ttl)
	if ok && s.Slots != nil && s.Store.View() != 0 && s.Holds.Slot(id) != "" {
		s.Slots.Renewed(id, ttl) // the copies, wherever they are, live as long
	}
	return ok, err
}

// ExpireReservations settles at their estimate the reservations whose
// time is up at now — what they charged stays charged — and frees their
// slots; it returns how many there were. The node calls it on a ticker.
func (s *Service) ExpireReservations(now int64) int {
	if s.Holds == nil {
		return 0
	}
	return s.Holds.Expire(now, func(h *reserve.Hold) {
		s.slotEnded(h)
		s.event("expired", h)
	})
}

// event tells the Reserved hook, if any.
func (s *Service) event(kind string, h *reserve.Hold) {
	if s.Reserved != nil {
		s.Reserved(kind, h.Label)
	}
}

func (s *Service) take(id string) (*reserve.Hold, error) {
	if s.Holds == nil {
		return nil, errReserveOff
	}
	return s.Holds.Take(id)
}

// adjust charges delta more tokens (or gives -delta back) on every level h
// charged by its cost; a level that counted the call (a node's requests)
// is left as it is, unless release gives back its 1.
func (s *Service) adjust(h *reserve.Hold, now, delta int64, release bool) {
	for i := range h.Levels {
		r := h.Levels[i].Request()
		delta := delta
		if h.Levels[i].PerCall {
			if !release || h.Estimate == 0 {
				continue
			}
			delta = -1
		}
		switch {
		case delta > 0 && h.Waited:
			s.Store.ChargeWaited(now, &r, delta)
		case delta > 0:
			s.Store.Charge(now, &r, delta)
		case delta < 0 && r.Space == engine.SpaceQuota:
			s.Store.RefundQuota(now, &r, -delta)
		case delta < 0 && h.Waited:
			s.Store.RefundWaited(now, r.Space, r.Key, r.Limit, -delta)
		case delta < 0:
			s.Store.Refund(now, r.Space, r.Key, r.Limit, -delta)
		}
	}
}

// describe answers for h's levels as RL.PEEK with COST 0 would: the
// tightest level now that counts cost (a node's requests count calls, in
// another unit), or of all levels when none does.
func (s *Service) describe(h *reserve.Hold, now int64) Outcome {
	n := len(h.Levels)
	if n == 0 {
		return Outcome{Allowed: 1, Unlimited: true, Result: engine.Result{Allowed: true, Remaining: -1, Limit: -1}}
	}
	// Described by the levels that count cost, as an admitted budget call
	// is (budget describeCost); by every level when all count calls.
	var reqs [engine.MaxLevels]engine.Request
	var among uint32
	for i := range h.Levels {
		reqs[i] = h.Levels[i].Request()
		if !h.Levels[i].PerCall {
			among |= 1 << i
		}
	}
	if among == 0 {
		among = 1<<n - 1
	}
	r, _ := s.Store.PeekAmong(now, reqs[:n], among)
	return Outcome{Allowed: 1, Result: r, LimitedBy: h.Levels[r.Level].Name, Cost: h.Estimate, Levels: n}
}
