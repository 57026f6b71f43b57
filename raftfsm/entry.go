// Package raftfsm replicates sluice's configuration through Raft: the
// versioned encoding of log entries, the state machine that applies them
// through a table of entry types (apply.go) — to the budget tree, the
// membership map (node id → RESP address) and the committed calendar quota
// counters (quota.go) — and remembers each node's recent write outcomes so
// that a retried write applies once (dedup.go); and the node that opens,
// bootstraps, joins, forwards writes to the leader, applies with bounded
// waits and shuts down with a leadership transfer. DESIGN.md says how.
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
	// QuotaSet sets counters' counts in their current period (RL.QUOTA
	// SET): each item's Used is the new count.
	QuotaSet
	// QuotaReturn gives back to the pool the units a node's previous life
	// (Origin) held and did not spend, by the spend marks it wrote to
	// disk (an item's Used); Replace: every other grant of that life too.
	QuotaReturn

	// entryTypeEnd is one past the last type: the size of the apply table.
	entryTypeEnd
)

// Entry is a decoded log entry: the union of every type's fields, as the
// log encodes it (JSON, fields named as below). Proposers fill the fields
// of their type; the state machine reads them through the type's payload
// view (apply.go), which checks them.
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
	// QuotaAdd, QuotaSet, QuotaReset (Keys); Now is the proposer's clock, which the
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

// Decode parses log bytes and checks the payload of the entry's type.
func Decode(b []byte) (*Entry, error) {
	e, err := decodeEntry(b)
	if err != nil {
		return nil, err
	}
	if err := commands[e.Type].check(e); err != nil {
		return nil, err
	}
	return e, nil
}

// decodeEntry parses log bytes of a type the apply table has, without
// checking the payload.
func decodeEntry(b []byte) (*Entry, error) {
	if len(b) < 2 || b[0] != entryVersion || !registered(EntryType(b[1])) {
		return nil, ErrBadEntry
	}
	e := &Entry{Type: EntryType(b[1])}
	if err := json.Unmarshal(b[2:], e); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadEntry, err)
	}
	return e, nil
}
