package raftfsm

import (
	"errors"
	"testing"
)

// TestApplyTableIsComplete: every entry type has a row, and a type past
// the last one is refused, by Decode and by Apply alike.
func TestApplyTableIsComplete(t *testing.T) {
	for ty := SetBudget; ty < entryTypeEnd; ty++ {
		if !registered(ty) || commands[ty].check == nil {
			t.Errorf("entry type %d has no row in the apply table", ty)
		}
	}
	for _, ty := range []EntryType{0, entryTypeEnd, 255} {
		if registered(ty) {
			t.Errorf("entry type %d registered", ty)
		}
		b := []byte{entryVersion, byte(ty), '{', '}'}
		if _, err := Decode(b); !errors.Is(err, ErrBadEntry) {
			t.Errorf("type %d decoded: %v", ty, err)
		}
		if r := apply(NewFSM(), 1, b); r.Err == nil || r.Index != 1 {
			t.Errorf("type %d applied: %+v", ty, r)
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("a type registered twice did not panic")
		}
	}()
	registerCommand(SetBudget, (*Entry).asBudgetSet, (*FSM).applyBudgetSet)
}
