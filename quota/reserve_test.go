package quota

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/engine"
)

// A node admits quota calls only from units granted to it, asks for more
// when they run out, counts settled units once, and gives back what an
// idle counter holds — on a fixed timeline, with a fake state machine that
// grants up to `free` units at a time.
func TestReserverAdmitsOnlyWhatWasGranted(t *testing.T) {
	now := t0
	members := 1
	st := engine.New(engine.Options{Shards: 2})
	free := int64(4)
	var proposed []string
	r := &Reserver{Self: "n1", Store: st, Clock: func() int64 { return now }, Members: func() int { return members },
		Committed: func(string) (Item, bool) { return Item{}, false }, Log: slog.Default(), Reserved: &count{}, Failed: &count{}}
	r.Propose = func(items []Item) error {
		grants := make([]int64, len(items))
		for i, it := range items {
			proposed = append(proposed, fmt.Sprint(it.Used))
			if it.Used > 0 {
				grants[i] = min(it.Used, free)
			} else {
				grants[i] = it.Used
			}
		}
		r.Granted("n1", items, grants)
		return nil
	}
	r.Init()
	st.SetQuotaGate(r)
	spec := Spec{N: 100}
	spec.Period, _ = ParsePeriod("day", "")
	lim, _ := spec.Limit()
	call := func() engine.Result {
		return st.Acquire(now, spec.Request(&lim, []byte("i|k"), now, 1), 0, false)
	}
	// A node alone: no reservations.
	for i := 0; i < 3; i++ {
		if res := call(); !res.Allowed {
			t.Fatalf("alone, call %d refused", i)
		}
	}
	// Those counts commit before the others join.
	start, _ := spec.Period.Bounds(now)
	st.SettleQuota([]byte("i|k"), start, 3)
	members = 3
	if res := call(); res.Allowed || !res.Reserve || res.RetryAfter != engine.ReserveRetry {
		t.Fatalf("with nothing reserved: %+v", res)
	}
	r.round()
	admitted := 0
	for i := 0; i < 10; i++ {
		if call().Allowed {
			admitted++
		}
	}
	if admitted != 4 {
		t.Fatalf("admitted %d from a grant of 4", admitted)
	}
	// Its counts commit: settled first, then off the pending count; at no
	// point is there room.
	r.Settled([]byte("i|k"), start, 4)
	if call().Allowed {
		t.Fatal("admitted between settling and the pending count dropping")
	}
	st.SettleQuota([]byte("i|k"), start, 4)
	if res := call(); res.Allowed || !res.Reserve {
		t.Fatalf("after settling: %+v", res)
	}
	// A grant of 4, two used, then idle: the two unused go back.
	r.round()
	call()
	call()
	now += releaseAfter
	proposed = nil
	r.round()
	if fmt.Sprint(proposed) != "[-2]" {
		t.Fatalf("released %v", proposed)
	}
	if res := call(); res.Allowed {
		t.Fatalf("admitted from released units: %+v", res)
	}
}

type count struct{ n int }

func (c *count) Inc() { c.n++ }

// A restarted node neither admits before its replica has caught up with
// the log nor takes the grants of its previous life, replayed from the
// log, for its own: those units were that life's, which may have admitted
// every one of them before it crashed.
func TestRestartedNodeTakesNoGrantsOfItsPreviousLife(t *testing.T) {
	now := t0
	st := engine.New(engine.Options{Shards: 2})
	ready := false
	self := "n1@" + Incarnation()
	if OriginNode(self) != "n1" || OriginNode("n1") != "n1" || Incarnation() == Incarnation() {
		t.Fatalf("origins: %q → %q", self, OriginNode(self))
	}
	r := &Reserver{Self: self, Ready: func() bool { return ready }, Store: st, Clock: func() int64 { return now },
		Members: func() int { return 3 }, Committed: func(string) (Item, bool) { return Item{}, false },
		Log: slog.Default(), Reserved: &count{}, Failed: &count{}}
	r.Propose = func(items []Item) error { return nil } // grants arrive as the log is applied
	r.Init()
	st.SetQuotaGate(r)
	spec := Spec{N: 100}
	spec.Period, _ = ParsePeriod("day", "")
	lim, _ := spec.Limit()
	call := func() engine.Result {
		return st.Acquire(now, spec.Request(&lim, []byte("i|k"), now, 1), 0, false)
	}
	// While the log replays: refused, to be tried again shortly.
	if res := call(); res.Allowed || !res.Reserve {
		t.Fatalf("before catching up: %+v", res)
	}
	if r.Reserve(0) {
		t.Fatal("Reserve answered before the replica caught up")
	}
	// Caught up; a call finds nothing reserved and asks. Then grants of
	// the previous life arrive (origin "n1@…" of another start, or "n1"
	// from a binary without incarnations): an entry it proposed before
	// the crash that the leader committed after it.
	ready = true
	if res := call(); res.Allowed || !res.Reserve {
		t.Fatalf("with nothing reserved: %+v", res)
	}
	want := []Item{{Key: "i|k", Limit: 100, Used: 20}}
	want[0].Start, want[0].End = spec.Period.Bounds(now)
	r.Granted("n1@"+Incarnation(), want, []int64{20})
	r.Granted("n1", want, []int64{20})
	if res := call(); res.Allowed {
		t.Fatalf("admitted from grants of a previous life: %+v", res)
	}
	// Its own grant counts.
	r.Granted(self, want, []int64{5})
	admitted := 0
	for i := 0; i < 10; i++ {
		if call().Allowed {
			admitted++
		}
	}
	if admitted != 5 {
		t.Fatalf("admitted %d from a grant of 5", admitted)
	}
}

// With spend marks, a node admits only up to the mark on disk, which the
// marks writer keeps a step ahead of its spending; the file tells the
// next life what each life may have spent (a torn last line is no mark),
// and a rewrite keeps only the lives and marks that still matter.
func TestSpendMarksBoundWhatACrashStrands(t *testing.T) {
	now := t0
	dir := t.TempDir()
	st := engine.New(engine.Options{Shards: 2})
	marks, lives, err := OpenMarks(dir)
	if err != nil || len(lives) != 0 {
		t.Fatalf("a new file: %v %v", lives, err)
	}
	self := "n1@a"
	if err := marks.Begin(self); err != nil {
		t.Fatal(err)
	}
	r, start, end, call := dayQuota(st, &now, marks, func(*Reserver, []Item) error { return nil })
	if call() {
		t.Fatal("admitted with nothing granted")
	}
	r.Granted(self, []Item{{Key: "i|k", Start: start, End: end, Limit: 600, Used: 600}}, []int64{100})
	// Granted, but no mark on disk yet: refused until the writer runs.
	if call() {
		t.Fatal("admitted past the mark on disk")
	}
	admitted := 0
	for i := 0; i < 50; i++ {
		r.writeMarks()
		if call() {
			admitted++
		}
	}
	if admitted != 50 {
		t.Fatalf("admitted %d of 50 with the writer keeping up", admitted)
	}
	// The file bounds what was spent within a step (2 of 600).
	marks.Close()
	if f, err := os.OpenFile(filepath.Join(dir, MarksFile), os.O_APPEND|os.O_WRONLY, 0); err == nil {
		f.WriteString(`{"o":"n1@a","m":{"k":"aXxr","s":0,"e":1,"n":9`) // torn
		f.Close()
	}
	marks, lives, err = OpenMarks(dir)
	if err != nil || len(lives) != 1 || lives[0].Origin != self || len(lives[0].Marks) != 1 {
		t.Fatalf("lives %+v, %v", lives, err)
	}
	if m := lives[0].Marks[0]; m.Key != "i|k" || m.Start != start || m.Used < 50 || m.Used > 50+markStep(600) {
		t.Fatalf("50 admitted, mark %+v", m)
	}
	// A later life rewrites the file: the old life once given back is gone.
	if err := marks.Rewrite([]Life{{Origin: "n1@b", Marks: []Item{{Key: "i|j", Start: start, End: end, Used: 3}}}}); err != nil {
		t.Fatal(err)
	}
	if err := marks.Write("n1@b", []Item{{Key: "i|j", Start: start, End: end, Used: 5}}); err != nil {
		t.Fatal(err)
	}
	marks.Close()
	_, lives, err = OpenMarks(dir)
	if err != nil || len(lives) != 1 || lives[0].Origin != "n1@b" || lives[0].Marks[0].Used != 5 {
		t.Fatalf("after a rewrite: %+v %v", lives, err)
	}
}

// The decision of a quota call on a node of a cluster: within a grant
// that never runs out, without and with spend marks (the marks writer
// running, as on a node). A mark is due every half step (300 calls of a
// quota of a billion, limit/600/2 = 833333): the call only notes it.
func BenchmarkReservedQuotaAcquire(b *testing.B) {
	for _, withMarks := range []bool{false, true} {
		b.Run(fmt.Sprintf("marks=%v", withMarks), func(b *testing.B) {
			now := t0
			st := engine.New(engine.Options{Shards: 2})
			r := &Reserver{Self: "n1@a", Store: st, Clock: func() int64 { return now }, Members: func() int { return 3 },
				Committed: func(string) (Item, bool) { return Item{}, false }, Log: slog.Default(), Reserved: &count{}, Failed: &count{}}
			r.Propose = func(items []Item) error { return nil }
			r.Init()
			stop := make(chan struct{})
			defer close(stop)
			if withMarks {
				m, _, err := OpenMarks(b.TempDir())
				if err != nil {
					b.Fatal(err)
				}
				r.Marks = m
				go r.RunMarks(stop)
			}
			st.SetQuotaGate(r)
			spec := Spec{N: 1e9}
			spec.Period, _ = ParsePeriod("year", "")
			lim, _ := spec.Limit()
			start, end := spec.Period.Bounds(now)
			key := []byte("i|k")
			st.Acquire(now, spec.Request(&lim, key, now, 1), 0, false)
			r.Granted("n1@a", []Item{{Key: "i|k", Start: start, End: end, Limit: 1e9, Used: 1e9}}, []int64{1e9})
			r.Reserve(time.Second)
			req := spec.Request(&lim, key, now, 1)
			b.ReportAllocs()
			b.ResetTimer()
			refused := 0
			for i := 0; i < b.N; i++ {
				if !st.Acquire(now, req, 0, false).Allowed {
					refused++
				}
			}
			b.StopTimer()
			if refused > b.N/100 {
				b.Fatalf("%d of %d refused", refused, b.N)
			}
		})
	}
}

// A node that stops gives back what it holds unused, in one entry, and
// admits nothing against a quota afterwards.
func TestStoppingNodeGivesBackWhatItHolds(t *testing.T) {
	now := t0
	st := engine.New(engine.Options{Shards: 2})
	var proposed []Item
	r, start, end, call := dayQuota(st, &now, nil, func(_ *Reserver, items []Item) error { proposed = append(proposed, items...); return nil })
	call()
	r.Granted("n1@a", []Item{{Key: "i|k", Start: start, End: end, Limit: 600, Used: 600}}, []int64{10})
	for i := 0; i < 3; i++ {
		if !call() {
			t.Fatalf("call %d refused within a grant of 10", i)
		}
	}
	if back := r.GiveBack(time.Second); back != 7 || len(proposed) != 1 || proposed[0].Used != -7 {
		t.Fatalf("gave back %d: %+v", back, proposed)
	}
	if call() || r.Reserve(time.Second) {
		t.Fatal("a stopping node admitted or reserved")
	}
}

// A counter whose grant was all spent and committed is forgotten, but for
// what was spent: held again in the period, its grants and marks go on
// from there, as the state machine's record of the life's grants does,
// and a rewrite of the marks file keeps that mark.
func TestForgottenCounterKeepsItsSpentFrame(t *testing.T) {
	now := t0
	dir := t.TempDir()
	st := engine.New(engine.Options{Shards: 2})
	marks, _, _ := OpenMarks(dir)
	r, start, end, acquire := dayQuota(st, &now, marks, func(r *Reserver, items []Item) error { // wants find nothing left
		r.Granted("n1@a", items, make([]int64, len(items)))
		return nil
	})
	call := func() bool {
		r.writeMarks()
		return acquire()
	}
	grant := func(n int64) {
		r.Granted("n1@a", []Item{{Key: "i|k", Start: start, End: end, Limit: 600, Used: 600}}, []int64{n})
	}
	call()
	grant(4)
	for i := 0; i < 4; i++ {
		if !call() {
			t.Fatalf("call %d refused", i)
		}
	}
	r.Settled([]byte("i|k"), start, 4)
	st.SettleQuota([]byte("i|k"), start, 4)
	r.round() // the want the last call made finds nothing
	now += releaseAfter
	r.round()
	if _, held := r.held["i|k"]; held || r.spent["i|k"].base != 4 {
		t.Fatalf("after spending all: held %v, spent %+v", held, r.spent["i|k"])
	}
	// Held again: a grant of 3 more, two spent; the mark counts from 4.
	call()
	grant(3)
	call()
	call()
	if h := r.held["i|k"]; h == nil || h.granted != 7 || h.mark < 6 {
		t.Fatalf("held again: %+v", h)
	}
	r.rewriteMarks()
	marks.Close()
	_, lives, err := OpenMarks(dir)
	if err != nil || len(lives) != 1 || len(lives[0].Marks) != 1 || lives[0].Marks[0].Used < 6 || lives[0].Marks[0].Used > 7 {
		t.Fatalf("rewritten: %+v %v", lives, err)
	}
}

// dayQuota makes the Reserver of node n1@a, one of three, over st, with
// marks (nil: none) and propose as its Propose; it returns it, the bounds
// of the day at *now, and a call of a day quota of 600 on key i|k at *now.
func dayQuota(st *engine.Store, now *int64, marks *Marks, propose func(*Reserver, []Item) error) (r *Reserver, start, end int64, call func() bool) {
	r = &Reserver{Self: "n1@a", Store: st, Clock: func() int64 { return *now }, Members: func() int { return 3 },
		Committed: func(string) (Item, bool) { return Item{}, false }, Log: slog.Default(), Reserved: &count{}, Failed: &count{}, Marks: marks}
	r.Propose = func(items []Item) error { return propose(r, items) }
	r.Init()
	st.SetQuotaGate(r)
	spec := Spec{N: 600}
	spec.Period, _ = ParsePeriod("day", "")
	lim, _ := spec.Limit()
	start, end = spec.Period.Bounds(*now)
	call = func() bool { return st.Acquire(*now, spec.Request(&lim, []byte("i|k"), *now, 1), 0, false).Allowed }
	return r, start, end, call
}
