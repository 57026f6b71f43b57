// Package quota owns sluice's calendar quotas: their periods (a calendar
// hour, day, week, month or year in an IANA time zone), the keys and names
// of their counters, and the status a counter reports.
//
// A quota's count lives in two places: the engine's counter on the node
// that admitted the calls (pending, not yet committed) and the cluster's
// committed table (raftfsm), to which each node commits its pending counts
// in numbered batches (Batch) and, once its own replica has applied a
// batch, settles them off its pending count. See DESIGN.md.
package quota

import "github.com/sluice-rl/sluice/engine"

// Counter keys and names. A budget level's counter is BudgetKey and the
// level's bucket key; an inline quota's is InlineKey and the call's key.
// limited_by names a quota NamePrefix and its level.
const (
	BudgetKey  = "b|"
	InlineKey  = "i|"
	NamePrefix = "quota:"
)

// AppendKey appends the counter key of an inline quota on key to b.
func AppendKey(b []byte, prefix string, key []byte) []byte {
	return append(append(b, prefix...), key...)
}

// AppendName appends limited_by of a quota on level to b.
func AppendName(b, level []byte) []byte {
	return append(append(b, NamePrefix...), level...)
}

// Spec is a quota: N tokens a Period.
type Spec struct {
	N      int64
	Period Period
}

// Limit returns the engine limit of the spec's counters.
func (s Spec) Limit() (engine.Limit, error) { return engine.NewQuotaLimit(s.N, s.Period.Code()) }

// Request returns the engine request that charges cost to the counter key
// in the period holding now.
func (s *Spec) Request(lim *engine.Limit, key []byte, now, cost int64) engine.Request {
	start, end := s.Period.Bounds(now)
	return engine.Request{Space: engine.SpaceQuota, Key: key, Limit: lim, Cost: cost, PeriodStart: start, PeriodEnd: end}
}

// Status describes one quota counter (RL.QUOTA).
type Status struct {
	Level      []byte // the level as limited_by names it, without NamePrefix
	Limit      int64
	Used       int64
	Period     Period
	Start, End int64 // the current period, Unix ns
}

// Remaining returns the tokens left in the period.
func (s *Status) Remaining() int64 { return max(s.Limit-s.Used, 0) }
