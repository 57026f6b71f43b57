package keyspace

import (
	"fmt"
	"strings"
	"sync"
	"testing"
)

const sec = int64(1e9)

func run(s *Store, now int64, args ...string) Reply {
	a := make([][]byte, len(args))
	for i, x := range args {
		a[i] = []byte(x)
	}
	sp := Lookup(a[0])
	if sp == nil {
		return Errf("unknown " + args[0])
	}
	return s.Exec(now, sp, a)
}

func show(r Reply) string {
	switch r.Kind {
	case Nil:
		return "nil"
	case Status:
		return "+" + r.Str
	case Error:
		return "-" + r.Str
	case Int:
		return fmt.Sprint(r.Int)
	case Bulk:
		return fmt.Sprintf("%q", r.Str)
	}
	var b []string
	for _, e := range r.Elems {
		b = append(b, show(e))
	}
	return "[" + strings.Join(b, " ") + "]"
}

// Expiry is decided at the instant each command gives: a key is gone at
// its expiry, lazily when touched and actively by Sweep.
func TestExpiryFollowsTheGivenClock(t *testing.T) {
	s := New(Options{})
	t0 := int64(1_700_000_000) * sec
	run(s, t0, "SET", "k", "v", "PX", "1500")
	if got := show(run(s, t0+1499e6, "GET", "k")); got != `"v"` {
		t.Fatalf("before expiry: %s", got)
	}
	if got := show(run(s, t0+1500e6, "GET", "k")); got != "nil" {
		t.Fatalf("at expiry: %s", got)
	}
	if s.Len() != 0 || s.Bytes() != 0 {
		t.Fatalf("lazily expired key still counted: %d keys, %d bytes", s.Len(), s.Bytes())
	}
	for i := range 1000 {
		run(s, t0, "SET", fmt.Sprint("a", i), "v", "EX", "10")
		run(s, t0, "SET", fmt.Sprint("b", i), "v")
	}
	if n := s.Sweep(t0+9*sec, 1<<20); n != 0 {
		t.Fatalf("swept %d keys before their expiry", n)
	}
	if n := s.Sweep(t0+10*sec, 1<<20); n != 1000 || s.Len() != 1000 {
		t.Fatalf("swept %d, %d keys left", n, s.Len())
	}
}

// Past its bounds the store refuses writes with Redis's OOM error and
// changes nothing; reads, deletes and smaller writes go on.
func TestBoundsRefuseWithOOM(t *testing.T) {
	s := New(Options{MaxKeys: 3, MaxBytes: 1 << 10})
	for i := range 3 {
		if r := run(s, 0, "SET", fmt.Sprint("k", i), "v"); r.Kind != Status {
			t.Fatalf("SET %d: %s", i, show(r))
		}
	}
	if r := run(s, 0, "SET", "k3", "v"); r.Str != ErrOOM.Str {
		t.Fatalf("a fourth key: %s", show(r))
	}
	if r := run(s, 0, "INCR", "k9"); r.Str != ErrOOM.Str || s.Len() != 3 {
		t.Fatalf("INCR of a fourth key: %s (%d keys)", show(r), s.Len())
	}
	if r := run(s, 0, "SET", "k0", strings.Repeat("x", 2000)); r.Str != ErrOOM.Str || show(run(s, 0, "GET", "k0")) != `"v"` {
		t.Fatalf("a value past the bytes: %s", show(r))
	}
	before := s.Bytes()
	if r := run(s, 0, "HSET", "k1", "f", "v"); r.Str != ErrWrongType.Str || s.Bytes() != before {
		t.Fatalf("HSET of a string: %s", show(r))
	}
	run(s, 0, "DEL", "k1")
	after := s.Bytes()
	big := strings.Repeat("y", 300)
	if r := run(s, 0, "HSET", "h", "a", big, "b", big, "c", big, "d", big); r.Str != ErrOOM.Str {
		t.Fatalf("a hash past the bytes: %s", show(r))
	}
	if s.Len() != 2 || s.Bytes() != after {
		t.Fatalf("a refused hash left %d keys, %d bytes (%d before)", s.Len(), s.Bytes(), after)
	}
	run(s, 0, "HSET", "h", "a", "1")
	if r := run(s, 0, "HSET", "h", "a", "2", "b", big, "c", big, "d", big); r.Str != ErrOOM.Str || show(run(s, 0, "HGETALL", "h")) != `["a" "1"]` {
		t.Fatalf("a refused HSET changed the hash: %s, now %s", show(r), show(run(s, 0, "HGETALL", "h")))
	}
}

// Commands on one key from many goroutines are atomic: INCR counts every
// call, and a script-like transaction over two keys sees them together.
func TestCommandsAreAtomicPerKey(t *testing.T) {
	s := New(Options{})
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 1000 {
				run(s, 0, "INCR", "n")
				tx := s.Lock(0, false, []byte("x"), []byte("y"))
				tx.Exec(Lookup([]byte("INCR")), [][]byte{[]byte("INCR"), []byte("x")})
				tx.Exec(Lookup([]byte("INCR")), [][]byte{[]byte("INCR"), []byte("y")})
				tx.Unlock()
			}
		}()
	}
	wg.Wait()
	if got := show(run(s, 0, "GET", "n")); got != `"8000"` {
		t.Fatalf("INCR from 8 goroutines: %s", got)
	}
	other := "y"
	for i := 0; s.shardOf([]byte(other)) == s.shardOf([]byte("x")); i++ {
		other = fmt.Sprint("y", i)
	}
	tx := s.Lock(0, false, []byte("x"))
	if r := tx.Exec(Lookup([]byte("GET")), [][]byte{[]byte("GET"), []byte(other)}); r.Kind != Error || !strings.Contains(r.Str, "did not declare") {
		t.Fatalf("a key outside the transaction: %s", show(r))
	}
	tx.Unlock()
}

func TestParseInt(t *testing.T) {
	for in, want := range map[string]bool{"0": true, "-1": true, "9223372036854775807": true, "-9223372036854775808": true,
		"9223372036854775808": false, "01": false, "-0": false, "+1": false, " 1": false, "": false, "1.0": false, "-": false} {
		if _, ok := ParseInt([]byte(in)); ok != want {
			t.Errorf("ParseInt(%q): %v", in, ok)
		}
	}
}

// A RENAME the bounds refuse leaves both keys as they were.
func TestRefusedRenameKeepsTheKey(t *testing.T) {
	s := New(Options{MaxBytes: 1000})
	run(s, 0, "SET", "a", strings.Repeat("v", 800))
	long := strings.Repeat("k", 300)
	if r := run(s, 0, "RENAME", "a", long); r.Str != ErrOOM.Str {
		t.Fatalf("RENAME past the bytes: %s", show(r))
	}
	if r := run(s, 0, "GET", "a"); r.Kind != Bulk || len(r.Str) != 800 || s.Len() != 1 {
		t.Fatalf("after a refused RENAME: %s, %d keys", show(r), s.Len())
	}
	before := s.Bytes()
	if r := run(s, 0, "RENAME", "a", "b"); r.Kind != Status || s.Bytes() != before || s.Len() != 1 {
		t.Fatalf("RENAME to a key as long: %s, %d bytes (was %d)", show(r), s.Bytes(), before)
	}
}

// A counter INCR keeps as an integer is charged what the same string SET
// is, at every length and sign, and reads back as that string.
func TestCountersChargeTheirDigits(t *testing.T) {
	a, b := New(Options{}), New(Options{})
	for _, n := range []string{"0", "7", "-7", "9", "-10", "99", "100", "123456789", "-9223372036854775807", "9223372036854775806"} {
		run(a, 0, "SET", "c", n)
		run(a, 0, "INCR", "c") // now an integer
		run(a, 0, "DECR", "c") // back to n
		run(b, 0, "SET", "c", n)
		if got := show(run(a, 0, "GET", "c")); got != `"`+n+`"` && got != n {
			t.Fatalf("GET after INCR, DECR of %s: %s", n, got)
		}
		if a.Bytes() != b.Bytes() {
			t.Fatalf("%s kept as an integer is charged %d bytes, as a string %d", n, a.Bytes(), b.Bytes())
		}
	}
	run(a, 0, "SET", "m", "-9223372036854775807")
	run(a, 0, "DECR", "m")
	run(b, 0, "SET", "m", "-9223372036854775808")
	if a.Bytes() != b.Bytes() {
		t.Fatalf("the least int64 kept as an integer is charged %d bytes, as a string %d", a.Bytes(), b.Bytes())
	}
}
