package limiter

import (
	"bytes"
	"sort"
	"strings"

	"github.com/sluice-rl/sluice/bounds"
	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/fault"
	"github.com/sluice-rl/sluice/quota"
	"github.com/sluice-rl/sluice/raftfsm"
	"github.com/sluice-rl/sluice/usage"
)

// MaxUsageCount bounds RL.USAGE's COUNT and RL.QUOTA LIST's: a page of
// nodes or counters, however large the tree or the table.
const MaxUsageCount = 1000

// NodeUsage is what RL.USAGE reports of one budget node, at one moment.
type NodeUsage struct {
	Path string
	// Limit is the node's effective limit; HasLimit is false when nothing
	// limits calls addressed to it.
	Limit    engine.Limit
	HasLimit bool
	// Peek is what a call to the node (for the subject, if given) would
	// see now, consuming nothing; PeekErr says why there is none (a
	// node with a per-subject scope asked without a subject).
	Peek    Outcome
	PeekErr error
	// Quota is the tightest quota a call to the node counts against; nil
	// if none.
	Quota *quota.Status
	// InFlight is the reservations this node holds that charged the node
	// (itself or as an aggregate).
	InFlight int
	// Admitted and Refused are this node's calls to the budget node over
	// the last minute; Counted is false when the node is not followed
	// (usage.NodeCapacity nodes busy at once).
	Admitted, Refused int64
	Counted           bool
}

// usageCount bounds COUNT of RL.USAGE and RL.QUOTA LIST (n of /v1/usage).
var usageCount = bounds.Int{Lo: 1, Hi: MaxUsageCount}

// Usage describes at most n of the configured nodes whose paths start
// with prefix and sort after after, in path order, and returns the path to
// continue from ("" at the end). subject, if not nil, is the KEY that
// per-subject nodes are looked at for.
func (s *Service) Usage(prefix, after string, subject []byte, n int, sc *Scratch) ([]NodeUsage, string, error) {
	if !usageCount.In(int64(n)) {
		return nil, "", &fault.Error{Code: "ERR", Msg: usageCount.Msg("COUNT")}
	}
	tree := s.Cluster.State().Tree
	paths, more := tree.PathsPage(prefix, after, n)
	inFlight := s.inFlight()
	now := s.Clock()
	out := make([]NodeUsage, 0, len(paths))
	for _, p := range paths {
		node := tree.Get(p)
		if node == nil {
			continue
		}
		u := NodeUsage{Path: p, InFlight: inFlight[p]}
		u.Limit, u.HasLimit = node.Effective()
		call := Call{Path: []byte(p), Subject: subject, HasCost: true}
		u.Peek, u.PeekErr = s.Peek(&call, sc)
		if st, err := s.Quota(&call, sc); err == nil {
			u.Quota = &st
		}
		if s.Recorder != nil {
			u.Admitted, u.Refused, u.Counted = s.Recorder.Nodes.Get(now, p)
		}
		out = append(out, u)
	}
	next := ""
	if more && len(paths) > 0 {
		next = paths[len(paths)-1]
	}
	return out, next, nil
}

// inFlight counts the open reservations by the budget nodes they charged.
func (s *Service) inFlight() map[string]int {
	m := map[string]int{}
	if s.Holds == nil {
		return m
	}
	s.Holds.InFlightByLevel(func(name []byte) {
		if bytes.HasPrefix(name, []byte(quota.NamePrefix)) {
			return
		}
		if i := bytes.IndexByte(name, '#'); i >= 0 {
			name = name[:i]
		}
		m[string(name)]++
	})
	return m
}

// Top kinds.
const (
	TopRefused  = "denied"
	TopAdmitted = "admitted"
)

// TopSummary is this node's summary of the keys refused (TopRefused) or
// admitted most over the last minutes.
func (s *Service) TopSummary(kind string) usage.Summary {
	if s.Recorder == nil {
		return usage.Summary{}
	}
	t := s.Recorder.Refused
	if kind == TopAdmitted {
		t = s.Recorder.Admitted
	}
	return t.Summary(s.Clock())
}

// History returns this node's admitted and refused calls per usage.Step
// over the last usage.Steps steps, oldest first.
func (s *Service) History() (admitted, refused [usage.Steps]int64) {
	if s.Recorder == nil {
		return
	}
	now := s.Clock()
	return s.Recorder.Admitted.History(now), s.Recorder.Refused.History(now)
}

// QuotaCounter is one committed quota counter as RL.QUOTA LIST shows it.
type QuotaCounter struct {
	// Level names the counter: a budget level (path, or path#subject)
	// or an inline key.
	Level  string
	Inline bool
	quota.Item
}

// QuotaList returns at most n of the cluster's committed quota counters
// whose level starts with prefix and sorts after after, sorted by level,
// and the level to continue from ("" at the end).
func (s *Service) QuotaList(prefix, after string, n int) ([]QuotaCounter, string, error) {
	if !usageCount.In(int64(n)) {
		return nil, "", &fault.Error{Code: "ERR", Msg: usageCount.Msg("COUNT")}
	}
	lister, ok := s.Quotas.(interface {
		ScanQuotas(part int, fn func(it raftfsm.QuotaItem))
	})
	if !ok {
		return nil, "", nil
	}
	var all []QuotaCounter
	for part := 0; part < raftfsm.QuotaParts; part++ {
		lister.ScanQuotas(part, func(it raftfsm.QuotaItem) {
			c := QuotaCounter{Item: it}
			k := string(it.Key)
			switch {
			case strings.HasPrefix(k, quota.InlineKey):
				c.Level, c.Inline = k[len(quota.InlineKey):], true
			case strings.HasPrefix(k, quota.BudgetKey):
				c.Level = k[len(quota.BudgetKey):]
			default:
				return
			}
			if strings.HasPrefix(c.Level, prefix) && c.Level > after {
				all = append(all, c)
			}
		})
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].Level != all[j].Level {
			return all[i].Level < all[j].Level
		}
		return all[i].Start > all[j].Start
	})
	next := ""
	if len(all) > n {
		all = all[:n]
		next = all[n-1].Level
	}
	return all, next, nil
}

// QuotaSet sets, cluster-wide, the count of the current period of the
// quota counters c names (those RL.QUOTA RESET forgets) to used: one Raft
// entry, after which every node drops its pending count for them. It
// returns how many counters it set.
func (s *Service) QuotaSet(c *Call, used int64, sc *Scratch) (int, error) {
	q := *c
	var spec quota.Spec
	tree, err := s.quotaCall(&q, &spec)
	if err != nil {
		return 0, err
	}
	now := s.Clock()
	cs, err := tree.QuotaCounters(now, &q, &sc.b)
	if err != nil {
		return 0, err
	}
	e := raftfsm.Entry{Type: raftfsm.QuotaSet, Now: now}
	for _, k := range cs {
		// The period as the nodes' counts name it ("month UTC"): a
		// counter whose period text changed would start over.
		per, _ := k.Period.MarshalText()
		e.Quotas = append(e.Quotas, raftfsm.QuotaItem{Key: raftfsm.QuotaKey(k.Key), Start: k.Start, End: k.End,
			Used: used, Limit: k.Limit, Period: string(per)})
	}
	if len(e.Quotas) == 0 {
		return 0, fault.New("ERR", "no quota applies to '%s': the node has none", fault.Printable(c.Path))
	}
	r, err := s.write(&e)
	return r.N, err
}
