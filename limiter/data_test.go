package limiter_test

import (
	"fmt"
	"testing"

	"github.com/sluice-rl/sluice/keyspace"
	"github.com/sluice-rl/sluice/limiter"
)

// relaysHere stands for the peer room: DropMovedKeys only asks whether
// there is one.
type relaysHere struct{ limiter.Relays }

// After a change of the members the keys this node no longer owns are
// dropped at the first pass that sees the new list and again at the next
// — a command decided by the former list an instant before the first pass
// (its keys locked only after it) may write its key in between — and not
// after that until the list changes again.
func TestMovedKeysAreDroppedTwiceAfterAChange(t *testing.T) {
	s, _ := service(t, `{"budgets":{}}`)
	s.Keys = keyspace.New(keyspace.Options{})
	s.Relays = relaysHere{}
	s.Store.SetOwners("a", []string{"a", "b"})
	var theirs string
	for i := 0; theirs == ""; i++ {
		if _, self := s.DataOwner([]byte(fmt.Sprint("k", i))); !self {
			theirs = fmt.Sprint("k", i)
		}
	}
	set := func() {
		s.Keys.Exec(t0, keyspace.Lookup([]byte("SET")), [][]byte{[]byte("SET"), []byte(theirs), []byte("1")})
	}
	set()
	if n := s.DropMovedKeys(); n != 1 {
		t.Fatalf("first pass after the change dropped %d keys, want 1", n)
	}
	set() // a write decided by the former list, landing after the first pass
	if n := s.DropMovedKeys(); n != 1 {
		t.Fatalf("second pass dropped %d keys, want 1", n)
	}
	set()
	if n := s.DropMovedKeys(); n != 0 {
		t.Fatalf("a pass without a change dropped %d keys, want 0", n)
	}
	s.Store.SetOwners("a", []string{"a", "b", "c"})
	want := 1
	if _, self := s.DataOwner([]byte(theirs)); self {
		want = 0
	}
	if n := s.DropMovedKeys(); n != want {
		t.Fatalf("the next change's first pass dropped %d keys, want %d", n, want)
	}
}
