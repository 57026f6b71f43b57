package budget

import (
	"math/bits"
	"sort"
	"strings"
)

// An edit makes one new version of a tree. Changed nodes are staged (set
// with their config, not yet derived), then each staged node and every
// configured node below it is derived again, ancestors first. A node's
// derived values — Parent, effective limit, aggregate, plans — depend only
// on its own config and its ancestors', so nothing else needs deriving; a
// parent learns of a child through its entry (children set and allocated
// sum), which is updated without touching the parent's node.
type edit struct {
	tok *token
	t   *Tree // the new version, written in place until done
	old *Tree // the version the edit started from
	// alloc lists the paths whose allocation status may have changed: an
	// entry whose children's sum, or whose own node, changed.
	alloc map[string]struct{}
	// failed holds the staged nodes whose limits could not be derived, with
	// the error of the first in (depth, path) order, the order a full build
	// derives in.
	failed map[string]struct{}
	err    error
	errAt  string
}

func (t *Tree) edit(version uint64) *edit {
	nt := *t
	nt.version, nt.derived = version, 0
	return &edit{tok: new(token), t: &nt, old: t, alloc: map[string]struct{}{}}
}

func (e *edit) put(path string, v entry) {
	var added bool
	e.t.idx, added = hset(e.tok, e.t.idx, 0, hashString(path), path, v)
	if added {
		e.t.n++
	}
}

func labelOf(path string) string {
	if i := strings.IndexByte(path, '/'); i >= 0 {
		return path[:i]
	}
	return path
}

func (e *edit) countLabel(path string, d int) {
	l := labelOf(path)
	n := d
	if k := tget(e.t.labels, l); k != nil {
		n += k.n
	}
	if n == 0 {
		e.t.labels = tdel(e.tok, e.t.labels, l)
	} else {
		e.t.labels = tset(e.tok, e.t.labels, l, hashString(l), n)
	}
}

// stage sets path's config and version, to be derived by rederive.
func (e *edit) stage(path string, cfg Config, version uint64) {
	n := &Node{Path: path, Config: cfg, Version: version}
	if old := e.t.entry(path); old != nil {
		v := *old
		v.node = n
		e.put(path, v)
		return
	}
	e.put(path, entry{node: n})
	e.t.paths = tset(e.tok, e.t.paths, path, hashString(path), 0)
	e.countLabel(path, 1)
}

// remove drops path's entry (its children must go too, or have gone).
func (e *edit) remove(path string) {
	var removed bool
	e.t.idx, removed = hdel(e.tok, e.t.idx, 0, hashString(path), path)
	if !removed {
		return
	}
	e.t.n--
	e.t.paths = tdel(e.tok, e.t.paths, path)
	e.t.over = tdel(e.tok, e.t.over, path)
	e.countLabel(path, -1)
	delete(e.alloc, path)
}

// derived reports whether n was derived (plans() always sets Config).
func (n *Node) derived() bool { return n.exact.Config != nil }

// rederive derives the staged paths (sorted) and everything below them.
// A staged path below another staged path is derived with its ancestor's
// subtree, once.
func (e *edit) rederive(staged []string) error {
	for _, p := range staged {
		if e.t.entry(p).node.derived() || e.underFailed(p) {
			continue
		}
		e.derive(p)
		prefix := p + "/"
		e.t.paths.ascend(prefix, func(k *tnode) bool {
			if !strings.HasPrefix(k.key, prefix) {
				return false
			}
			if len(e.failed) == 0 || !e.underFailed(k.key) {
				e.derive(k.key)
			}
			return true
		})
	}
	return e.err
}

// underFailed reports whether a proper ancestor of path failed to derive.
func (e *edit) underFailed(path string) bool {
	for i := strings.LastIndexByte(path, '/'); i > 0; i = strings.LastIndexByte(path[:i], '/') {
		if _, ok := e.failed[path[:i]]; ok {
			return true
		}
	}
	return false
}

// derive derives path's node again under its current ancestors, and moves
// it between its old and new parents' children where that changed.
func (e *edit) derive(path string) {
	en := *e.t.entry(path)
	n := &Node{Path: path, Config: en.node.Config, Version: en.node.Version, label: labelOf(path)}
	parent := ""
	for i := strings.LastIndexByte(path, '/'); i > 0; i = strings.LastIndexByte(path[:i], '/') {
		if a := e.t.entry(path[:i]); a != nil {
			n.Parent, parent = a.node, path[:i]
			break
		}
	}
	e.t.derived++
	if err := n.derive(); err != nil {
		if e.failed == nil {
			e.failed = map[string]struct{}{}
		}
		e.failed[path] = struct{}{}
		if e.err == nil || depth(path) < depth(e.errAt) || depth(path) == depth(e.errAt) && path < e.errAt {
			e.err, e.errAt = err, path
		}
		return
	}
	n.plans()
	en.node = n
	e.put(path, en)
	e.alloc[path] = struct{}{}

	var old *Node
	if oe := e.old.entry(path); oe != nil {
		old = oe.node
	}
	oldParent := ""
	if old != nil && old.Parent != nil {
		oldParent = old.Parent.Path
	}
	switch {
	case old != nil && oldParent == parent:
		if parent != "" && !sameRate(&old.Config, &n.Config) {
			e.addRate(parent, &old.Config, -1)
			e.addRate(parent, &n.Config, 1)
		}
	default:
		if old != nil && oldParent != "" {
			e.unlink(oldParent, old)
		}
		if parent != "" {
			e.link(parent, n)
		}
	}
}

func depth(p string) int { return strings.Count(p, "/") }

func sameRate(a, b *Config) bool {
	return a.HasLimit == b.HasLimit && (!a.HasLimit || a.Rate == b.Rate && a.Window == b.Window)
}

// link adds child to parent's children and their allocated sum.
func (e *edit) link(parent string, child *Node) {
	en := *e.t.entry(parent)
	en.kids = tset(e.tok, en.kids, child.Path, hashString(child.Path), 0)
	e.put(parent, en)
	e.addRate(parent, &child.Config, 1)
}

// unlink removes child (as it was configured) from parent's children.
func (e *edit) unlink(parent string, child *Node) {
	en := *e.t.entry(parent)
	en.kids = tdel(e.tok, en.kids, child.Path)
	e.put(parent, en)
	e.addRate(parent, &child.Config, -1)
}

// addRate adds (sign 1) or takes away (-1) a child's sustained rate to or
// from parent's allocated sum. The sums are exact: taking a child away
// undoes its adding.
func (e *edit) addRate(parent string, c *Config, sign int) {
	if !c.HasLimit {
		return
	}
	en := *e.t.entry(parent)
	sums := make([]rateSum, 0, len(en.alloc)+1)
	found := false
	for _, r := range en.alloc {
		if r.window == c.Window {
			found = true
			var carry uint64
			if sign > 0 {
				r.lo, carry = bits.Add64(r.lo, uint64(c.Rate), 0)
				r.hi += carry
			} else {
				r.lo, carry = bits.Sub64(r.lo, uint64(c.Rate), 0)
				r.hi -= carry
			}
			if r.hi == 0 && r.lo == 0 {
				continue // no child left with this window
			}
		}
		sums = append(sums, r)
	}
	if !found {
		sums = append(sums, rateSum{window: c.Window, lo: uint64(c.Rate)})
	}
	if len(sums) == 0 {
		sums = nil
	}
	en.alloc = sums
	e.put(parent, en)
	e.alloc[parent] = struct{}{}
}

// done brings the over-allocated set up to date and returns the new tree.
func (e *edit) done() *Tree {
	for p := range e.alloc {
		en := e.t.entry(p)
		if en == nil {
			continue
		}
		over := e.t.overAllocated(en.node)
		switch was := tget(e.t.over, p) != nil; {
		case over && !was:
			e.t.over = tset(e.tok, e.t.over, p, hashString(p), 0)
		case !over && was:
			e.t.over = tdel(e.tok, e.t.over, p)
		}
	}
	t := e.t
	e.t = nil // the tree is published: no more writes
	return t
}

// --- changes ----------------------------------------------------------------

// Change is the outcome of a tree change: the new tree and, when the change
// is accepted but overcommits an allocated parent, a warning.
type Change struct {
	Tree *Tree
	Warn string
}

// Set returns the tree with path configured as cfg at Raft index version.
//
// It derives path's node and, when path has configured descendants, each
// of them again: they point at their ancestors' nodes and inherit from
// their limits. A leaf costs O(depth × log n).
func (t *Tree) Set(path string, cfg Config, version uint64) (Change, error) {
	if err := ValidPath(path); err != nil {
		return Change{}, err
	}
	e := t.edit(version)
	e.stage(path, cfg, version)
	if err := e.rederive([]string{path}); err != nil {
		return Change{}, errf("%v", err)
	}
	nt := e.done()
	n := nt.Get(path)
	var warns []string
	for _, a := range []*Node{n.Parent, n} {
		if a == nil || a.Config.Mode != Allocated {
			continue
		}
		w, err := nt.checkAllocation(a)
		if err != nil {
			return Change{}, err
		}
		if w != "" {
			warns = append(warns, w)
		}
	}
	return Change{Tree: nt, Warn: strings.Join(warns, "; ")}, nil
}

// Del returns the tree without path (and, with recursive, its descendants).
// removed is how many nodes went; 0 leaves the tree as it is. No other node
// is derived again: a node with descendants goes with all of them.
func (t *Tree) Del(path string, recursive bool, version uint64) (nt *Tree, removed int, err error) {
	en := t.entry(path)
	if en == nil {
		return t, 0, nil
	}
	gone := []string{path}
	prefix := path + "/"
	t.paths.ascend(prefix, func(k *tnode) bool {
		if !strings.HasPrefix(k.key, prefix) {
			return false
		}
		gone = append(gone, k.key)
		return true
	})
	if len(gone) > 1 && !recursive {
		return nil, 0, budgetErr("budget '%s' has children: use RL.BUDGET DEL %s RECURSIVE", printable([]byte(path)), printable([]byte(path)))
	}
	e := t.edit(version)
	if p := en.node.Parent; p != nil {
		e.unlink(p.Path, en.node)
	}
	for _, p := range gone {
		e.remove(p)
	}
	return e.done(), len(gone), nil
}

// Import returns the tree with every node of nodes set (replacing the whole
// tree with replace), validated as a whole. Without replace it costs what
// setting each node would, each subtree derived once.
func (t *Tree) Import(nodes map[string]Config, replace bool, version uint64) (Change, error) {
	paths := sortedKeys(nodes)
	for _, p := range paths {
		if err := ValidPath(p); err != nil {
			return Change{}, err
		}
	}
	base := t
	if replace {
		base = Empty
	}
	e := base.edit(version)
	for _, p := range paths {
		e.stage(p, nodes[p], version)
	}
	if err := e.rederive(paths); err != nil {
		return Change{}, errf("%v", err)
	}
	nt := e.done()
	// Only an over-allocated node can be refused or warned about.
	var warns []string
	var err error
	nt.over.ascend("", func(k *tnode) bool {
		w, cerr := nt.checkAllocation(nt.Get(k.key))
		if cerr != nil {
			err = &Error{Code: "BUDGET", Msg: k.key + ": " + cerr.(*Error).Msg}
			return false
		}
		if w != "" {
			warns = append(warns, k.key+": "+w)
		}
		return true
	})
	if err != nil {
		return Change{}, err
	}
	return Change{Tree: nt, Warn: strings.Join(warns, "; ")}, nil
}

// FromVersioned rebuilds a tree from Versioned nodes (a snapshot).
func FromVersioned(nodes map[string]Versioned, version uint64) (*Tree, error) {
	paths := sortedKeys(nodes)
	for _, p := range paths {
		if err := ValidPath(p); err != nil {
			return nil, err
		}
		c := nodes[p].Config
		if err := c.Validate(); err != nil {
			return nil, err
		}
	}
	e := Empty.edit(version)
	for _, p := range paths {
		e.stage(p, nodes[p].Config, nodes[p].Version)
	}
	if err := e.rederive(paths); err != nil {
		return nil, err
	}
	return e.done(), nil
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
