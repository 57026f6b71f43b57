package budget

import (
	"math/big"
	"strings"
	"testing"
	"time"
)

// TestWriteCostIsBoundedByTheChange holds each kind of change to the number
// of nodes it derives (Tree.derived), the same in a tree of 1k and of 30k
// nodes: a leaf's SET derives one node whatever the tree's size; a SET of a
// node with descendants derives its subtree, and nothing else.
func TestWriteCostIsBoundedByTheChange(t *testing.T) {
	leaf, _ := ParseJSON([]byte(`{"sustained":{"rate":10,"window":"minute"},"scope":"user"}`))
	tenant, _ := ParseJSON([]byte(`{"sharing":"enforce","sustained":{"rate":50000,"window":"minute"},"budget":{"mode":"allocated","total":1000000000}}`))
	sizes := []int{1_000, 30_000}
	if testing.Short() {
		sizes = []int{1_000, 5_000}
	}
	for _, n := range sizes {
		tr := leafTree(t, n)
		check := func(what string, nt *Tree, want int) {
			t.Helper()
			if nt.derived != want {
				t.Errorf("n=%d: %s derived %d nodes, want %d", n, what, nt.derived, want)
			}
		}
		ch, err := tr.Set(leafPath(n+1), leaf, 2)
		if err != nil {
			t.Fatal(err)
		}
		check("a new leaf", ch.Tree, 1)
		ch, _ = ch.Tree.Set(leafPath(n+1), tenant, 3)
		check("a leaf set again", ch.Tree, 1)
		under := len(tr.Paths("system/p3/t4/"))
		ch, _ = tr.Set("system/p3/t4", tenant, 4)
		check("a tenant with leaves", ch.Tree, 1+under)
		ch, _ = tr.Set(leafPath(34)+"/x/y", leaf, 5)
		check("a leaf two levels below a leaf", ch.Tree, 1)
		ch, _ = ch.Tree.Set(leafPath(34)+"/x", leaf, 6)
		check("a node inserted above a leaf", ch.Tree, 2)
		nt, _, _ := tr.Del(leafPath(7), false, 7)
		check("a leaf's delete", nt, 0)
		imp := map[string]Config{}
		for i := 0; i < 20; i++ {
			imp[leafPath(n+100+i)] = leaf
		}
		ch, _ = tr.Import(imp, false, 8)
		check("an import of 20 leaves", ch.Tree, 20)
		imp["system/p3/t4"] = tenant
		imp[leafPath(43)] = leaf // system/p3/t4/u43: derived with its tenant, once
		ch, _ = tr.Import(imp, false, 9)
		check("an import of 20 leaves and a tenant", ch.Tree, 20+1+under)
	}
}

// TestSetAllocationsDoNotGrowWithTheTree counts the allocations of one leaf
// SET — a measure of the work that involves no clock: a change that copied
// or derived the tree would allocate in proportion to it. The persistent
// structures copy one path each, O(log n) nodes, so 30 times more nodes
// may cost a few more allocations, never 30 times as many.
func TestSetAllocationsDoNotGrowWithTheTree(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a tree of 30k nodes")
	}
	leaf, _ := ParseJSON([]byte(`{"sustained":{"rate":10,"window":"minute"},"scope":"user"}`))
	allocs := func(n int) float64 {
		tr := leafTree(t, n)
		i := 0
		return testing.AllocsPerRun(200, func() {
			i++
			if _, err := tr.Set(leafPath(n+i), leaf, 2); err != nil {
				t.Fatal(err)
			}
		})
	}
	small, large := allocs(1_000), allocs(30_000)
	t.Logf("allocations per leaf SET: %.0f at 1k nodes, %.0f at 30k", small, large)
	if large > 1.5*small {
		t.Fatalf("a leaf SET allocates %.0f times at 30k nodes and %.0f at 1k: the cost grows with the tree", large, small)
	}
}

// TestDeriveErrorsReportTheShallowestNode: a change whose limits cannot be
// derived is refused with the error of the first failing node in the
// order a full build derives (by depth, then path), and changes nothing.
func TestDeriveErrorsReportTheShallowestNode(t *testing.T) {
	// Configs no parser produces (budget.total 0 in allocated mode), so that
	// the derivation itself fails and names the node.
	bad := Config{Window: time.Second, Mode: Allocated, Overcommit: 1000, Cost: 1}
	good, _ := ParseJSON([]byte(`{"sharing":"inherit","sustained":{"rate":5}}`))
	tr := buildTree(t, map[string]string{"a": `{"sharing":"inherit","sustained":{"rate":9}}`, "a/b/c": `{}`})
	before := dumpTree(tr)
	_, err := tr.Import(map[string]Config{"zz": bad, "a/b": bad, "a/b/c/d": bad, "c": good, "c/d": bad}, false, 2)
	if err == nil || !strings.Contains(err.Error(), "zz: budget.total") {
		t.Fatalf("import: %v", err)
	}
	_, err = tr.Import(map[string]Config{"c/d": bad, "a/b": bad, "a/b/c/d": bad, "c": good}, false, 2)
	if err == nil || !strings.Contains(err.Error(), "a/b: budget.total") {
		t.Fatalf("import: %v", err)
	}
	// A parent's change that its descendants cannot derive from.
	if _, err := tr.Set("a", bad, 3); err == nil || !strings.Contains(err.Error(), "a: budget.total") {
		t.Fatalf("set: %v", err)
	}
	if _, err := FromVersioned(map[string]Versioned{"a": {Config: good}, "a/b": {Config: bad}}, 1); err == nil {
		t.Fatal("FromVersioned accepted an invalid config")
	}
	if dumpTree(tr) != before {
		t.Fatal("a refused change altered the tree")
	}
}

// TestOldVersionsStayAsPublished keeps versions of a random history
// and checks, once the history is over, that each still reads as it did
// when it was made: no change writes into a tree that readers may hold.
func TestOldVersionsStayAsPublished(t *testing.T) {
	ops := randomOps(t, 7, 800)
	tr := Empty
	type kept struct {
		t    *Tree
		dump string
	}
	var versions []kept
	for i, op := range ops {
		tr, _ = applyOp(tr, op, uint64(i+1))
		if i%20 == 0 {
			versions = append(versions, kept{tr, dumpTree(tr)})
		}
	}
	for i, v := range versions {
		if got := dumpTree(v.t); got != v.dump {
			t.Fatalf("version %d changed after it was published:\n%s", i, firstDiff(got, v.dump))
		}
	}
}

// TestChildrenFollowTheTree: a node inserted between a parent and its
// children takes them over — children sets, allocated sums and Parent
// pointers — and a delete gives its parent its sum back.
func TestChildrenFollowTheTree(t *testing.T) {
	alloc := `{"sustained":{"rate":100,"window":"second"},"budget":{"mode":"allocated","total":100}}`
	tr := buildTree(t, map[string]string{"a": alloc, "a/b/c": `{"sustained":{"rate":10}}`,
		"a/b/d": `{"sustained":{"rate":60,"window":"minute"}}`, "a/x": `{"sustained":{"rate":5}}`})
	paths := func(ns []*Node) string {
		var s []string
		for _, n := range ns {
			s = append(s, n.Path)
		}
		return strings.Join(s, " ")
	}
	if got := paths(tr.Children(tr.Get("a"))); got != "a/b/c a/b/d a/x" {
		t.Fatalf("children of a: %s", got)
	}
	if got := tr.Allocated(tr.Get("a")); got != "16" {
		t.Fatalf("a allocates %s, want 16", got)
	}
	cfg, _ := ParseJSON([]byte(`{"sustained":{"rate":50,"window":"second"},"budget":{"mode":"allocated","total":100}}`))
	ch, err := tr.Set("a/b", cfg, 2)
	if err != nil {
		t.Fatal(err)
	}
	nt := ch.Tree
	if got := paths(nt.Children(nt.Get("a"))); got != "a/b a/x" {
		t.Fatalf("children of a: %s", got)
	}
	if got := paths(nt.Children(nt.Get("a/b"))); got != "a/b/c a/b/d" {
		t.Fatalf("children of a/b: %s", got)
	}
	if nt.Get("a/b/c").Parent != nt.Get("a/b") || nt.Get("a/b").Parent != nt.Get("a") {
		t.Fatal("parents not moved")
	}
	if a, b := nt.Allocated(nt.Get("a")), nt.Allocated(nt.Get("a/b")); a != "55" || b != "11" {
		t.Fatalf("allocated a=%s a/b=%s, want 55 and 11", a, b)
	}
	nt, _, _ = nt.Del("a/b/c", false, 3)
	if got, alloc := paths(nt.Children(nt.Get("a/b"))), nt.Allocated(nt.Get("a/b")); got != "a/b/d" || alloc != "1" {
		t.Fatalf("after delete: children %s, allocated %s", got, alloc)
	}
	// The versions it came from are as they were.
	if got := paths(tr.Children(tr.Get("a"))); got != "a/b/c a/b/d a/x" || tr.Allocated(tr.Get("a")) != "16" {
		t.Fatalf("old version changed: %s", got)
	}
}

// TestWritersShareNothingWithReaders: under the race detector, readers of
// a version and writers making new versions from it (two at once, as a
// snapshot and an apply might) touch no memory in common but to read it.
func TestWritersShareNothingWithReaders(t *testing.T) {
	base := leafTree(t, 2_000)
	leaf, _ := ParseJSON([]byte(`{"sharing":"inherit","sustained":{"rate":10,"window":"minute"}}`))
	done := make(chan struct{})
	read := func() {
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			base.Resolve([]byte(leafPath(i%2000) + "/api"))
			base.NodeJSON(base.Get("system/p1/t2"))
			base.Paths("system/p3/")
		}
	}
	write := func(off int, errs chan<- error) {
		tr := base
		for i := 0; i < 200; i++ {
			ch, err := tr.Set(leafPath(off+i), leaf, uint64(i+2))
			if err != nil {
				errs <- err
				return
			}
			if i%50 == 0 {
				tr = base // branch from the shared version again
			} else {
				tr = ch.Tree
			}
			tr, _, _ = tr.Del(leafPath(i), false, uint64(i+2))
		}
		errs <- nil
	}
	go read()
	go read()
	errs := make(chan error)
	go write(10_000, errs)
	go write(20_000, errs)
	for i := 0; i < 2; i++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	close(done)
}

// TestAllocatedSumsCarry: the per-window sums behind Allocated hold more
// than 64 bits, and taking children away undoes adding them exactly.
func TestAllocatedSumsCarry(t *testing.T) {
	tr := buildTree(t, map[string]string{"p": `{"sustained":{"rate":1,"window":"minute"},"budget":{"mode":"allocated","total":1}}`})
	e := tr.edit(2)
	huge := Config{HasLimit: true, Rate: 1 << 62, Window: time.Second}
	for i := 0; i < 5; i++ {
		e.addRate("p", &huge, 1)
	}
	nt := e.done()
	// 5·2⁶² per second, normalised to the parent's minute.
	if got, want := nt.Allocated(nt.Get("p")), new(big.Int).Mul(big.NewInt(5*60), big.NewInt(1<<62)).String(); got != want {
		t.Fatalf("allocated %s, want %s", got, want)
	}
	e = nt.edit(3)
	for i := 0; i < 5; i++ {
		e.addRate("p", &huge, -1)
	}
	if nt = e.done(); nt.entry("p").alloc != nil || nt.Allocated(nt.Get("p")) != "0" {
		t.Fatalf("after taking all away: %v", nt.entry("p").alloc)
	}
}
