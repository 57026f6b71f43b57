package limiter

import (
	"time"

	"github.com/sluice-rl/sluice/budget"
	"github.com/sluice-rl/sluice/quota"
	"github.com/sluice-rl/sluice/raftfsm"
)

// SetBudget creates or replaces the budget node at path; warn, if not
// empty, accompanies an accepted change (an overcommitted parent).
func (s *Service) SetBudget(path string, cfg *budget.Config) (warn string, err error) {
	r, err := s.write(&raftfsm.Entry{Type: raftfsm.SetBudget, Path: path, Config: cfg})
	return r.Warn, err
}

// DelBudget deletes the node at path (and with recursive its subtree) and
// returns how many nodes went.
func (s *Service) DelBudget(path string, recursive bool) (int, error) {
	r, err := s.write(&raftfsm.Entry{Type: raftfsm.DelBudget, Path: path, Recursive: recursive})
	return r.N, err
}

// ImportBudgets loads exported nodes: with replace instead of the tree,
// with ifEmpty only into an empty tree.
func (s *Service) ImportBudgets(cfgs map[string]budget.Config, replace, ifEmpty bool) (warn string, err error) {
	r, err := s.write(&raftfsm.Entry{Type: raftfsm.ImportBudgets, Budgets: cfgs, Replace: replace, IfEmpty: ifEmpty})
	return r.Warn, err
}

// maxQuotaSkew is how far ahead of this node's clock a quota batch may be
// stamped: clocks of nodes differ, by far less.
const maxQuotaSkew = time.Hour

// AheadOfClock reports whether a quota batch numbered seq (the sender's
// wall clock in ns) and dated at (its service clock) is more than an hour
// ahead of this node's clocks: a node refuses such a batch, whether it
// arrives to be committed or forwarded as an entry to the leader.
func (s *Service) AheadOfClock(seq uint64, at int64) bool {
	horizon := max(s.Clock(), time.Now().UnixNano()) + int64(maxQuotaSkew)
	return seq > uint64(horizon) || at > horizon
}

// CommitQuotas commits a batch of origin's pending quota counts through
// Raft and returns how many counters it changed. Batches from nodes that
// are not members, empty ones, and ones stamped more than an hour ahead of
// this node's clock are refused (a *PeerError): one from the future would
// make every later batch of that node look already counted (or purge
// counters early).
func (s *Service) CommitQuotas(origin string, b *quota.Batch) (int, error) {
	if _, err := s.member(origin); err != nil {
		return 0, err
	}
	if b.Seq == 0 || len(b.Quotas) == 0 {
		return 0, &PeerError{Payload: NotABatch}
	}
	if s.AheadOfClock(b.Seq, b.Now) {
		return 0, &PeerError{Payload: "batch number or time more than an hour ahead of this node's clock"}
	}
	r, err := s.write(&raftfsm.Entry{Type: raftfsm.QuotaAdd, Origin: origin, Seq: b.Seq, Now: b.Now, Quotas: b.Quotas})
	return r.N, err
}

// ReserveQuotas proposes a reservation of quota units for origin (items'
// Used: units wanted, or negative, given back); the grants reach the
// proposer's quota.Reserver as its replica applies the entry.
func (s *Service) ReserveQuotas(origin string, items []quota.Item) error {
	_, err := s.write(&raftfsm.Entry{Type: raftfsm.QuotaReserve, Origin: origin, Quotas: items})
	return err
}

// ReturnQuotas proposes that the units a previous life of this node
// (origin) held and cannot have spent go back to the pool: marks are the
// spend marks that life wrote, and with all its other grants go back
// whole. It returns the units given back.
func (s *Service) ReturnQuotas(origin string, marks []quota.Item, all bool) (int, error) {
	r, err := s.write(&raftfsm.Entry{Type: raftfsm.QuotaReturn, Origin: origin, Quotas: marks, Replace: all})
	return r.N, err
}
