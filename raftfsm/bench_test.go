package raftfsm

import (
	"fmt"
	"testing"

	"github.com/hashicorp/raft"
)

// leafEntries returns the log of a budget tree grown one RL.BUDGET SET at a
// time: system (enforcing, allocated), 10 allocated partners, 100 allocated
// tenants, then n distinct leaves spread over the tenants — the shape of a
// cluster where tenants add their users' budgets one by one.
func leafEntries(tb testing.TB, n int) [][]byte {
	tb.Helper()
	const (
		alloc = `{"sharing":"enforce","sustained":{"rate":%d,"window":"minute"},"budget":{"mode":"allocated","total":1000000000}}`
		leaf  = `{"sustained":{"rate":10,"window":"minute"},"scope":"user"}`
	)
	out := [][]byte{setEntry(tb, "system", fmt.Sprintf(alloc, 1_000_000_000))}
	for p := 0; p < 10; p++ {
		out = append(out, setEntry(tb, fmt.Sprintf("system/p%d", p), fmt.Sprintf(alloc, 10_000_000)))
		for t := 0; t < 10; t++ {
			out = append(out, setEntry(tb, fmt.Sprintf("system/p%d/t%d", p, t), fmt.Sprintf(alloc, 100_000)))
		}
	}
	for i := 0; i < n; i++ {
		out = append(out, setEntry(tb, fmt.Sprintf("system/p%d/t%d/u%d", i%10, i/10%10, i), leaf))
	}
	return out
}

// BenchmarkFSMApplyLeafSets applies, per iteration, a whole log of n leaf
// SETs (plus the 111 nodes above them) to a fresh state machine, as a
// restarting node replays it: one op is the whole replay.
func BenchmarkFSMApplyLeafSets(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run(fmt.Sprintf("entries=%d", n), func(b *testing.B) {
			log := leafEntries(b, n)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				f := NewFSM()
				for j, data := range log {
					if r := f.Apply(&raft.Log{Index: uint64(j + 1), Type: raft.LogCommand, Data: data}).(Response); r.Err != nil {
						b.Fatal(r.Err)
					}
				}
				if f.State().Tree.Len() != len(log) {
					b.Fatalf("%d nodes, want %d", f.State().Tree.Len(), len(log))
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(log)), "ns/entry")
		})
	}
}

// BenchmarkFSMApplyQuotaAdd applies one batch of 8 quota counts, the entry
// a busy cluster commits most: the cost of decoding and dispatching an
// entry beside the work it does.
func BenchmarkFSMApplyQuotaAdd(b *testing.B) {
	day := int64(86400e9)
	items := make([]QuotaItem, 8)
	for i := range items {
		items[i] = QuotaItem{Key: QuotaKey(fmt.Sprintf("i|tenant%d", i)), Start: 0, End: day, Used: 1, Limit: 1 << 40, Period: "day UTC"}
	}
	data := (&Entry{Type: QuotaAdd, Quotas: items, Now: 1}).Encode()
	f := NewFSM()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if r := f.Apply(&raft.Log{Index: uint64(i + 1), Type: raft.LogCommand, Data: data}).(Response); r.N != len(items) {
			b.Fatalf("applied %d items", r.N)
		}
	}
}

// BenchmarkQuotaUsed reads a committed quota counter, as every quota-gated
// acquire does: no allocation.
func BenchmarkQuotaUsed(b *testing.B) {
	day := int64(86400e9)
	f := NewFSM()
	f.Apply(&raft.Log{Index: 1, Type: raft.LogCommand, Data: (&Entry{Type: QuotaAdd, Now: 1,
		Quotas: []QuotaItem{{Key: "i|acme", Start: 0, End: day, Used: 5, Limit: 100, Period: "day UTC"}}}).Encode()})
	key := []byte("i|acme")
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if f.QuotaUsed(key, 0, day) != 5 {
			b.Fatal("wrong count")
		}
	}
}
