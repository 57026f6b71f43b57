package reserve

import (
	"strconv"
	"testing"
)

// Copies of other nodes' holds count as held where the key is decided; a
// member asking for the key's holds learns the own ones and the copies,
// and makes a decision chosen before it start again; ended and expired
// copies free their slots; copies are bounded like reservations.
func TestCopiesCountAsHeld(t *testing.T) {
	s := New("n1", 3, 0)
	if err := s.AddCopy("k", "00000000000000010000000000000000@n2", 100); err != nil {
		t.Fatal(err)
	}
	gen := s.Gen()
	h, _, _, err := s.OpenAt(0, 50, []byte("k"), 2, gen)
	if h == nil || err != nil {
		t.Fatalf("first slot: %v", err)
	}
	if h2, retry, _, err := s.OpenAt(0, 50, []byte("k"), 2, gen); h2 != nil || err != nil || retry != 50 {
		t.Fatalf("a third slot beside a copy: %v %d %v", h2, retry, err)
	}
	if got := s.Counted("k", 0); got != 2 {
		t.Fatalf("counted %d, want 2", got)
	}
	hs := s.Holds("k", 0)
	if len(hs) != 2 {
		t.Fatalf("holds %v, want its own and the copy", hs)
	}
	if _, _, _, err := s.OpenAt(0, 50, []byte("k"), 3, gen); err != ErrMoved {
		t.Fatalf("a decision chosen before a member asked: %v, want ErrMoved", err)
	}
	s.DropCopies([]string{"00000000000000010000000000000000@n2"})
	if got := s.Counted("k", 0); got != 1 {
		t.Fatalf("counted %d after the copy ended, want 1", got)
	}
	s.AddCopy("k", "00000000000000020000000000000000@n2", 10)
	if got := s.Counted("k", 10); got != 1 {
		t.Fatalf("counted %d once the copy expired, want 1", got)
	}
	// A copy of one of this node's own open holds is not counted twice.
	s.Commit(h)
	if err := s.AddCopy("k", hs[0].ID, 100); err != nil || s.Copies() != 0 {
		t.Fatalf("own hold as a copy: %v, %d copies", err, s.Copies())
	}
	for i, id := range []string{"a@n2", "b@n2", "c@n2"} {
		if err := s.AddCopy("x", id, 100); err != nil {
			t.Fatalf("copy %d: %v", i, err)
		}
	}
	if err := s.AddCopy("x", "d@n2", 100); err != ErrFull {
		t.Fatalf("a copy past the bound: %v, want ErrFull", err)
	}
}

// A copy that arrives after its hold's end (sent from an older list of
// holds, or answered by a member the end had not reached) is not kept,
// and an issuer does not take back a copy of its own ended hold; the ids
// remembered are bounded, the oldest forgotten first.
func TestACopyAfterItsEndIsNotKept(t *testing.T) {
	s := New("n1", 10, 0)
	s.DropCopies([]string{"late@n2"})
	if err := s.AddCopy("k", "late@n2", 100); err != nil || s.Copies() != 0 || s.Counted("k", 0) != 0 {
		t.Fatalf("a copy after its end: %v, %d copies, %d counted", err, s.Copies(), s.Counted("k", 0))
	}
	h, _, _, err := s.OpenAt(0, 50, []byte("k"), 1, s.Gen())
	if h == nil || err != nil {
		t.Fatalf("a slot: %v", err)
	}
	s.Commit(h)
	id := s.Format(h)
	if taken, err := s.Take(id); taken == nil || err != nil {
		t.Fatalf("take %s: %v", id, err)
	}
	s.DropCopies([]string{id}) // as the issuer does when a hold ends
	if err := s.AddCopy("k", id, 100); err != nil || s.Counted("k", 0) != 0 {
		t.Fatalf("the issuer took back a copy of its ended hold: %v, %d counted", err, s.Counted("k", 0))
	}
	for i := 0; i < endedKept; i++ {
		s.DropCopies([]string{"x" + strconv.Itoa(i) + "@n2"})
	}
	if len(s.ended.set) != endedKept {
		t.Fatalf("%d ended ids remembered, at most %d", len(s.ended.set), endedKept)
	}
	if err := s.AddCopy("k", "late@n2", 100); err != nil || s.Counted("k", 0) != 1 {
		t.Fatalf("once forgotten, a late copy counts until its TTL: %v, %d counted", err, s.Counted("k", 0))
	}
}
