package budget

import (
	"fmt"
	"math/rand"
	"sort"
	"strings"
	"testing"
)

// treeOp is one random change: a SET, a DEL (recursive or not) or an
// IMPORT (merging or replacing).
type treeOp struct {
	kind      byte // 's', 'd', 'i'
	path      string
	cfg       Config
	recursive bool
	nodes     map[string]Config
	replace   bool
}

// randomConfigs are configs that between them exercise every rule of the
// tree: sharing modes, allocated and shared parents (with totals that
// children overrun, for warnings and refusals), quotas with and without a
// rate, scopes, window algorithms and nodes that only group children.
func randomConfigs(tb testing.TB) []Config {
	tb.Helper()
	var out []Config
	for _, r := range []int{1, 10, 100, 1000} {
		for _, js := range []string{
			`{}`,
			`{"sharing":"inherit","sustained":{"rate":%d,"window":"minute"}}`,
			`{"sharing":"enforce","sustained":{"rate":%d,"window":"second"},"burst":{"capacity":3}}`,
			`{"sustained":{"rate":%d,"window":"hour"},"scope":"user"}`,
			`{"sharing":"enforce","sustained":{"rate":%d,"window":"minute"},"budget":{"mode":"allocated","total":150,"overcommit_ratio":1.5}}`,
			`{"sharing":"inherit","budget":{"mode":"allocated","total":%d}}`,
			`{"sustained":{"rate":%d,"window":"minute"},"budget":{"mode":"shared","total":100}}`,
			`{"sharing":"inherit","quota":{"limit":%d,"period":"day"}}`,
			`{"sharing":"enforce","quota":{"limit":%d,"period":"month","timezone":"Europe/Paris"},"scope":"global"}`,
			`{"sharing":"enforce","algorithm":"fixed_window","sustained":{"rate":%d,"window":"minute"},"scope":"global"}`,
			`{"sustained":{"rate":%d},"algorithm":"gcra","strategy":"degrade","scope":"ip"}`,
			`{"sharing":"private","sustained":{"rate":%d,"window":"1500ms"},"strategy":"queue","cost":2}`,
		} {
			if !strings.Contains(js, "%d") {
				if r != 1 {
					continue
				}
			} else {
				js = fmt.Sprintf(js, r)
			}
			c, err := ParseJSON([]byte(js))
			if err != nil {
				tb.Fatalf("%s: %v", js, err)
			}
			out = append(out, c)
		}
	}
	return out
}

// randomOps returns n changes over a small universe of paths, so that nodes
// are set again, inserted above and below existing ones, and deleted.
func randomOps(tb testing.TB, seed int64, n int) []treeOp {
	rng := rand.New(rand.NewSource(seed))
	cfgs := randomConfigs(tb)
	segs := []string{"a", "b", "a-b", "c", "b.c"}
	path := func() string {
		d := 1 + rng.Intn(4)
		p := make([]string, d)
		for i := range p {
			p[i] = segs[rng.Intn(len(segs))]
		}
		return strings.Join(p, "/")
	}
	cfg := func() Config { return cfgs[rng.Intn(len(cfgs))] }
	ops := make([]treeOp, n)
	for i := range ops {
		switch x := rng.Intn(100); {
		case x < 72:
			ops[i] = treeOp{kind: 's', path: path(), cfg: cfg()}
		case x < 85:
			ops[i] = treeOp{kind: 'd', path: path(), recursive: rng.Intn(5) == 0}
		default:
			m := map[string]Config{}
			for k := 1 + rng.Intn(6); k > 0; k-- {
				m[path()] = cfg()
			}
			ops[i] = treeOp{kind: 'i', nodes: m, replace: rng.Intn(60) == 0}
		}
	}
	return ops
}

// applyOp applies op to t at index version and describes the outcome.
func applyOp(t *Tree, op treeOp, version uint64) (*Tree, string) {
	switch op.kind {
	case 's':
		ch, err := t.Set(op.path, op.cfg, version)
		if err != nil {
			return t, "set " + op.path + ": " + err.Error()
		}
		return ch.Tree, "set " + op.path + ": ok " + ch.Warn
	case 'd':
		nt, n, err := t.Del(op.path, op.recursive, version)
		if err != nil {
			return t, "del " + op.path + ": " + err.Error()
		}
		return nt, fmt.Sprintf("del %s: %d", op.path, n)
	}
	ch, err := t.Import(op.nodes, op.replace, version)
	if err != nil {
		return t, "import: " + err.Error()
	}
	return ch.Tree, "import: ok " + ch.Warn
}

// dumpTree describes everything a reader of t can observe through the
// public API: every node's GET reply, effective limit, parent, both plans
// (each level's keys, limit, governing node and quota), and the tree's
// version, length, labels, listings and export.
func dumpTree(t *Tree) string {
	var b strings.Builder
	fmt.Fprintf(&b, "version %d len %d labels %q\n", t.Version(), t.Len(), t.Labels())
	for _, pre := range []string{"", "a", "a/", "b/a-b", "c/"} {
		fmt.Fprintf(&b, "paths(%q) %q\n", pre, t.Paths(pre))
	}
	fmt.Fprintf(&b, "export %s\n", t.Export())
	plan := func(name string, p *Plan, implicit, ok bool) {
		if !ok {
			fmt.Fprintf(&b, "  %s: none\n", name)
			return
		}
		fmt.Fprintf(&b, "  %s: config %s@%d implicit=%v same=%v\n", name, p.Config.Path, p.Config.Version, implicit, p.Config == t.Get(p.Config.Path))
		for _, lv := range p.Levels {
			fmt.Fprintf(&b, "    key=%q name=%q node=%s@%d same=%v own=%v qonly=%v qkey=%q qname=%q",
				lv.Key, lv.Name, lv.Node.Path, lv.Node.Version, lv.Node == t.Get(lv.Node.Path), lv.Own, lv.QuotaOnly, lv.QuotaKey, lv.QuotaName)
			if lv.Limit != nil {
				fmt.Fprintf(&b, " limit=%+v", *lv.Limit)
			}
			if lv.Quota != nil {
				fmt.Fprintf(&b, " quota=%d/%s/%s", lv.Quota.Limit, lv.Quota.Period, lv.Quota.Timezone)
			}
			b.WriteByte('\n')
		}
	}
	for _, p := range t.Paths("") {
		n := t.Get(p)
		fmt.Fprintf(&b, "%s\n  get %s\n  label %s\n", p, t.NodeJSON(n), n.Label())
		if eff, ok := n.Effective(); ok {
			fmt.Fprintf(&b, "  effective %+v\n", eff)
		}
		if n.Parent != nil {
			fmt.Fprintf(&b, "  parent %s same=%v\n", n.Parent.Path, n.Parent == t.Get(n.Parent.Path))
		}
		pl, implicit, ok := t.Resolve([]byte(p))
		plan("exact", pl, implicit, ok)
		if strings.Count(p, "/") < MaxDepth-1 {
			pl, implicit, ok = t.Resolve([]byte(p + "/zz"))
			plan("implicit", pl, implicit, ok)
		}
	}
	return b.String()
}

// rebuilt is t built from scratch from its configs and versions, as a
// snapshot restore does.
func rebuilt(tb testing.TB, t *Tree) *Tree {
	tb.Helper()
	r, err := FromVersioned(t.Versioned(), t.Version())
	if err != nil {
		tb.Fatal(err)
	}
	return r
}

// TestIncrementalMatchesRebuild applies thousands of random changes one at
// a time and checks, every 25 steps, that the tree they produce is the one
// a full rebuild from the same configs produces.
func TestIncrementalMatchesRebuild(t *testing.T) {
	ops := randomOps(t, 1, 3000)
	if testing.Short() {
		ops = ops[:600]
	}
	tr := Empty
	counts := map[string]int{}
	largest := 0
	for i, op := range ops {
		var out string
		tr, out = applyOp(tr, op, uint64(i+1))
		counts[outcome(out)]++
		largest = max(largest, tr.Len())
		if i%25 != 24 && i != len(ops)-1 {
			continue
		}
		if got, want := dumpTree(tr), dumpTree(rebuilt(t, tr)); got != want {
			t.Fatalf("after op %d (%s), incremental and rebuilt trees differ:\n%s", i, out, firstDiff(got, want))
		}
	}
	// The sequence must have exercised refusals, warnings and growth.
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	t.Logf("outcomes %v, final size %d, largest %d", counts, tr.Len(), largest)
	for _, k := range []string{"setok", "setwarn", "setBUDGET", "delBUDGET", "impok", "impwarn", "impBUDGET", "deln", "del0"} {
		if counts[k] == 0 {
			t.Errorf("the random sequence never produced %q (outcomes: %v)", k, keys)
		}
	}
}

// outcome classifies applyOp's description: the operation and whether it
// was accepted, refused or (for a delete) removed nothing.
func outcome(out string) string {
	res := strings.SplitN(out, ": ", 2)[1]
	switch {
	case strings.HasPrefix(res, "ok "):
		if len(res) > 3 {
			return out[:3] + "warn"
		}
		return out[:3] + "ok"
	case res == "0":
		return out[:3] + "0"
	case res[0] >= '1' && res[0] <= '9':
		return out[:3] + "n"
	}
	return out[:3] + strings.Fields(res)[0]
}

func firstDiff(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := 0; i < len(al) && i < len(bl); i++ {
		if al[i] != bl[i] {
			lo := max(0, i-3)
			return fmt.Sprintf("incremental:\n%s\nrebuilt:\n%s", strings.Join(al[lo:min(len(al), i+3)], "\n"), strings.Join(bl[lo:min(len(bl), i+3)], "\n"))
		}
	}
	return fmt.Sprintf("lengths %d, %d", len(al), len(bl))
}
