package budget

import (
	"fmt"
	"testing"
)

// leafTree returns a tree of n nodes: system, 10 partners, 100 tenants
// (all enforcing and allocated) and n-111 user-scoped leaves spread over
// the tenants.
func leafTree(tb testing.TB, n int) *Tree {
	tb.Helper()
	parse := func(js string) Config {
		c, err := ParseJSON([]byte(js))
		if err != nil {
			tb.Fatal(err)
		}
		return c
	}
	alloc := func(rate int) Config {
		return parse(fmt.Sprintf(`{"sharing":"enforce","sustained":{"rate":%d,"window":"minute"},"budget":{"mode":"allocated","total":1000000000}}`, rate))
	}
	leaf := parse(`{"sustained":{"rate":10,"window":"minute"},"scope":"user"}`)
	nodes := map[string]Config{"system": alloc(1_000_000_000)}
	for p := 0; p < 10; p++ {
		nodes[fmt.Sprintf("system/p%d", p)] = alloc(10_000_000)
		for t := 0; t < 10; t++ {
			nodes[fmt.Sprintf("system/p%d/t%d", p, t)] = alloc(100_000)
		}
	}
	for i := 0; len(nodes) < n; i++ {
		nodes[leafPath(i)] = leaf
	}
	ch, err := Empty.Import(nodes, true, 1)
	if err != nil {
		tb.Fatal(err)
	}
	return ch.Tree
}

func leafPath(i int) string { return fmt.Sprintf("system/p%d/t%d/u%d", i%10, i/10%10, i) }

// BenchmarkTreeSet sets one new leaf under the three-level hierarchy of a
// tree of 1k, 10k and 100k nodes: the cost of one RL.BUDGET SET (or one
// replayed log entry) once the tree holds that many nodes.
func BenchmarkTreeSet(b *testing.B) {
	leaf, _ := ParseJSON([]byte(`{"sustained":{"rate":10,"window":"minute"},"scope":"user"}`))
	for _, n := range []int{1_000, 10_000, 100_000} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			base := leafTree(b, n)
			paths := make([]string, 1024)
			for i := range paths {
				paths[i] = leafPath(n + i)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := base.Set(paths[i%len(paths)], leaf, uint64(i+2)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkTreeResolve resolves a configured leaf and an unconfigured
// child (found through its parent) in a tree of 100k nodes; 0 allocs/op.
func BenchmarkTreeResolve(b *testing.B) {
	tr := leafTree(b, 100_000)
	for _, c := range []struct{ name, path string }{
		{"exact", leafPath(4242)},
		{"implicit", leafPath(4242) + "/api"},
	} {
		b.Run(c.name, func(b *testing.B) {
			path := []byte(c.path)
			if _, _, ok := tr.Resolve(path); !ok {
				b.Fatal("not resolved")
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				tr.Resolve(path)
			}
		})
	}
}

// TestResolveAllocatesNothing holds Resolve, the lookup of every budget
// RL.ACQUIRE, to zero allocations: for a configured node, an implicit
// child, and a path with no node, in a tree grown by single changes.
func TestResolveAllocatesNothing(t *testing.T) {
	tr := leafTree(t, 2_000)
	leaf, _ := ParseJSON([]byte(`{"sharing":"inherit","sustained":{"rate":10,"window":"minute"}}`))
	for i := 0; i < 50; i++ {
		ch, err := tr.Set(leafPath(5_000+i), leaf, uint64(i+2))
		if err != nil {
			t.Fatal(err)
		}
		tr = ch.Tree
	}
	for _, p := range []string{leafPath(5_010), leafPath(5_010) + "/api/v1", leafPath(42), "elsewhere/x"} {
		path := []byte(p)
		if n := testing.AllocsPerRun(1000, func() { tr.Resolve(path) }); n != 0 {
			t.Errorf("Resolve(%s) allocates %.1f times", p, n)
		}
	}
}
