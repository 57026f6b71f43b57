// Package raftfsm replicates sluice's configuration through Raft: the
// versioned encoding of log entries, the state machine that applies them —
// to the budget tree, the membership map (node id → RESP address) and the
// committed calendar quota counters (quota.go) — and remembers each node's
// recent write outcomes so that a retried write applies once (writes.go),
// and the node that opens, bootstraps, joins, applies with bounded waits
// and shuts down with a leadership transfer.
package raftfsm

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/sluice-rl/sluice/budget"
)

// An entry is one byte of format version, one byte of type, and a JSON
// payload. A replica that meets a version or type it does not know refuses
// the entry (every replica refuses it alike, so state stays identical).
const entryVersion = 1

// EntryType says what an entry does.
type EntryType uint8

// The entry types.
const (
	SetBudget EntryType = iota + 1
	DelBudget
	ImportBudgets
	AddMember
	RemoveMember
	// QuotaAdd commits quota consumption; QuotaReset forgets a counter.
	QuotaAdd
	QuotaReset
	// QuotaReserve grants a node quota units it may admit against (an
	// item's Used is the units wanted), or takes back units it releases
	// (Used negative).
	QuotaReserve
)

// Entry is a decoded log entry.
type Entry struct {
	Type EntryType `json:"-"`
	// SetBudget, DelBudget
	Path      string         `json:"path,omitempty"`
	Config    *budget.Config `json:"config,omitempty"`
	Recursive bool           `json:"recursive,omitempty"`
	// ImportBudgets
	Budgets map[string]budget.Config `json:"budgets,omitempty"`
	Replace bool                     `json:"replace,omitempty"`
	IfEmpty bool                     `json:"if_empty,omitempty"`
	// AddMember, RemoveMember. Auto marks a node's own request to join,
	// which is refused for a node an operator removed.
	Member *Member `json:"member,omitempty"`
	ID     string  `json:"id,omitempty"`
	Auto   bool    `json:"auto,omitempty"`
	// QuotaAdd, QuotaReset (Keys); Now is the proposer's clock, which the
	// state machine uses (never its own) to purge ended periods. Origin and
	// Seq number a node's batches of quota counts, so that a batch retried
	// after an uncertain outcome is counted once.
	Quotas []QuotaItem `json:"quotas,omitempty"`
	Keys   []QuotaKey  `json:"keys,omitempty"`
	Now    int64       `json:"now,omitempty"`
	Origin string      `json:"origin,omitempty"`
	Seq    uint64      `json:"seq,omitempty"`
	// Req names the write for retries (see ReqID); set by Node.Write.
	Req *ReqID `json:"req,omitempty"`
}

// Member is one node of the cluster as the replicated state knows it.
type Member struct {
	ID       string `json:"id"`
	RespAddr string `json:"resp_addr"`
	RaftAddr string `json:"raft_addr"`
}

// Encode returns the entry's log bytes.
func (e *Entry) Encode() []byte {
	b, err := json.Marshal(e)
	if err != nil {
		panic(fmt.Sprintf("raftfsm: encoding %d: %v", e.Type, err))
	}
	return append([]byte{entryVersion, byte(e.Type)}, b...)
}

// ErrBadEntry is returned for log bytes this version cannot decode.
var ErrBadEntry = errors.New("raftfsm: undecodable entry")

// Decode parses log bytes.
func Decode(b []byte) (*Entry, error) {
	if len(b) < 2 || b[0] != entryVersion || b[1] < byte(SetBudget) || b[1] > byte(QuotaReserve) {
		return nil, ErrBadEntry
	}
	e := &Entry{Type: EntryType(b[1])}
	if err := json.Unmarshal(b[2:], e); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadEntry, err)
	}
	switch e.Type {
	case SetBudget:
		if e.Config == nil || e.Path == "" {
			return nil, fmt.Errorf("%w: set without path or config", ErrBadEntry)
		}
	case DelBudget:
		if e.Path == "" {
			return nil, fmt.Errorf("%w: delete without path", ErrBadEntry)
		}
	case AddMember:
		if e.Member == nil || e.Member.ID == "" {
			return nil, fmt.Errorf("%w: member without id", ErrBadEntry)
		}
	case RemoveMember:
		if e.ID == "" {
			return nil, fmt.Errorf("%w: remove without id", ErrBadEntry)
		}
	case QuotaAdd:
		for _, q := range e.Quotas {
			if q.Key == "" || q.End <= q.Start || q.Used > maxQuotaUsed || q.Used < -maxQuotaUsed {
				return nil, fmt.Errorf("%w: malformed quota item", ErrBadEntry)
			}
		}
	case QuotaReserve:
		if e.Origin == "" || len(e.Quotas) == 0 {
			return nil, fmt.Errorf("%w: reservation without origin or items", ErrBadEntry)
		}
		for _, q := range e.Quotas {
			if q.Key == "" || q.End <= q.Start || q.Limit <= 0 || q.Used == 0 || q.Used > maxQuotaUsed || q.Used < -maxQuotaUsed {
				return nil, fmt.Errorf("%w: malformed quota reservation", ErrBadEntry)
			}
		}
	case QuotaReset:
		if len(e.Keys) == 0 {
			return nil, fmt.Errorf("%w: quota reset without keys", ErrBadEntry)
		}
	}
	return e, nil
}
