package raftfsm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/sluice-rl/sluice/budget"
)

// sink is an in-memory raft.SnapshotSink.
type sink struct{ bytes.Buffer }

func (s *sink) ID() string    { return "test" }
func (s *sink) Cancel() error { return nil }
func (s *sink) Close() error  { return nil }

func apply(f *FSM, index uint64, data []byte) Response {
	return f.Apply(&raft.Log{Index: index, Type: raft.LogCommand, Data: data}).(Response)
}

func seeded(t testing.TB) *FSM {
	f := NewFSM()
	for i, kv := range [][2]string{
		{"system", `{"sharing":"enforce","sustained":{"rate":10000,"window":"minute"},"budget":{"mode":"allocated","total":10000}}`},
		{"system/p", `{"sustained":{"rate":5000,"window":"minute"},"budget":{"mode":"allocated","total":5000,"overcommit_ratio":1.2}}`},
		{"system/p/t", `{"sustained":{"rate":1000,"window":"minute"}}`},
	} {
		if r := apply(f, uint64(i+1), setEntry(t, kv[0], kv[1])); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	apply(f, 4, (&Entry{Type: AddMember, Member: &Member{ID: "a", RespAddr: "127.0.0.1:1", RaftAddr: "127.0.0.1:2"}}).Encode())
	return f
}

func TestSnapshotRestoreReplacesEverything(t *testing.T) {
	f := seeded(t)
	snap, _ := f.Snapshot()
	var s sink
	if err := snap.Persist(&s); err != nil {
		t.Fatal(err)
	}
	saved := string(f.State().Tree.Export())
	// Later changes, then a restore: they must be gone.
	apply(f, 5, setEntry(t, "other", `{}`))
	apply(f, 6, (&Entry{Type: RemoveMember, ID: "a"}).Encode())
	if err := f.Restore(io.NopCloser(bytes.NewReader(s.Bytes()))); err != nil {
		t.Fatal(err)
	}
	if got := string(f.State().Tree.Export()); got != saved {
		t.Fatalf("restored %s\nwant %s", got, saved)
	}
	if f.State().Tree.Get("system/p/t").Version != 3 || f.State().Members["a"].RespAddr != "127.0.0.1:1" {
		t.Fatal("versions or members not restored")
	}
	var doc map[string]any
	json.Unmarshal(s.Bytes(), &doc)
	if doc["format"] != 1.0 {
		t.Fatalf("snapshot format %v", doc["format"])
	}
	if err := f.Restore(io.NopCloser(bytes.NewReader([]byte(`{"format":2}`)))); err == nil {
		t.Fatal("unknown snapshot format accepted")
	}
}

func TestImportIfEmptyIsIdempotent(t *testing.T) {
	f := NewFSM()
	cfgs := map[string]budget.Config{}
	c, _ := budget.ParseJSON([]byte(`{"sustained":{"rate":5}}`))
	cfgs["a"] = c
	e := (&Entry{Type: ImportBudgets, Budgets: cfgs, IfEmpty: true}).Encode()
	apply(f, 1, e)
	apply(f, 2, setEntry(t, "b", `{}`))
	apply(f, 3, e) // a second seeding finds the tree non-empty
	if f.State().Tree.Len() != 2 || f.State().Tree.Get("a").Version != 1 {
		t.Fatalf("tree %s", f.State().Tree.Export())
	}
}

// FuzzFSMApply feeds arbitrary bytes as log entries: the FSM must not
// panic, and an entry it refuses must leave the state untouched.
func FuzzFSMApply(f *testing.F) {
	f.Add(setEntry(f, "x", `{"sustained":{"rate":5}}`))
	f.Add((&Entry{Type: DelBudget, Path: "system", Recursive: true}).Encode())
	f.Add((&Entry{Type: AddMember, Member: &Member{ID: "z"}}).Encode())
	f.Add([]byte{1, 3, '{', '}'})
	f.Add([]byte{1, 1, 'n', 'u', 'l', 'l'})
	f.Add([]byte{9, 9})
	f.Fuzz(func(t *testing.T, data []byte) {
		fsm := seeded(t)
		before := fsm.State()
		r := apply(fsm, 10, data)
		if r.Err != nil && fsm.State() != before {
			t.Fatalf("refused entry (%v) changed the state", r.Err)
		}
		checkTree(t, fsm.State().Tree)
	})
}

// FuzzBudgetSetJSON sets arbitrary JSON as a budget config under an
// allocated parent: no panic, and the tree stays consistent.
func FuzzBudgetSetJSON(f *testing.F) {
	for _, s := range []string{
		`{"sustained":{"rate":100,"window":"minute"}}`, `{"rate_limit":{"sharing":"inherit"}}`,
		`{"budget":{"mode":"shared","total":3}}`, `{"sustained":{"rate":4000,"window":"minute"}}`,
		`{"scope":"user","strategy":"degrade","cost":0}`, `{"burst":{"capacity":1}}`, `[]`, `{"sustained":{"rate":1e3}}`,
	} {
		f.Add(s, "system/p/new")
	}
	f.Fuzz(func(t *testing.T, js, path string) {
		fsm := seeded(t)
		c, err := budget.ParseJSON([]byte(js))
		if err != nil {
			return
		}
		before := fsm.State()
		r := apply(fsm, 10, (&Entry{Type: SetBudget, Path: path, Config: &c}).Encode())
		if r.Err != nil && fsm.State() != before {
			t.Fatalf("refused set (%v) changed the state", r.Err)
		}
		checkTree(t, fsm.State().Tree)
	})
}

// checkTree verifies a tree's invariants: it round-trips through export,
// and every allocated node's children fit total × overcommit.
func checkTree(t *testing.T, tr *budget.Tree) {
	t.Helper()
	cfgs, err := budget.ParseExport(tr.Export())
	if err != nil {
		t.Fatalf("export does not parse back: %v", err)
	}
	again, err := budget.Empty.Import(cfgs, true, tr.Version())
	if err != nil {
		t.Fatalf("export does not import back: %v", err)
	}
	if !bytes.Equal(again.Tree.Export(), tr.Export()) {
		t.Fatal("export round trip differs")
	}
}

func TestQuotaCountersAreReplicatedStateWithPeriods(t *testing.T) {
	f := NewFSM()
	day := int64(86400e9)
	obs := &quotaLog{}
	f.SetQuotaObserver(obs)
	add := func(idx uint64, now int64, origin string, seq uint64, items ...QuotaItem) Response {
		r := apply(f, idx, (&Entry{Type: QuotaAdd, Quotas: items, Now: now, Origin: origin, Seq: seq}).Encode())
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		return r
	}
	used := func(key string, start int64) int64 { return f.QuotaUsed([]byte(key), start, start+day) }
	item := func(key string, start, n int64) QuotaItem {
		return QuotaItem{Key: QuotaKey(key), Start: start, End: start + day, Used: n, Limit: 100, Period: "day UTC"}
	}
	add(1, 10, "n1", 5, item("acme", 0, 4), item("beta", 0, 1))
	add(2, 20, "n2", 1, item("acme", 0, 3))
	if got := used("acme", 0); got != 7 {
		t.Fatalf("acme used %d", got)
	}
	// A batch retried after an uncertain outcome (or an older one arriving
	// late) is counted once and does not run the hook again.
	if r := add(3, 30, "n1", 5, item("acme", 0, 4)); r.N != 0 || used("acme", 0) != 7 {
		t.Fatalf("retried batch counted: N=%d used %d", r.N, used("acme", 0))
	}
	add(4, 30, "n1", 4, item("acme", 0, 4))
	if fmt.Sprint(obs.seen) != "[n1/5/2 n2/1/1]" || f.QuotaSeq("n1") != 5 {
		t.Fatalf("observer saw %v, last seq %d", obs.seen, f.QuotaSeq("n1"))
	}
	// Refunds count down, never below zero.
	add(5, 40, "n2", 2, item("beta", 0, -5))
	if used("beta", 0) != 0 {
		t.Fatalf("beta after refunds: %d", used("beta", 0))
	}
	// A new period starts over; a late increment for the old one is dropped.
	add(6, day+1, "", 0, item("acme", day, 2))
	add(7, day+2, "", 0, item("acme", 0, 9))
	if used("acme", day) != 2 || used("acme", 0) != 0 {
		t.Fatalf("periods: %d %d", used("acme", day), used("acme", 0))
	}
	// Another kind of period starts over even if it began earlier.
	month := QuotaItem{Key: "acme", Start: -day, End: 30 * day, Used: 1, Limit: 1000, Period: "month UTC"}
	add(8, day+3, "", 0, month)
	if it, _ := f.Quota("acme"); it.Used != 1 || it.Period != "month UTC" || it.Limit != 1000 {
		t.Fatalf("after a change of period: %+v", it)
	}
	add(9, day+3, "", 0, item("acme", day, 2))
	// Snapshots carry the counters and the batch numbers.
	snap, _ := f.Snapshot()
	var s sink
	snap.Persist(&s)
	g := NewFSM()
	if err := g.Restore(io.NopCloser(bytes.NewReader(s.Bytes()))); err != nil {
		t.Fatal(err)
	}
	if g.QuotaUsed([]byte("acme"), day, 2*day) != 2 || g.QuotaUsed([]byte("beta"), 0, day) != 0 || g.QuotaSeq("n1") != 5 || g.QuotaSeq("n2") != 2 {
		t.Fatal("counters or batch numbers not restored")
	}
	// Ended periods are purged as entries pass (each apply purges a shard),
	// a minute after they ended by the proposer's clock: a proposer whose
	// clock runs a little ahead does not end them for everyone.
	for i := uint64(10); i < 10+64; i++ {
		add(i, 2*day+int64(30*time.Second), "", 0)
	}
	if n := f.QuotaCounters(); n == 0 {
		t.Fatal("counters purged 30 s after their period")
	}
	for i := uint64(100); i < 100+64; i++ {
		add(i, 3*day, "", 0)
	}
	if n := f.QuotaCounters(); n != 0 {
		t.Fatalf("%d counters left after their periods ended", n)
	}
	add(300, 3*day, "", 0, item("acme", 3*day, 1))
	if r := apply(f, 301, (&Entry{Type: QuotaReset, Keys: []QuotaKey{"nobody", "acme"}}).Encode()); r.N != 1 || f.QuotaCounters() != 0 {
		t.Fatalf("reset of one existing counter of two: N=%d, %d left", r.N, f.QuotaCounters())
	}
	if fmt.Sprint(obs.reset) != "[nobody acme]" {
		t.Fatalf("observer saw resets %v", obs.reset)
	}
}

type quotaLog struct{ seen, reset, grants []string }

func (q *quotaLog) QuotaAdded(origin string, seq uint64, items []QuotaItem) {
	q.seen = append(q.seen, fmt.Sprintf("%s/%d/%d", origin, seq, len(items)))
}
func (q *quotaLog) QuotaReset(keys []QuotaKey, _ int64) {
	for _, k := range keys {
		q.reset = append(q.reset, string(k))
	}
}

func (q *quotaLog) QuotaReserved(origin string, items []QuotaItem, grants []int64) {
	for i := range items {
		q.grants = append(q.grants, fmt.Sprintf("%s:%d", origin, grants[i]))
	}
}

// Reservations grant at most (limit - max(used, reserved)) / 2N at a time,
// one unit near the limit, never past it; releases give units back; a new
// period starts over.
func TestQuotaReservationsNeverPassTheLimit(t *testing.T) {
	f := NewFSM()
	obs := &quotaLog{}
	f.SetQuotaObserver(obs)
	day := int64(86400e9)
	idx := uint64(0)
	for _, id := range []string{"n1", "n2", "n3"} {
		idx++
		apply(f, idx, (&Entry{Type: AddMember, Member: &Member{ID: id, RaftAddr: id + ":1", RespAddr: id + ":2"}}).Encode())
	}
	reserve := func(origin string, start, want int64) {
		idx++
		it := QuotaItem{Key: "i|k", Start: start, End: start + day, Used: want, Limit: 100, Period: "day UTC"}
		if r := apply(f, idx, (&Entry{Type: QuotaReserve, Origin: origin, Quotas: []QuotaItem{it}}).Encode()); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	// 100 units, three members: 16 (100/6), then 14 (84/6), 11 (70/6), …
	for i := 0; i < 40; i++ {
		reserve([]string{"n1", "n2", "n3"}[i%3], 0, 100)
	}
	total := int64(0)
	for _, g := range obs.grants {
		var id string
		var n int64
		fmt.Sscanf(strings.Replace(g, ":", " ", 1), "%s %d", &id, &n)
		total += n
	}
	if total != 100 || obs.grants[0] != "n1:16" || obs.grants[1] != "n2:14" || obs.grants[len(obs.grants)-1] != "n1:0" {
		t.Fatalf("grants %v (total %d)", obs.grants, total)
	}
	if it, _ := f.Quota("i|k"); it.Reserved != 100 {
		t.Fatalf("reserved %d", it.Reserved)
	}
	// A node gives 10 back; the next ask gets what is free again.
	obs.grants = nil
	reserve("n3", 0, -10)
	reserve("n1", 0, 100)
	if fmt.Sprint(obs.grants) != "[n3:-10 n1:1]" {
		t.Fatalf("after a release: %v", obs.grants)
	}
	// Counted admissions beyond the reservations (a node alone before the
	// others joined) leave less to grant.
	idx++
	apply(f, idx, (&Entry{Type: QuotaAdd, Now: 1, Quotas: []QuotaItem{{Key: "i|k", Start: 0, End: day, Used: 100, Limit: 100, Period: "day UTC"}}}).Encode())
	obs.grants = nil
	reserve("n2", 0, 5)
	if fmt.Sprint(obs.grants) != "[n2:0]" {
		t.Fatalf("over a fully used period: %v", obs.grants)
	}
	// The next period starts over; an earlier one gets nothing.
	obs.grants = nil
	reserve("n2", day, 5)
	reserve("n1", 0, 5)
	if fmt.Sprint(obs.grants) != "[n2:5 n1:0]" {
		t.Fatalf("periods: %v", obs.grants)
	}
}

// What a node life held and did not spend goes back to the pool when a
// later life returns it (QuotaReturn): its grant past its spend mark for
// the counters it marked, its whole grant of the others with All; once,
// however often the entry is repeated; a release of that life arriving
// later takes back nothing; the sum of what the lives may admit never
// passes the limit.
func TestQuotaReturnGivesBackWhatALifeDidNotSpend(t *testing.T) {
	f := NewFSM()
	f.SetQuotaObserver(&quotaLog{})
	day := int64(86400e9)
	idx := uint64(0)
	for _, id := range []string{"n1", "n2", "n3"} {
		idx++
		apply(f, idx, (&Entry{Type: AddMember, Member: &Member{ID: id, RaftAddr: id + ":1", RespAddr: id + ":2"}}).Encode())
	}
	item := func(key string, n int64) QuotaItem {
		return QuotaItem{Key: QuotaKey(key), Start: 0, End: day, Used: n, Limit: 600, Period: "day UTC"}
	}
	write := func(e *Entry) Response {
		idx++
		r := apply(f, idx, e.Encode())
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		return r
	}
	write(&Entry{Type: QuotaReserve, Origin: "n1@a", Quotas: []QuotaItem{item("i|k", 600), item("i|j", 600)}})
	write(&Entry{Type: QuotaReserve, Origin: "n2@a", Quotas: []QuotaItem{item("i|k", 600)}})
	k, _ := f.Quota("i|k")
	j, _ := f.Quota("i|j")
	if k.Reserved != 100+83 || k.Grants["n1@a"] != 100 || k.Grants["n2@a"] != 83 || j.Grants["n1@a"] != 100 {
		t.Fatalf("grants: k %+v, j %+v", k, j)
	}
	// n1's life a marked 12 of k and nothing of j: 88 of k and all 100 of
	// j come back; n2's grant stays.
	ret := &Entry{Type: QuotaReturn, Origin: "n1@a", Quotas: []QuotaItem{item("i|k", 12)}, Replace: true}
	if r := write(ret); r.N != 88+100 {
		t.Fatalf("returned %d units", r.N)
	}
	k, _ = f.Quota("i|k")
	j, _ = f.Quota("i|j")
	if k.Reserved != 12+83 || len(k.Grants) != 1 || j.Reserved != 0 || j.Grants != nil {
		t.Fatalf("after the return: k %+v, j %+v", k, j)
	}
	ret.Req = nil
	if r := write(ret); r.N != 0 {
		t.Fatalf("a repeated return gave back %d more", r.N)
	}
	// A release of that life committed after its return: nothing.
	write(&Entry{Type: QuotaReserve, Origin: "n1@a", Quotas: []QuotaItem{item("i|k", -50)}})
	if k, _ = f.Quota("i|k"); k.Reserved != 12+83 {
		t.Fatalf("a late release of a returned life: %+v", k)
	}
	// A mark above the grant returns nothing, and a release never takes
	// back more than its life holds.
	write(&Entry{Type: QuotaReserve, Origin: "n2@a", Quotas: []QuotaItem{item("i|k", -500)}})
	if k, _ = f.Quota("i|k"); k.Reserved != 12 || len(k.Grants) != 0 {
		t.Fatalf("n2 gave back all it held: %+v", k)
	}
	// Grants to every life never pass the limit: 12 are counted as spent.
	total := int64(0)
	for i := 0; i < 200; i++ {
		idx++
		it := item("i|k", 600)
		apply(f, idx, (&Entry{Type: QuotaReserve, Origin: fmt.Sprintf("n%d@b", i%3+1), Quotas: []QuotaItem{it}}).Encode())
	}
	k, _ = f.Quota("i|k")
	for _, g := range k.Grants {
		total += g
	}
	if total != 600-12 || k.Reserved != 600 {
		t.Fatalf("granted %d to the new lives, reserved %d", total, k.Reserved)
	}
	// A need is granted whole while the pool has it.
	write(&Entry{Type: QuotaReserve, Origin: "n1@c", Quotas: []QuotaItem{{Key: "i|big", Start: 0, End: day, Used: 3000, Need: 1000, Limit: 3000, Period: "day UTC"}}})
	if b, _ := f.Quota("i|big"); b.Grants["n1@c"] != 1000 {
		t.Fatalf("a need of 1000: %+v", b)
	}
}
