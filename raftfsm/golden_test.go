package raftfsm

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/budget"
)

// goldenEntries are one entry of each type with every field its type
// reads, as this version's proposers write them.
func goldenEntries(c budget.Config) []*Entry {
	req := &ReqID{Node: "n1", Seq: 7}
	day := int64(86400e9)
	item := QuotaItem{Key: "i|acme", Start: 0, End: day, Used: 3, Limit: 100, Period: "day UTC"}
	return []*Entry{
		{Type: SetBudget, Path: "system/p", Config: &c, Req: req},
		{Type: DelBudget, Path: "system/p", Recursive: true, Req: req},
		{Type: ImportBudgets, Budgets: map[string]budget.Config{"a": c, "a/b": c}, Replace: true, IfEmpty: true, Req: req},
		{Type: AddMember, Member: &Member{ID: "n2", RespAddr: "10.0.0.2:6379", RaftAddr: "10.0.0.2:7000"}, Auto: true, Req: req},
		{Type: RemoveMember, ID: "n2", Req: req},
		{Type: QuotaAdd, Quotas: []QuotaItem{item}, Now: 42, Origin: "n1", Seq: 9, Req: req},
		{Type: QuotaReset, Keys: []QuotaKey{"i|acme", "i|beta"}, Now: 43, Req: req},
		{Type: QuotaReserve, Quotas: []QuotaItem{item}, Origin: "n1@5", Req: req},
		{Type: QuotaSet, Quotas: []QuotaItem{item}, Now: 44, Req: req},
		{Type: QuotaReturn, Quotas: []QuotaItem{item}, Origin: "n1@5", Replace: true, Req: req},
	}
}

// golden are the log bytes of goldenEntries: what existing Raft logs hold.
// A change to the encoding must keep reading these (and, to stay readable
// by older replicas, keep writing them).
var golden = []string{
	"\x01\x01{\"path\":\"system/p\",\"config\":{\"sharing\":\"private\",\"algorithm\":\"token_bucket\",\"sustained\":{\"rate\":5,\"window\":\"minute\"},\"burst\":{\"capacity\":5},\"budget\":{\"mode\":\"unlimited\",\"overcommit_ratio\":1},\"scope\":\"tenant\",\"strategy\":\"reject\",\"max_wait_ms\":1000,\"cost\":1,\"response_headers\":true},\"req\":{\"node\":\"n1\",\"seq\":7}}",
	"\x01\x02{\"path\":\"system/p\",\"recursive\":true,\"req\":{\"node\":\"n1\",\"seq\":7}}",
	"\x01\x03{\"budgets\":{\"a\":{\"sharing\":\"private\",\"algorithm\":\"token_bucket\",\"sustained\":{\"rate\":5,\"window\":\"minute\"},\"burst\":{\"capacity\":5},\"budget\":{\"mode\":\"unlimited\",\"overcommit_ratio\":1},\"scope\":\"tenant\",\"strategy\":\"reject\",\"max_wait_ms\":1000,\"cost\":1,\"response_headers\":true},\"a/b\":{\"sharing\":\"private\",\"algorithm\":\"token_bucket\",\"sustained\":{\"rate\":5,\"window\":\"minute\"},\"burst\":{\"capacity\":5},\"budget\":{\"mode\":\"unlimited\",\"overcommit_ratio\":1},\"scope\":\"tenant\",\"strategy\":\"reject\",\"max_wait_ms\":1000,\"cost\":1,\"response_headers\":true}},\"replace\":true,\"if_empty\":true,\"req\":{\"node\":\"n1\",\"seq\":7}}",
	"\x01\x04{\"member\":{\"id\":\"n2\",\"resp_addr\":\"10.0.0.2:6379\",\"raft_addr\":\"10.0.0.2:7000\"},\"auto\":true,\"req\":{\"node\":\"n1\",\"seq\":7}}",
	"\x01\x05{\"id\":\"n2\",\"req\":{\"node\":\"n1\",\"seq\":7}}",
	"\x01\x06{\"quotas\":[{\"k\":\"aXxhY21l\",\"s\":0,\"e\":86400000000000,\"n\":3,\"l\":100,\"p\":\"day UTC\"}],\"now\":42,\"origin\":\"n1\",\"seq\":9,\"req\":{\"node\":\"n1\",\"seq\":7}}",
	"\x01\a{\"keys\":[\"aXxhY21l\",\"aXxiZXRh\"],\"now\":43,\"req\":{\"node\":\"n1\",\"seq\":7}}",
	"\x01\b{\"quotas\":[{\"k\":\"aXxhY21l\",\"s\":0,\"e\":86400000000000,\"n\":3,\"l\":100,\"p\":\"day UTC\"}],\"origin\":\"n1@5\",\"req\":{\"node\":\"n1\",\"seq\":7}}",
	"\x01\t{\"quotas\":[{\"k\":\"aXxhY21l\",\"s\":0,\"e\":86400000000000,\"n\":3,\"l\":100,\"p\":\"day UTC\"}],\"now\":44,\"req\":{\"node\":\"n1\",\"seq\":7}}",
	"\x01\n{\"replace\":true,\"quotas\":[{\"k\":\"aXxhY21l\",\"s\":0,\"e\":86400000000000,\"n\":3,\"l\":100,\"p\":\"day UTC\"}],\"origin\":\"n1@5\",\"req\":{\"node\":\"n1\",\"seq\":7}}",
}

// TestEntryEncodingIsStable holds the log encoding to the bytes existing
// logs hold, both ways.
func TestEntryEncodingIsStable(t *testing.T) {
	c, err := budget.ParseJSON([]byte(`{"sustained":{"rate":5,"window":"minute"}}`))
	if err != nil {
		t.Fatal(err)
	}
	entries := goldenEntries(c)
	if len(entries) != len(golden) {
		t.Fatalf("%d entries, %d golden encodings", len(entries), len(golden))
	}
	for i, e := range entries {
		if got := e.Encode(); !bytes.Equal(got, []byte(golden[i])) {
			t.Errorf("type %d encodes as\n%q\nexisting logs hold\n%q", e.Type, got, golden[i])
		}
		d, err := Decode([]byte(golden[i]))
		if err != nil {
			t.Errorf("type %d: %v", e.Type, err)
			continue
		}
		if !reflect.DeepEqual(d, e) {
			t.Errorf("type %d decodes as %+v, want %+v", e.Type, d, e)
		}
	}
}

// TestGoldenEntriesApply applies the golden log to a fresh state machine
// and checks what each entry answered and left behind.
func TestGoldenEntriesApply(t *testing.T) {
	f := NewFSM()
	obs := &quotaLog{}
	f.SetQuotaObserver(obs)
	var got []string
	for i, g := range golden {
		// Each write its own id: the golden ones share one.
		e, err := Decode([]byte(g))
		if err != nil {
			t.Fatal(err)
		}
		e.Req.Seq = uint64(i + 1)
		r := apply(f, uint64(i+1), e.Encode())
		got = append(got, fmt.Sprintf("%d:n=%d,warn=%q,err=%v", e.Type, r.N, r.Warn, r.Err))
		st := f.State()
		got = append(got, fmt.Sprintf("tree=%d,members=%d,removed=%v,counters=%d", st.Tree.Len(), len(st.Members), st.Removed, f.QuotaCounters()))
	}
	got = append(got, fmt.Sprint(obs.seen, obs.reset, obs.grants))
	// The removed node asking to join on its own is refused; a retried
	// write is answered as the first time and changes nothing.
	join, _ := Decode([]byte(golden[3]))
	join.Req.Seq = 100
	r := apply(f, 100, join.Encode())
	got = append(got, fmt.Sprintf("rejoin: %v", r.Err))
	set, _ := Decode([]byte(golden[0]))
	set.Req.Seq = 1
	r = apply(f, 101, set.Encode())
	got = append(got, fmt.Sprintf("retry: n=%d index=%d tree=%d", r.N, r.Index, f.State().Tree.Len()))
	want := []string{
		`1:n=1,warn="",err=<nil>`,
		`tree=1,members=0,removed=map[],counters=0`,
		`2:n=1,warn="",err=<nil>`,
		`tree=0,members=0,removed=map[],counters=0`,
		`3:n=2,warn="",err=<nil>`,
		`tree=2,members=0,removed=map[],counters=0`,
		`4:n=0,warn="",err=<nil>`,
		`tree=2,members=1,removed=map[],counters=0`,
		`5:n=0,warn="",err=<nil>`,
		`tree=2,members=0,removed=map[n2:true],counters=0`,
		`6:n=1,warn="",err=<nil>`,
		`tree=2,members=0,removed=map[n2:true],counters=1`,
		`7:n=1,warn="",err=<nil>`,
		`tree=2,members=0,removed=map[n2:true],counters=0`,
		`8:n=1,warn="",err=<nil>`,
		`tree=2,members=0,removed=map[n2:true],counters=1`,
		`9:n=1,warn="",err=<nil>`,
		`tree=2,members=0,removed=map[n2:true],counters=1`,
		`10:n=0,warn="",err=<nil>`,
		`tree=2,members=0,removed=map[n2:true],counters=1`,
		`[n1/9/1] [i|acme i|beta i|acme] [n1@5:3]`,
		`rejoin: ERR node 'n2' was removed from the cluster with RL.CLUSTER LEAVE; an operator re-admits it with RL.CLUSTER JOIN`,
		`retry: n=1 index=1 tree=2`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("applied:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestGoldenSnapshotRestores restores a snapshot this format's writers
// made (the state after the golden log) and checks everything it carries:
// tree, removed nodes, quota counters and batch numbers, write outcomes.
func TestGoldenSnapshotRestores(t *testing.T) {
	b, err := os.ReadFile("testdata/snapshot-format1.json")
	if err != nil {
		t.Fatal(err)
	}
	f := NewFSM()
	if err := f.Restore(io.NopCloser(bytes.NewReader(b))); err != nil {
		t.Fatal(err)
	}
	st := f.State()
	it, _ := f.Quota("i|acme")
	if st.Tree.Len() != 2 || st.Tree.Get("a/b").Version != 3 || !st.Removed["n2"] || len(st.Members) != 0 ||
		it.Reserved != 3 || f.QuotaSeq("n1") != 9 || f.Applied() != 8 {
		t.Fatalf("restored tree %s, removed %v, members %v, counter %+v, seq %d, applied %d",
			st.Tree.Export(), st.Removed, st.Members, it, f.QuotaSeq("n1"), f.Applied())
	}
	// A write retried after the snapshot is answered from its outcome.
	set, _ := Decode([]byte(golden[2]))
	set.Req.Seq = 3
	if r := apply(f, 9, set.Encode()); r.N != 2 || r.Index != 3 || f.State() != st {
		t.Fatalf("retried import: %+v", r)
	}
}
