package limiter

import (
	"sync"
	"time"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/fault"
	"github.com/sluice-rl/sluice/reserve"
)

// Concurrency slots in a cluster. Every reservation of a key that takes a
// slot is decided by one member: the first in the key's rendezvous
// ranking over the members that this node has not found unreachable (the
// key's owner while it answers). That member
//
//   - before its first decision of the key since the member list, or the
//     members it found unreachable, changed (or since it started), asks
//     every other member it can reach for the key's holds (SlotHolds) and
//     counts what they answer as held: the previous owner's holds, and the
//     copies kept of a dead owner's;
//   - after granting a slot, and before answering, registers a copy of the
//     hold (its id, key and expiry) at the next member in the ranking it
//     can reach (SlotCopy), its backup;
//   - when the hold ends (settled, released, expired, or its charge
//     refused), tells every member (SlotsEnded, asynchronously: a copy left
//     over only counts until its TTL).
//
// A member asked for a key's holds leaves the key to the asker from then
// on: a decision it had chosen to make is chosen again (reserve.ErrMoved).
// A member whose member list differs from the asker's does not answer
// until they agree, so no two members decide a key under different lists.

// SlotPeers is how a node reaches the other members about slots; the
// server implements it over RESP (RL.SLOT).
type SlotPeers interface {
	// Self is this node's id.
	Self() string
	// Copy registers at member a copy of hold id of key, which expires
	// ttl ns from now.
	Copy(member, key, id string, ttl int64) error
	// Holds asks member for every hold of key it knows (each with the ns
	// left of its TTL), under the membership view; ErrViewDiffers when
	// its member list is not this node's.
	Holds(member string, view uint64, key string) ([]reserve.Copy, error)
	// Ended tells every other member, in the background, that holds ended.
	Ended(ids []string)
	// Renewed tells every other member, in the background, that hold id
	// now expires ttl ns from now.
	Renewed(id string, ttl int64)
}

// ErrViewDiffers is a member's answer to SlotHolds while its member list
// is not the asker's.
var ErrViewDiffers = &fault.Error{Code: "TRYAGAIN", Msg: "this node's member list differs from the asking node's: the nodes do not agree on who owns the key yet", Retry: true}

// errSlotsUnsettled refuses a reservation while the members have not
// agreed on their list for slotAgreeWait.
var errSlotsUnsettled = &fault.Error{Code: "TRYAGAIN", Msg: "the cluster's members do not agree on the member list yet: no concurrency slot is granted until they do", Retry: true}

// errSlotsUnreachable refuses a reservation while two or more other
// members do not answer: the holds of the key they know may be known to no
// one else.
var errSlotsUnreachable = &fault.Error{Code: "TRYAGAIN", Msg: "two or more members do not answer: the concurrency slots they may hold are unknown, no slot is granted until they answer", Retry: true}

// slotAgreeWait bounds how long a decision waits for the members to agree
// on their list; slotPeerWait how long one member's answer is awaited.
const slotAgreeWait = time.Second

// maxSlotSynced bounds the keys remembered as synced in one epoch: past
// it the record starts again, which costs only one more round of
// questions per key.
const maxSlotSynced = 100_000

// slotState is the service's side of the slots of a cluster.
type slotState struct {
	mu    sync.Mutex
	down  map[string]int64 // member → ns until which it counts as unreachable
	view  uint64
	epoch uint64 // bumped when the view changes
	// synced: key → the epoch its holds were learnt in. A member asking
	// for a key's holds (it takes the key over) drops the key and counts
	// in asked, so that a round of questions it overlapped does not count.
	// Both start again past maxSlotSynced keys.
	synced map[string]uint64
	asked  map[string]uint64
}

// ownersCurrent waits, up to slotAgreeWait, until the owners the store
// ranks keys over are the members of this node's state (the server sets
// them a few ms after a change), so that no key is routed or decided by
// an older member list; else errSlotsUnsettled.
func (s *Service) ownersCurrent() error {
	deadline := time.Now().Add(slotAgreeWait)
	for {
		members := s.Cluster.State().Members
		ids := make([]string, 0, len(members))
		for id := range members {
			ids = append(ids, id)
		}
		if engine.ViewOf(ids) == s.Store.View() {
			return nil
		}
		if time.Now().After(deadline) {
			return errSlotsUnsettled
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// slotDown reports whether member id counts as unreachable at now.
func (s *Service) slotDown(id string, now int64) bool {
	s.slots.mu.Lock()
	defer s.slots.mu.Unlock()
	return now < s.slots.down[id]
}

// slotUp clears member id's unreachable mark: it just spoke to this node.
func (s *Service) slotUp(id string) {
	s.slots.mu.Lock()
	defer s.slots.mu.Unlock()
	delete(s.slots.down, id)
}

// routeSlot returns the member that decides key: the first of its ranking
// that is this node ("") or that this node has not found unreachable.
func (s *Service) routeSlot(key []byte, now int64) string {
	var buf [8]string
	self := s.Store.Self()
	for _, id := range s.Store.Ranking(engine.SpaceInline, key, buf[:0]) {
		if id == self {
			return ""
		}
		if !s.slotDown(id, now) {
			return id
		}
	}
	return ""
}

// syncSlot makes sure this node knows every hold of key the other
// members know, once per epoch, before it decides key. Every other member
// is asked, those marked unreachable too: one ranked above this node that
// answers is reachable again and decides key instead (reserve.ErrMoved).
// Each hold is known to its issuer and to the member it registered a copy
// at, so one member that does not answer loses nothing; with two or more
// silent, holds may be unknown and no slot is granted
// (errSlotsUnreachable) until they answer or the epoch's holds are known.
func (s *Service) syncSlot(key []byte, now int64) error {
	view := s.Store.View()
	st := &s.slots
	st.mu.Lock()
	if view != st.view {
		st.view = view
		st.epoch++
	}
	if st.synced == nil || len(st.synced) >= maxSlotSynced || len(st.asked) >= maxSlotSynced {
		st.synced, st.asked = map[string]uint64{}, map[string]uint64{}
	}
	epoch, asked := st.epoch, st.asked[string(key)]
	done := st.synced[string(key)] == epoch && epoch != 0
	st.mu.Unlock()
	if done || view == 0 {
		return nil
	}
	self := s.Slots.Self()
	var buf [8]string
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failed error
	silent, above, moved := 0, true, false
	for _, m := range s.Store.Ranking(engine.SpaceInline, key, buf[:0]) {
		if m == self {
			above = false
			continue
		}
		wg.Add(1)
		go func(m string, above bool) {
			defer wg.Done()
			deadline := time.Now().Add(slotAgreeWait)
			for {
				cs, err := s.Slots.Holds(m, view, string(key))
				switch {
				case err == nil:
					at := s.Clock()
					for _, c := range cs {
						if e := s.Holds.AddCopy(string(key), c.ID, at+c.Expires); e != nil {
							mu.Lock()
							failed = e
							mu.Unlock()
							return
						}
					}
					if above && s.slotDown(m, at) {
						s.slotUp(m)
						mu.Lock()
						moved = true
						mu.Unlock()
					}
					return
				case err == ErrViewDiffers && time.Now().Before(deadline):
					time.Sleep(10 * time.Millisecond)
				case err == ErrViewDiffers:
					mu.Lock()
					failed = errSlotsUnsettled
					mu.Unlock()
					return
				default:
					s.SlotOwnerUnreachable(m, s.Clock())
					mu.Lock()
					silent++
					mu.Unlock()
					return
				}
			}
		}(m, above)
	}
	wg.Wait()
	switch {
	case failed != nil:
		return failed
	case moved:
		return reserve.ErrMoved
	case silent > 1:
		return errSlotsUnreachable
	}
	s.replicateKey(key)
	st.mu.Lock()
	if st.epoch == epoch && st.asked[string(key)] == asked {
		st.synced[string(key)] = epoch
	}
	st.mu.Unlock()
	return nil
}

// copySlot registers a copy of hold id of key at its backup: the first
// member after this node, in key's ranking, that answers.
func (s *Service) copySlot(key []byte, id string, ttl int64) {
	self := s.Slots.Self()
	var buf [8]string
	for _, m := range s.Store.Ranking(engine.SpaceInline, key, buf[:0]) {
		if m == self || s.slotDown(m, s.Clock()) {
			continue
		}
		if s.Slots.Copy(m, string(key), id, ttl) == nil {
			return
		}
		s.SlotOwnerUnreachable(m, s.Clock())
	}
}

// slotEnded tells the members that h, a hold with a slot, ended.
func (s *Service) slotEnded(h *reserve.Hold) {
	if s.Slots != nil && h.SlotKey() != "" && s.Store.View() != 0 {
		ids := []string{s.Holds.Format(h)}
		// Remembered here too: a member may still answer a copy of it.
		s.Holds.DropCopies(ids)
		s.Slots.Ended(ids)
	}
}

// SlotHolds answers a member that is to decide key: every hold of key
// this node knows, each with the ns left of its TTL; from now on this node
// leaves key to that member. A member whose view is not this node's is
// answered ErrViewDiffers.
func (s *Service) SlotHolds(from string, view uint64, key string) ([]reserve.Copy, error) {
	if s.Holds == nil {
		return nil, errReserveOff
	}
	if view != s.Store.View() {
		return nil, ErrViewDiffers // a member this node does not know yet among them
	}
	if _, err := s.member(from); err != nil {
		return nil, err
	}
	st := &s.slots
	st.mu.Lock()
	delete(st.down, from)
	if st.synced != nil {
		delete(st.synced, key) // should this node decide key again, it asks first
		st.asked[key]++
	}
	st.mu.Unlock()
	now := s.Clock()
	cs := s.Holds.Holds(key, now)
	for i := range cs {
		cs[i].Expires = max(cs[i].Expires-now, 1)
	}
	return cs, nil
}

// SlotCopy keeps a copy of a hold member from granted: id, of key, ttl ns
// left.
func (s *Service) SlotCopy(from, key, id string, ttl int64) error {
	if s.Holds == nil {
		return errReserveOff
	}
	if _, err := s.member(from); err != nil {
		return err
	}
	s.slotUp(from)
	return s.Holds.AddCopy(key, id, s.Clock()+ttl)
}

// SlotsEnded forgets the copies of holds that ended.
func (s *Service) SlotsEnded(from string, ids []string) error {
	if s.Holds == nil {
		return errReserveOff
	}
	if _, err := s.member(from); err != nil {
		return err
	}
	s.Holds.DropCopies(ids)
	return nil
}

// SlotRenewed renews the copy of id, if this node keeps one.
func (s *Service) SlotRenewed(from, id string, ttl int64) error {
	if s.Holds == nil {
		return errReserveOff
	}
	if _, err := s.member(from); err != nil {
		return err
	}
	s.Holds.RenewCopy(id, s.Clock()+ttl)
	return nil
}

// ReplicateSlots registers, at its key's backup under the current
// members, a copy of every open hold of this node that takes a slot, and
// of every copy it keeps of a key it decides: the server calls it when
// the member list changes, since a key's backup may have changed with it
// (a member joined between, or the backup left), and the backup is where
// the key's slots are counted should this node stop. A copy of a member
// that left is known to no one else.
func (s *Service) ReplicateSlots() {
	if s.Holds == nil || s.Slots == nil || s.Store.View() == 0 {
		return
	}
	now := s.Clock()
	self := s.Slots.Self()
	for _, h := range s.Holds.Slotted(true) {
		if h.Expires <= now {
			continue
		}
		if node, _ := reserve.IssuedBy(h.ID); node != self && s.routeSlot([]byte(h.Key), now) != "" {
			continue // a copy of a key another member decides
		}
		s.copySlot([]byte(h.Key), h.ID, h.Expires-now)
	}
}

// replicateKey registers every hold of key this node knows at the key's
// backup: after it learnt the key's holds from the other members, the
// holds of one that left or stopped are known here alone.
func (s *Service) replicateKey(key []byte) {
	now := s.Clock()
	for _, h := range s.Holds.KeyHolds(string(key)) {
		if h.Expires > now {
			s.copySlot(key, h.ID, h.Expires-now)
		}
	}
}
