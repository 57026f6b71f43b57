package keyspace

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// check verifies the skip list's structure: every level in order, each
// span the number of members it passes over, back links, the tail, and
// the map agreeing with the list.
func (z *zset) check(t *testing.T) {
	t.Helper()
	var order []*znode
	for x := z.head.lv[0].next; x != nil; x = x.lv[0].next {
		order = append(order, x)
	}
	if len(order) != z.n || len(z.scores) != z.n {
		t.Fatalf("%d nodes, n %d, %d in the map", len(order), z.n, len(z.scores))
	}
	rank := map[*znode]int{z.head: 0}
	var bytes int64
	for i, x := range order {
		rank[x] = i + 1
		if i > 0 && !before(order[i-1].score, order[i-1].member, x.score, x.member) {
			t.Fatalf("out of order at %d: %v %q then %v %q", i, order[i-1].score, order[i-1].member, x.score, x.member)
		}
		if want := (*znode)(nil); i > 0 {
			want = order[i-1]
			if x.back != want {
				t.Fatalf("back link of %q", x.member)
			}
		} else if x.back != nil {
			t.Fatalf("the first member has a back link")
		}
		if s, ok := z.scores[x.member]; !ok || s != x.score {
			t.Fatalf("map says %v, %v for %q (%v)", s, ok, x.member, x.score)
		}
		bytes += memberSize(x.member)
	}
	if z.n > 0 && z.tail != order[len(order)-1] || z.n == 0 && z.tail != nil {
		t.Fatal("tail")
	}
	if bytes != z.bytes {
		t.Fatalf("bytes %d, members cost %d", z.bytes, bytes)
	}
	for lv := range z.level {
		for x := z.head; x.lv[lv].next != nil; x = x.lv[lv].next {
			if got, want := x.lv[lv].span, rank[x.lv[lv].next]-rank[x]; got != want {
				t.Fatalf("level %d: span from rank %d is %d, want %d", lv, rank[x], got, want)
			}
		}
	}
}

func zsetAt(s *Store, key string) *zset {
	tx := s.Lock(0, false, []byte(key))
	defer tx.Unlock()
	if v := tx.get([]byte(key)); v != nil {
		return v.zs
	}
	return nil
}

// Members are ordered by score, then by their bytes, whatever order they
// come in; every range command agrees with a sorted slice, through
// thousands of random adds, rescores and removals.
func TestZSetOrderMatchesAModel(t *testing.T) {
	s := New(Options{})
	model := map[string]float64{}
	rng := rand.New(rand.NewPCG(1, 2))
	sorted := func() []string {
		ms := make([]string, 0, len(model))
		for m := range model {
			ms = append(ms, m)
		}
		sort.Slice(ms, func(i, j int) bool { return before(model[ms[i]], ms[i], model[ms[j]], ms[j]) })
		return ms
	}
	for step := range 6000 {
		m := fmt.Sprint("m", rng.IntN(500))
		switch rng.IntN(4) {
		case 0, 1:
			sc := float64(rng.IntN(50)) // many ties: ordered by member
			run(s, 0, "ZADD", "z", strconv.FormatFloat(sc, 'f', -1, 64), m)
			model[m] = sc
		case 2:
			run(s, 0, "ZREM", "z", m)
			delete(model, m)
		case 3:
			run(s, 0, "ZINCRBY", "z", "1.5", m)
			model[m] += 1.5
		}
		if step%500 != 0 {
			continue
		}
		z := zsetAt(s, "z")
		if z == nil {
			if len(model) != 0 {
				t.Fatal("the set is gone")
			}
			continue
		}
		z.check(t)
		want := sorted()
		if got := run(s, 0, "ZRANGE", "z", "0", "-1"); len(got.Elems) != len(want) {
			t.Fatalf("ZRANGE: %d members, want %d", len(got.Elems), len(want))
		} else {
			for i, e := range got.Elems {
				if e.Str != want[i] {
					t.Fatalf("ZRANGE %d: %q, want %q", i, e.Str, want[i])
				}
			}
		}
		for _, m := range want[:min(len(want), 20)] {
			i := slices.Index(want, m)
			if r := run(s, 0, "ZRANK", "z", m); r.Int != int64(i) {
				t.Fatalf("ZRANK %s: %s, want %d", m, show(r), i)
			}
			if r := run(s, 0, "ZREVRANK", "z", m); r.Int != int64(len(want)-1-i) {
				t.Fatalf("ZREVRANK %s: %s", m, show(r))
			}
		}
		lo, hi := float64(rng.IntN(40)), float64(rng.IntN(40)+10)
		var in []string
		for _, m := range want {
			if model[m] > lo && model[m] <= hi {
				in = append(in, m)
			}
		}
		from, to := "("+strconv.FormatFloat(lo, 'f', -1, 64), strconv.FormatFloat(hi, 'f', -1, 64)
		if r := run(s, 0, "ZCOUNT", "z", from, to); r.Int != int64(len(in)) {
			t.Fatalf("ZCOUNT %s %s: %s, want %d", from, to, show(r), len(in))
		}
		got := run(s, 0, "ZRANGEBYSCORE", "z", from, to, "LIMIT", "2", "5")
		wantPage := in[min(2, len(in)):min(7, len(in))]
		if len(got.Elems) != len(wantPage) {
			t.Fatalf("ZRANGEBYSCORE %s %s LIMIT 2 5: %s, want %v", from, to, show(got), wantPage)
		}
		for i, e := range got.Elems {
			if e.Str != wantPage[i] {
				t.Fatalf("ZRANGEBYSCORE page %d: %q, want %q", i, e.Str, wantPage[i])
			}
		}
		rev := run(s, 0, "ZREVRANGEBYSCORE", "z", to, from)
		for i, e := range rev.Elems {
			if e.Str != in[len(in)-1-i] {
				t.Fatalf("ZREVRANGEBYSCORE %d: %q", i, e.Str)
			}
		}
	}
}

// A sliding log of 100,000 entries — ZADD at the newest end, ZREMRANGEBYSCORE
// at the oldest, ZCARD — keeps its structure and its bytes; each step
// is O(log n), so the test takes a fraction of a second where a copy of
// the set per ZADD would take minutes.
func TestSlidingLogOfManyMembers(t *testing.T) {
	s := New(Options{})
	const n, window = 100_000, 10_000
	for i := range n {
		ts := strconv.Itoa(i)
		run(s, 0, "ZADD", "log", ts, "req-"+ts)
		if i >= window {
			if r := run(s, 0, "ZREMRANGEBYSCORE", "log", "-inf", "("+strconv.Itoa(i-window+1)); r.Int != 1 {
				t.Fatalf("step %d: ZREMRANGEBYSCORE removed %s", i, show(r))
			}
		}
	}
	if r := run(s, 0, "ZCARD", "log"); r.Int != window {
		t.Fatalf("ZCARD %s", show(r))
	}
	if r := run(s, 0, "ZRANGE", "log", "0", "0", "WITHSCORES"); show(r) != fmt.Sprintf(`["req-%d" "%d"]`, n-window, n-window) {
		t.Fatalf("the oldest: %s", show(r))
	}
	zsetAt(s, "log").check(t)
	if r := run(s, 0, "ZREMRANGEBYRANK", "log", "0", "-1"); r.Int != window || s.Len() != 0 || s.Bytes() != 0 {
		t.Fatalf("ZREMRANGEBYRANK 0 -1: %s, %d keys, %d bytes", show(r), s.Len(), s.Bytes())
	}
}

// Sorted sets count against the bounds: a ZADD past the bytes is refused
// with OOM and changes nothing, a new set past the keys too; removing
// members gives their bytes back, and the last one the key.
func TestZSetBounds(t *testing.T) {
	s := New(Options{MaxKeys: 2, MaxBytes: 4 << 10})
	run(s, 0, "ZADD", "z", "1", "a")
	run(s, 0, "SET", "s", "v")
	if r := run(s, 0, "ZADD", "z2", "1", "a"); r.Str != ErrOOM.Str || s.Len() != 2 {
		t.Fatalf("a third key: %s, %d keys", show(r), s.Len())
	}
	before := s.Bytes()
	big := strings.Repeat("m", 1000)
	args := []string{"ZADD", "z", "5", "a"}
	for i := range 5 {
		args = append(args, "1", fmt.Sprint(big, i))
	}
	if r := run(s, 0, args...); r.Str != ErrOOM.Str {
		t.Fatalf("a ZADD past the bytes: %s", show(r))
	}
	if s.Bytes() != before || show(run(s, 0, "ZRANGE", "z", "0", "-1", "WITHSCORES")) != `["a" "1"]` {
		t.Fatalf("a refused ZADD changed the set: %s, %d bytes (was %d)", show(run(s, 0, "ZRANGE", "z", "0", "-1", "WITHSCORES")), s.Bytes(), before)
	}
	if r := run(s, 0, "ZADD", "z", "INCR", "1", big+big+big+big+big); r.Str != ErrOOM.Str {
		t.Fatalf("ZADD INCR of a member past the bytes: %s", show(r))
	}
	// Rescoring needs no room, and the same member twice is charged once.
	if r := run(s, 0, "ZADD", "z", "7", "a", "1", big, "2", big); r.Int != 1 {
		t.Fatalf("ZADD: %s", show(r))
	}
	if got := s.Bytes() - before; got != memberSize(big) {
		t.Fatalf("a member of %d bytes charged %d", len(big), got)
	}
	run(s, 0, "ZREM", "z", big)
	if s.Bytes() != before {
		t.Fatalf("ZREM left %d bytes, %d before", s.Bytes(), before)
	}
	run(s, 0, "ZREM", "z", "a")
	if s.Len() != 1 || run(s, 0, "EXISTS", "z").Int != 0 {
		t.Fatalf("an emptied set is still a key: %d keys", s.Len())
	}
	if r := run(s, 0, "ZADD", "z2", "1", "a"); r.Int != 1 {
		t.Fatalf("a new set once there is room: %s", show(r))
	}
}

// A sorted set expires as any key: gone when touched past its expiry, and
// removed by Sweep with its bytes.
func TestZSetExpiry(t *testing.T) {
	s := New(Options{})
	t0 := int64(1_700_000_000) * sec
	run(s, t0, "ZADD", "z", "1", "a", "2", "b")
	run(s, t0, "PEXPIRE", "z", "1500")
	if r := run(s, t0+1499e6, "ZCARD", "z"); r.Int != 2 {
		t.Fatalf("before expiry: %s", show(r))
	}
	if r := run(s, t0+1500e6, "ZRANGE", "z", "0", "-1"); len(r.Elems) != 0 || s.Len() != 0 || s.Bytes() != 0 {
		t.Fatalf("at expiry: %s, %d keys, %d bytes", show(r), s.Len(), s.Bytes())
	}
	// ZADD to an expired set starts a new one, without the expiry.
	run(s, t0, "ZADD", "y", "1", "a")
	run(s, t0, "EXPIRE", "y", "1")
	if r := run(s, t0+2*sec, "ZADD", "y", "5", "b"); r.Int != 1 || show(run(s, t0+2*sec, "ZRANGE", "y", "0", "-1")) != `["b"]` ||
		run(s, t0+2*sec, "TTL", "y").Int != -1 {
		t.Fatalf("ZADD past the expiry: %s", show(r))
	}
	for i := range 100 {
		run(s, t0, "ZADD", fmt.Sprint("e", i), "1", "a")
		run(s, t0, "EXPIRE", fmt.Sprint("e", i), "10")
	}
	if n := s.Sweep(t0+10*sec, 1<<20); n != 100 || s.Len() != 1 {
		t.Fatalf("swept %d, %d keys left", n, s.Len())
	}
}

// Scores read and write as Redis 7.0 reads and writes doubles.
func TestScoresAsRedisWritesThem(t *testing.T) {
	for in, want := range map[string]string{
		"1": "1", "1.5": "1.5", "0.1": "0.10000000000000001", "-0": "0", "1e15": "1000000000000000", "1e17": "1e+17",
		"123456789012345678": "1.2345678901234568e+17", "1.5e-7": "1.4999999999999999e-07", "0.0001": "0.0001",
		"inf": "inf", "-Infinity": "-inf", "+inf": "inf", "0x10": "16", "0x1p3": "8", "0x.8": "0.5", "5.": "5", ".5": "0.5", "+5": "5",
		"1e300": "1.0000000000000001e+300", "-1e-320": "-9.9998886718268301e-321", "3.0000000000000004": "3.0000000000000004",
	} {
		f, ok := parseScore([]byte(in))
		if !ok {
			t.Errorf("parseScore(%q) refused", in)
			continue
		}
		if got := formatScore(f); got != want {
			t.Errorf("%s: %s, want %s", in, got, want)
		}
	}
	for _, in := range []string{"", " 1", "1 ", "nan", "-nan", "1e400", "1e-400", "1e", "1_0", "0x", "x", "1.2.3", "infx", "(1", "1\x00"} {
		if f, ok := parseScore([]byte(in)); ok {
			t.Errorf("parseScore(%q) = %v", in, f)
		}
	}
	// A range's ends read as strtod: spaces before, a NUL ends it, past the
	// range is inf, empty is 0.
	for in, want := range map[string]float64{"": 0, "(": 0, " 1": 1, "(\t2": 2, "1e400": math.Inf(1), "3\x00x": 3, "1e-400": 0} {
		if f, _, ok := parseEnd([]byte(in)); !ok || f != want {
			t.Errorf("parseEnd(%q) = %v, %v", in, f, ok)
		}
	}
	for _, in := range []string{" ", "1 ", "nan", "(nan", "x", "((1"} {
		if _, _, ok := parseEnd([]byte(in)); ok {
			t.Errorf("parseEnd(%q) accepted", in)
		}
	}
}

// A RESP3 client gets scores as doubles and a range WITHSCORES as pairs;
// other replies are as in RESP2.
func TestZSetRESP3(t *testing.T) {
	s := New(Options{})
	run(s, 0, "ZADD", "z", "1", "a", "2.5", "b")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"ZSCORE", "z", "b"}, "double 2.5"},
		{[]string{"ZSCORE", "z", "nosuch"}, "nil"},
		{[]string{"ZADD", "z", "INCR", "1", "a"}, "double 2"},
		{[]string{"ZADD", "z", "1", "c"}, "1"},
		{[]string{"ZINCRBY", "z", "1", "c"}, "double 2"},
		{[]string{"ZRANGE", "z", "0", "0", "WITHSCORES"}, `[["a" double 2]]`},
		{[]string{"ZRANGEBYSCORE", "z", "-inf", "inf", "LIMIT", "0", "1", "withscores"}, `[["a" double 2]]`},
		{[]string{"ZRANGE", "z", "0", "0"}, `["a"]`},
	} {
		a := make([][]byte, len(tc.args))
		for i, x := range tc.args {
			a[i] = []byte(x)
		}
		sp := Lookup(a[0])
		if got := show3(sp.RESP3(a, s.Exec(0, sp, a))); got != tc.want {
			t.Errorf("%v: %s, want %s", tc.args, got, tc.want)
		}
	}
}

func show3(r Reply) string {
	switch r.Kind {
	case Double:
		return "double " + r.Str
	case Array:
		var b []string
		for _, e := range r.Elems {
			b = append(b, show3(e))
		}
		return "[" + strings.Join(b, " ") + "]"
	}
	return show(r)
}

// A script's KEYS holds every shard from then on: it lists this node's
// keys, and the script may read and delete keys it did not declare (as
// Python limits' reset does), not write them; after other commands, KEYS
// is refused rather than risk waiting on a shard forever.
func TestScriptKeysHoldsTheKeyspace(t *testing.T) {
	s := New(Options{})
	for _, k := range []string{"lim:a", "lim:b", "lim:c", "other"} {
		run(s, 0, "SET", k, "1")
	}
	exec := func(tx *Tx, args ...string) Reply {
		a := make([][]byte, len(args))
		for i, x := range args {
			a[i] = []byte(x)
		}
		return tx.Exec(Lookup(a[0]), a)
	}
	tx := s.Lock(0, false, []byte("lim:*"))
	tx.Only([][]byte{[]byte("lim:*")})
	if r := exec(tx, "DEL", "lim:a"); !strings.Contains(r.Str, "did not declare") {
		t.Fatalf("DEL of an undeclared key before KEYS: %s", show(r))
	}
	tx.Unlock()

	tx = s.Lock(0, false, []byte("lim:*"))
	tx.Only([][]byte{[]byte("lim:*")})
	keys := exec(tx, "KEYS", "lim:*")
	if tx.locked != ^uint64(0) || len(keys.Elems) != 3 {
		t.Fatalf("KEYS: %s, shards %x", show(keys), tx.locked)
	}
	if r := exec(tx, "GET", "other"); r.Str != "1" {
		t.Fatalf("GET after KEYS: %s", show(r))
	}
	if r := exec(tx, "SET", "other", "2"); !strings.Contains(r.Str, "did not declare") {
		t.Fatalf("SET of an undeclared key after KEYS: %s", show(r))
	}
	del := []string{"DEL"}
	for _, e := range keys.Elems {
		del = append(del, e.Str)
	}
	if r := exec(tx, del...); r.Int != 3 {
		t.Fatalf("DEL of what KEYS found: %s", show(r))
	}
	if r := exec(tx, "KEYS", "*"); show(r) != `["other"]` {
		t.Fatalf("a second KEYS: %s", show(r))
	}
	tx.Unlock()

	tx = s.Lock(0, false, []byte("k"))
	tx.Only([][]byte{[]byte("k")})
	exec(tx, "GET", "k")
	if r := exec(tx, "KEYS", "*"); r.Str != errKeysLate.Str || tx.locked == ^uint64(0) {
		t.Fatalf("KEYS after GET: %s", show(r))
	}
	tx.Unlock()
	if r := run(s, 0, "GET", "other"); r.Str != "1" || s.Len() != 1 {
		t.Fatalf("after the scripts: %s, %d keys", show(r), s.Len())
	}
}

// Scripts that call KEYS, scripts over two keys and single commands run
// together without waiting on each other forever (go test -race runs it
// with the race detector's scheduling too).
func TestKeysBesideOtherTransactions(t *testing.T) {
	s := New(Options{})
	var wg sync.WaitGroup
	for g := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 300 {
				k1, k2 := []byte(fmt.Sprint("a", (g+i)%50)), []byte(fmt.Sprint("b", i%37))
				tx := s.Lock(0, false, k1, k2)
				tx.Only([][]byte{k1, k2})
				if g%2 == 0 {
					tx.Exec(Lookup([]byte("KEYS")), [][]byte{[]byte("KEYS"), []byte("a*")})
				}
				tx.Exec(Lookup([]byte("INCR")), [][]byte{[]byte("INCR"), k1})
				tx.Exec(Lookup([]byte("ZADD")), [][]byte{[]byte("ZADD"), k2, []byte("1"), k1})
				tx.Unlock()
				run(s, 0, "INCR", "c")
			}
		}()
	}
	wg.Wait()
	if r := run(s, 0, "GET", "c"); r.Str != "1800" {
		t.Fatalf("INCR c: %s", show(r))
	}
}

// Scan walks every live key once, a part at a time, while other keys come
// and go; an expired key is not named.
func TestScanNamesEveryKeyOnce(t *testing.T) {
	s := New(Options{})
	for i := range 3000 {
		run(s, 0, "SET", fmt.Sprint("stay", i), "v")
	}
	run(s, 0, "SET", "gone", "v", "PX", "1")
	seen := map[string]int{}
	part, calls := 0, 0
	for part < Parts {
		part = s.Scan(sec, part, 10, func(k string, typ Type) {
			seen[k]++
			if typ != TypeString {
				t.Errorf("%s: type %v", k, typ)
			}
		})
		// Keys come and go between the calls.
		run(s, 0, "SET", fmt.Sprint("new", calls), "v")
		run(s, 0, "DEL", fmt.Sprint("new", calls-1))
		calls++
	}
	for i := range 3000 {
		if k := fmt.Sprint("stay", i); seen[k] != 1 {
			t.Fatalf("%s seen %d times", k, seen[k])
		}
	}
	if seen["gone"] != 0 {
		t.Fatal("an expired key was named")
	}
	if calls > 400 || calls < 100 {
		t.Fatalf("%d calls for 3000 keys at COUNT 10", calls)
	}
}
