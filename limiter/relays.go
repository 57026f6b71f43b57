package limiter

import (
	"sort"
	"sync"
	"time"

	"github.com/sluice-rl/sluice/fault"
	"github.com/sluice-rl/sluice/keyspace"
	"github.com/sluice-rl/sluice/reserve"
	"github.com/sluice-rl/sluice/usage"
)

// Relays runs, at the member it belongs to, what a front asks of this
// node but another member holds: a reservation's settle, release and
// renew (its issuer, named in its id), a reservation whose key's slots
// another member decides, another member's usage summary. The node sets
// it (peer.Relays); nil: a node alone, which holds everything. Fronts call
// the Service, never Relays: the Service decides where a call runs.
type Relays interface {
	// Self is this node's id.
	Self() string
	Settle(member, id string, n int64) (Outcome, error)
	Release(member, id string) (bool, error)
	Renew(member, id string, ttl int64) (bool, error)
	// Reserve runs the reservation c with o at member, waiting at most
	// timeout; answered is false when it did not answer.
	Reserve(member string, c *Call, o ReserveOpts, timeout time.Duration) (out Outcome, id string, answered bool, err error)
	TopSummary(member, kind string) (usage.Summary, error)
	// Data runs a data command at member, the owner of its keys, and
	// returns its answer (an error reply when member does not answer).
	Data(member string, args [][]byte) keyspace.Reply
}

// Forward relays a client command that only the leader serves (a
// membership change, a CONSISTENT read, a write the RESP front sends on
// as it came) and returns the leader's raw reply, which the front writes
// back as it is; raftfsm.ErrLeaderHere when this node leads meanwhile.
func (s *Service) Forward(args [][]byte) ([]byte, error) { return s.Cluster.Forward(args) }

// issuer returns the member that issued reservation id, when that is
// another member: the call then runs there. An id another node issued
// that is not a member is NORESERVATION; without Relays the store
// answers it (it lives elsewhere).
func (s *Service) issuer(id string) (member string, elsewhere bool, err error) {
	if s.Holds == nil || s.Cluster == nil {
		return "", false, nil
	}
	node, ok := reserve.IssuedBy(id)
	if !ok || node == s.Holds.Node() {
		return "", false, nil
	}
	if m, known := s.Cluster.State().Members[node]; !known || m.RespAddr == "" {
		return "", true, fault.New("NORESERVATION", "reservation '%s' was issued by node '%s', which is not a member of this cluster",
			fault.Printable([]byte(id)), fault.Printable([]byte(node)))
	}
	return node, s.Relays != nil, nil
}

// slotRelayTimeout bounds how long a reservation waits for the member
// that decides its concurrency slots, beyond its own WAIT: that member
// answers from memory, after asking the others once per key and member
// list (a second at most each), so three seconds is long; one that does
// not answer is skipped for SlotOwnerPause, and the next member of the
// key's ranking decides meanwhile.
const slotRelayTimeout = 3 * time.Second

// reserveWhereSlotsAre runs the reservation c with o at the member that
// decides the concurrency slots of its key (SlotOwner), when another
// member does, and returns its answer: its id names that member, so
// RL.SETTLE finds it from any node. A member that does not answer is
// marked unreachable and the next one of the key's ranking is asked.
// relayed is false, with nothing sent, when this node decides: no slot to
// take, this node first of the members it can reach in the key's
// ranking. A reservation relayed here is relayed on the same way — only
// ever to a member ranked above this one, so never in a loop.
func (s *Service) reserveWhereSlotsAre(c *Call, o ReserveOpts, sc *Scratch) (out Outcome, id string, relayed bool, err error) {
	for {
		owner, err := s.SlotOwner(c, o, sc)
		if err != nil || owner == "" || s.Relays == nil {
			return out, "", err != nil, err
		}
		wait := slotRelayTimeout + time.Duration(c.WaitMs)*time.Millisecond
		out, id, answered, err := s.Relays.Reserve(owner, c, o, wait)
		if answered {
			return out, id, true, err
		}
		s.SlotOwnerUnreachable(owner, s.Clock())
	}
}

// Top is the usage summary of kind across the cluster: this node's and,
// unless local, every other member's; unreachable lists the members that
// did not answer, in id order.
func (s *Service) Top(kind string, local bool) (sums []usage.Summary, unreachable []string) {
	sums = []usage.Summary{s.TopSummary(kind)}
	if local || s.Relays == nil {
		return sums, nil
	}
	self := s.Relays.Self()
	type answer struct {
		id  string
		sum usage.Summary
		err error
	}
	var mu sync.Mutex
	var answers []answer
	var wg sync.WaitGroup
	for id, m := range s.Cluster.State().Members {
		if id == self || m.RespAddr == "" {
			continue
		}
		wg.Add(1)
		go func(id string) {
			defer wg.Done()
			sum, err := s.Relays.TopSummary(id, kind)
			mu.Lock()
			answers = append(answers, answer{id, sum, err})
			mu.Unlock()
		}(id)
	}
	wg.Wait()
	sort.Slice(answers, func(i, j int) bool { return answers[i].id < answers[j].id })
	for _, a := range answers {
		if a.err == nil {
			sums = append(sums, a.sum)
		} else {
			unreachable = append(unreachable, a.id)
		}
	}
	return sums, unreachable
}
