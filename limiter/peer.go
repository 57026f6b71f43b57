package limiter

import (
	"encoding/binary"
	"sync"
	"time"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/fault"
)

// The operations nodes run on each other: a peer's consumption applied to
// the local buckets (ApplySync), tokens leased out of the buckets this
// node owns and given back (Lease, ReturnLease), and quota batches
// committed for a peer (CommitQuotas, cluster.go). The fronts that carry
// them check that the caller is the node it says it is; these check that
// it is a member and that its payload is well formed.

// PeerError refuses a peer operation: from a node that is not a member,
// or with a payload it cannot take. Its text names neither the operation
// nor a reply code; the front that carries the operation adds both.
type PeerError struct {
	From    string // the node, when it is not a member
	Payload string // what is wrong with the payload, else ""
}

// NotABatch is the payload error of a quota batch that cannot be read.
const NotABatch = "not a batch of quota counts"

func (e *PeerError) Error() string {
	if e.Payload != "" {
		return "payload: " + e.Payload
	}
	return "from '" + fault.Printable([]byte(e.From)) + "', which is not a member"
}

// IsMember reports whether node id is a member of the cluster.
func (s *Service) IsMember(id string) bool {
	_, ok := s.Cluster.State().Members[id]
	return ok
}

// member returns the number of members, or a PeerError if from is not
// one of them.
func (s *Service) member(from string) (int, error) {
	members := s.Cluster.State().Members
	if _, ok := members[from]; !ok {
		return 0, &PeerError{From: from}
	}
	return len(members), nil
}

// ApplySync applies a peer's consumption since its last message (an
// engine delta payload) to the local buckets and returns how many it
// applied. Each bucket may go into debt by up to one burst per peer,
// enough for the cluster to absorb every node spending its full burst at
// once.
func (s *Service) ApplySync(from string, payload []byte) (int, error) {
	members, err := s.member(from)
	if err != nil {
		return 0, err
	}
	peers := int64(max(members-1, 1))
	now := s.Clock()
	n := 0
	err = engine.DecodeDeltas(payload, func(space engine.Space, key []byte, lim *engine.Limit, delta int64) {
		s.Store.Consume(now, space, key, lim, delta, peers*lim.Burst)
		n++
	})
	s.peers.heard(from, now)
	if err != nil {
		return 0, &PeerError{Payload: err.Error()}
	}
	return n, nil
}

// Lease is the owner's side of the token leases: for each bucket a peer
// asks for (an engine wants payload), it charges the credit the peer
// spent, takes up to the tokens wanted from its own bucket, and answers,
// as uvarints in order, how many it granted, for how long (ns) they may be
// used, when none, in how many ns to ask again, and how many it kept.
func (s *Service) Lease(from string, payload []byte) ([]byte, error) {
	if _, err := s.member(from); err != nil {
		return nil, err
	}
	now := s.Clock()
	var out []byte
	err := engine.DecodeWants(payload, func(space engine.Space, key []byte, lim *engine.Limit, tokens, owed int64) {
		got, expires, retry, left := s.Store.Take(now, engine.Request{Space: space, Key: key, Limit: lim, Cost: tokens}, owed)
		ttl := int64(0)
		if got > 0 {
			ttl = max(expires-now, 0)
		}
		out = binary.AppendUvarint(out, uint64(got))
		out = binary.AppendUvarint(out, uint64(ttl))
		out = binary.AppendUvarint(out, uint64(max(retry, 0)))
		out = binary.AppendUvarint(out, uint64(max(left, 0)))
	})
	if err != nil {
		return nil, &PeerError{Payload: err.Error()}
	}
	return out, nil
}

// ReturnLease takes back the tokens of a peer's expired leases (an engine
// delta payload) and returns for how many buckets.
func (s *Service) ReturnLease(from string, payload []byte) (int, error) {
	if _, err := s.member(from); err != nil {
		return 0, err
	}
	now := s.Clock()
	n := 0
	err := engine.DecodeDeltas(payload, func(space engine.Space, key []byte, lim *engine.Limit, tokens int64) {
		s.Store.Return(now, space, key, lim, tokens)
		n++
	})
	if err != nil {
		return 0, &PeerError{Payload: err.Error()}
	}
	return n, nil
}

// SyncLag returns the longest time since a peer's consumption arrived, in
// ns, or -1 for a node with no peers; self is this node's id, and a peer
// never heard from counts from started.
func (s *Service) SyncLag(self string, started time.Time) int64 {
	var peers []string
	for id := range s.Cluster.State().Members {
		if id != self {
			peers = append(peers, id)
		}
	}
	// Read on the service clock like the times peers are heard at.
	now := s.Clock()
	lag := s.peers.lag(peers, now-int64(time.Since(started)), now)
	if lag < 0 {
		return -1
	}
	return lag
}

// peerTimes records when each peer's consumption last arrived, for the
// sync lag.
type peerTimes struct {
	mu   sync.Mutex
	last map[string]int64 // peer id → unix ns of its last sync message
}

// heard notes a sync message from peer id at now.
func (p *peerTimes) heard(id string, now int64) {
	p.mu.Lock()
	if p.last == nil {
		p.last = map[string]int64{}
	}
	p.last[id] = now
	p.mu.Unlock()
}

// lag returns, over the given peers, the longest time since one was heard
// from (a peer never heard from counts from since), or -1 with no peers.
func (p *peerTimes) lag(peers []string, since, now int64) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	lag := int64(-1)
	for _, id := range peers {
		t, ok := p.last[id]
		if !ok {
			t = since
		}
		lag = max(lag, now-t)
	}
	return lag
}
