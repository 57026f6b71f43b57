package raftfsm

import (
	"fmt"

	"github.com/sluice-rl/sluice/budget"
)

// The apply table has one row per entry type, registered by the file of
// its concern (apply_budgets.go, apply_members.go, apply_quotas.go) the
// way Consul's FSM registers its commands. A row pairs a payload view,
// which reads the type's fields out of the union Entry into a struct of
// its own and checks them, with the FSM method that applies that payload.
// The log keeps encoding the union (entry.go), so existing logs and
// snapshots read as before; only the apply side is typed.
//
// A type with no row is refused (ErrBadEntry) alike on every replica, as
// are payloads their view rejects: nothing changes, and every replica
// answers the same refusal.

// command is one row of the apply table.
type command struct {
	// check reports whether an entry's payload is well formed (Decode).
	check func(e *Entry) error
	// apply applies a decoded entry at index, once per write id.
	apply func(f *FSM, e *Entry, index uint64) Response
}

var commands [entryTypeEnd]command

// registered reports whether the apply table has a row for t.
func registered(t EntryType) bool { return t < entryTypeEnd && commands[t].apply != nil }

// registerCommand adds the row of entry type t: view reads and checks its
// payload P; apply applies P. It panics for a type registered twice.
func registerCommand[P any](t EntryType, view func(*Entry) (P, error), apply func(*FSM, P, uint64) Response) {
	if t == 0 || t >= entryTypeEnd || commands[t].apply != nil {
		panic(fmt.Sprintf("raftfsm: entry type %d registered twice or out of range", t))
	}
	commands[t] = command{
		check: func(e *Entry) error {
			_, err := view(e)
			return err
		},
		apply: func(f *FSM, e *Entry, index uint64) Response {
			p, err := view(e)
			if err != nil {
				return Response{Err: refusal(err), Index: index}
			}
			if r, ok := f.writes.repeat(e.Req); ok {
				return r // a retry: answered as the first time
			}
			r := apply(f, p, index)
			r.Index = index
			f.writes.remember(e.Req, r)
			return r
		},
	}
}

// refusal is an undecodable entry's answer.
func refusal(err error) error { return &budget.Error{Code: "ERR", Msg: err.Error()} }

// badPayload is a payload view's refusal.
func badPayload(what string) error { return fmt.Errorf("%w: %s", ErrBadEntry, what) }
