package budget

import (
	"encoding/json"
	"fmt"
	"hash/maphash"
	"math/big"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/quota"
)

// Node is one configured budget node with everything derived from its
// place in the tree.
type Node struct {
	Path    string
	Config  Config
	Version uint64 // Raft index of the change that last set this node

	// Parent is the nearest configured ancestor, as it is in the tree this
	// node belongs to. (Children are the tree's business: Tree.Children.)
	Parent *Node

	own *engine.Limit // the node's own limit, or nil
	eff *engine.Limit // effective limit (docs/budgets.md, "Effective limits"), or nil
	agg *engine.Limit // aggregate bucket's limit, or nil
	req *engine.Limit // its requests' limit (Config.RequestsRate), or nil

	label    string // metrics label: the first path segment
	exact    Plan   // a call addressed to this node
	implicit Plan   // a call addressed to an unconfigured descendant
	nagg     uint8  // exact's first nagg levels are the aggregates
}

// Effective returns the node's effective limit, or false if nothing limits
// calls addressed to it.
func (n *Node) Effective() (engine.Limit, bool) {
	if n.eff == nil {
		return engine.Limit{}, false
	}
	return *n.eff, true
}

// Label is the node's metrics label (its first path segment).
func (n *Node) Label() string { return n.label }

// Level is one bucket a call charges.
type Level struct {
	// Key is the bucket's key in the budget space; nil for a node's own
	// bucket whose key depends on the call (its path, or path#subject).
	Key []byte
	// Name is what limited_by reports when this level is the tightest.
	Name  []byte
	Limit *engine.Limit
	Node  *Node // the config that governs this level
	Own   bool

	// Quota, if set, is a calendar quota counted at this level ("Calendar quotas" in
	// docs/budgets.md) under QuotaKey, reported as QuotaName; both nil when they
	// depend on the call, like Key. QuotaOnly marks a level that has a
	// quota and no bucket.
	Quota     *Quota
	QuotaKey  []byte
	QuotaName []byte
	QuotaOnly bool
	// PerCall marks the level of a node's requests (Config.RequestsRate):
	// each call counts 1 there whatever its cost, under ReqPrefix and the
	// node's own key.
	PerCall bool
}

// Plan is every bucket one call to a path charges, aggregates (root first)
// before the target's own bucket.
type Plan struct {
	Levels []Level
	// Config is the node whose scope, cost and strategy the call follows:
	// the target, or for an implicit child its deepest configured ancestor.
	Config *Node
}

// Tree is an immutable budget tree. A change returns a new Tree that shares
// every part the change did not touch with the old one (see DESIGN.md for
// the structures and what each change costs); a published Tree is never
// written again, so readers need no lock.
type Tree struct {
	idx    *hnode // path → entry
	paths  *tnode // configured paths, sorted
	labels *tnode // metrics label → number of nodes that have it
	// over holds the allocated nodes whose children allocate more than
	// their total: the only ones an IMPORT's allocation check can refuse or
	// warn about.
	over    *tnode
	n       int
	version uint64
	// derived counts the nodes derived to make this version from the one it
	// was changed from (tests hold it to the size of the change).
	derived int
}

// entry is what the tree keeps for one configured path: the node, and what
// depends on the node's children rather than on its ancestors.
type entry struct {
	node *Node
	kids *tnode // the paths of the node's children, sorted
	// alloc sums the sustained rates of the children with a limit, one sum
	// per window (a tree has few), in 128 bits; Tree.allocated turns them
	// into the node's allocated rate. Replaced, never written, on a change.
	alloc []rateSum
}

// rateSum is the sum of the sustained rates of some children that share a
// window: hi·2⁶⁴ + lo tokens per window.
type rateSum struct {
	window time.Duration
	hi, lo uint64
}

// Empty is the tree with no nodes.
var Empty = &Tree{}

// Len returns the number of configured nodes.
func (t *Tree) Len() int { return t.n }

// Version returns the Raft index of the last change to the tree.
func (t *Tree) Version() uint64 { return t.version }

func (t *Tree) entry(path string) *entry { return find(t.idx, hashString(path), path) }

// Get returns the configured node at path, or nil.
func (t *Tree) Get(path string) *Node {
	if e := t.entry(path); e != nil {
		return e.node
	}
	return nil
}

// Children returns n's children (the configured nodes whose nearest
// configured ancestor is n), sorted by path.
func (t *Tree) Children(n *Node) []*Node {
	e := t.entry(n.Path)
	if e == nil {
		return nil
	}
	var out []*Node
	e.kids.ascend("", func(k *tnode) bool {
		out = append(out, t.Get(k.key))
		return true
	})
	return out
}

// Paths returns the configured paths with the given prefix, sorted.
func (t *Tree) Paths(prefix string) []string {
	var out []string
	t.paths.ascend(prefix, func(k *tnode) bool {
		if !strings.HasPrefix(k.key, prefix) {
			return false
		}
		out = append(out, k.key)
		return true
	})
	return out
}

// PathsPage returns at most n of the configured paths with the given
// prefix that sort after after ("": from the first), sorted, and whether
// more follow: a page of Paths whose cost is the page's, not the tree's.
func (t *Tree) PathsPage(prefix, after string, n int) (paths []string, more bool) {
	from := prefix
	if after >= prefix {
		from = after + "\x00"
	}
	t.paths.ascend(from, func(k *tnode) bool {
		if !strings.HasPrefix(k.key, prefix) {
			return false
		}
		if len(paths) == n {
			more = true
			return false
		}
		paths = append(paths, k.key)
		return true
	})
	return paths, more
}

// Resolve returns the plan for a call to path: the configured node's, or
// the deepest configured ancestor's plan for implicit children. ok is false
// when no node on the path is configured. It does not allocate.
func (t *Tree) Resolve(path []byte) (p *Plan, implicit bool, ok bool) {
	if !checkPath(path) {
		return nil, false, false
	}
	if e := find(t.idx, maphash.Bytes(hashSeed, path), path); e != nil {
		return &e.node.exact, false, true
	}
	for i := len(path) - 1; i > 0; i-- {
		if path[i] == '/' {
			if e := find(t.idx, maphash.Bytes(hashSeed, path[:i]), path[:i]); e != nil {
				return &e.node.implicit, true, true
			}
		}
	}
	return nil, false, false
}

// aggSuffix marks aggregate bucket keys; paths cannot contain it.
const aggSuffix = "\x01"

// ReqPrefix starts the key of a node's requests bucket (its own bucket's
// key after it): no path starts with it. RequestsPrefix starts what
// limited_by reports for that level.
const (
	ReqPrefix      = "\x02"
	RequestsPrefix = "requests:"
)

// derive computes own, effective and aggregate limits; the parent's are
// already known.
func (n *Node) derive() error {
	c := &n.Config
	var err error
	if n.req, err = c.RequestsLimit(); err != nil {
		return fmt.Errorf("%s: %v", n.Path, err)
	}
	if c.HasLimit {
		l, err := c.Limit()
		if err != nil {
			return err
		}
		n.own = &l
	}
	n.eff = n.own
	if p := n.Parent; p != nil && p.Config.Sharing != Private && p.eff != nil {
		if n.own == nil {
			inherited := *p.eff
			n.eff = &inherited
		} else {
			m, err := minLimit(n.own, p.eff, c.Algorithm)
			if err != nil {
				return fmt.Errorf("%s: %v", n.Path, err)
			}
			n.eff = &m
		}
	}
	if c.Sharing == Enforce || c.Mode != Unlimited {
		n.agg = n.eff
		if c.Mode != Unlimited {
			total, err := engine.NewLimit(c.Algorithm, c.Total, c.Window, c.Total)
			if err != nil {
				return fmt.Errorf("%s: budget.total: %v", n.Path, err)
			}
			if n.agg == nil {
				n.agg = &total
			} else {
				m, err := minLimit(n.agg, &total, n.agg.Algo)
				if err != nil {
					return fmt.Errorf("%s: %v", n.Path, err)
				}
				n.agg = &m
			}
		}
	}
	return nil
}

// minLimit is the tighter of two limits under algorithm algo: the lower
// sustained rate (with its window) and the smaller burst.
func minLimit(a, b *engine.Limit, algo engine.Algo) (engine.Limit, error) {
	rate, window := a.Rate, a.Window
	ra := engine.Limit{Rate: a.Rate, Window: a.Window}
	rb := engine.Limit{Rate: b.Rate, Window: b.Window}
	if rb.Tighter(ra) {
		rate, window = b.Rate, b.Window
	}
	burst := min(a.Burst, b.Burst)
	if algo.IsWindow() {
		burst = rate
	}
	return engine.NewLimit(algo, rate, time.Duration(window), burst)
}

// aggregates returns the aggregate levels of n's ancestors and of n itself,
// root first: their buckets, or for an enforcing node with a quota and no
// rate, its quota alone. The ancestors' come from the parent's plan (its
// first nagg levels), their keys shared rather than built again.
func (n *Node) aggregates() []Level {
	var out []Level
	if p := n.Parent; p != nil && p.nagg > 0 {
		out = make([]Level, p.nagg, int(p.nagg)+2)
		copy(out, p.exact.Levels[:p.nagg])
		out[len(out)-1].Own = false // the parent's aggregate may be its own bucket too
	}
	switch {
	case n.agg != nil:
		out = append(out, Level{Key: []byte(n.Path + aggSuffix), Name: []byte(n.Path), Limit: n.agg, Node: n})
	case n.Config.Sharing == Enforce && n.Config.Quota != nil:
		// An enforcing node with a quota and no rate: its quota still
		// holds its whole subtree.
		out = append(out, Level{Key: []byte(n.Path + aggSuffix), Name: []byte(n.Path), Node: n, QuotaOnly: true})
	default:
		return out
	}
	withQuotas(out[len(out)-1:])
	return out
}

func (n *Node) plans() {
	c := &n.Config
	aggs := n.aggregates()
	n.nagg = uint8(len(aggs))
	implicit := append(make([]Level, 0, len(aggs)+1), aggs...)
	// Calls addressed to n itself: aggregates, then n's own bucket — unless
	// n only draws on a shared parent's pool, or the own bucket would be the
	// aggregate again (same key space, same limit).
	exact := aggs
	poolOnly := n.Parent != nil && n.Parent.Config.Mode == Shared && !c.HasLimit
	ownKeyed := c.Scope == Tenant || c.Scope == Global
	switch {
	case n.eff != nil && !poolOnly && ownKeyed && n.agg != nil && *n.agg == *n.eff:
		// The node's aggregate is its own bucket too: RL.RESET of the
		// path resets it.
		exact[len(exact)-1].Own = true
	case n.eff != nil && !poolOnly:
		own := Level{Limit: n.eff, Node: n, Own: true}
		if ownKeyed {
			own.Key, own.Name = []byte(n.Path), []byte(n.Path)
		}
		exact = append(exact, own)
		withQuotas(exact[len(exact)-1:])
	case c.Quota != nil:
		// No bucket of its own, but a quota: counted per call like one.
		own := Level{Node: n, Own: true, QuotaOnly: true}
		if ownKeyed {
			own.Key, own.Name = []byte(n.Path), []byte(n.Path)
		}
		exact = append(exact, own)
		withQuotas(exact[len(exact)-1:])
	}
	exact = n.withRequests(exact, ownKeyed)
	n.exact = Plan{Config: n, Levels: exact}
	// Calls to unconfigured descendants: the aggregates, plus an own bucket
	// with n's effective limit when n shares its limit with children and is
	// not a pool they draw on; an implicit child has n's quota as its own.
	if c.Sharing != Private && (n.eff != nil && c.Mode != Shared || c.Quota != nil) {
		own := Level{Limit: n.eff, Node: n, Own: true, QuotaOnly: n.eff == nil || c.Mode == Shared}
		if own.QuotaOnly {
			own.Limit = nil
		}
		if c.Scope == Global {
			own.Key, own.Name = []byte(n.Path), []byte(n.Path)
		}
		implicit = append(implicit, own)
		withQuotas(implicit[len(implicit)-1:])
	}
	if c.Sharing != Private {
		implicit = n.withRequests(implicit, c.Scope == Global)
	}
	n.implicit = Plan{Config: n, Levels: implicit}
}

// withRequests appends the level of n's requests, if it limits them:
// keyed by the node's path when keyed, else by the call's own key (built
// per call).
func (n *Node) withRequests(levels []Level, keyed bool) []Level {
	if n.req == nil {
		return levels
	}
	lv := Level{Limit: n.req, Node: n, PerCall: true}
	if keyed {
		lv.Key, lv.Name = []byte(ReqPrefix+n.Path), []byte(RequestsPrefix+n.Path)
	}
	return append(levels, lv)
}

// withQuotas attaches to each level the quota of the node that governs it.
func withQuotas(levels []Level) {
	for i := range levels {
		lv := &levels[i]
		if lv.Quota = lv.Node.Config.Quota; lv.Quota != nil && lv.Key != nil {
			lv.QuotaKey = []byte(quota.BudgetKey + string(lv.Key))
			lv.QuotaName = []byte(quota.NamePrefix + string(lv.Name))
		}
	}
}

// Allocated returns the sum of n's children's sustained rates normalised to
// n's window, as a decimal string.
func (t *Tree) Allocated(n *Node) string { return ratString(t.allocated(n)) }

func (t *Tree) allocated(n *Node) *big.Rat {
	sum := new(big.Rat)
	e := t.entry(n.Path)
	if e == nil {
		return sum
	}
	for _, r := range e.alloc {
		num := new(big.Int).Lsh(new(big.Int).SetUint64(r.hi), 64)
		num.Or(num, new(big.Int).SetUint64(r.lo))
		num.Mul(num, big.NewInt(int64(n.Config.Window)))
		sum.Add(sum, new(big.Rat).SetFrac(num, big.NewInt(int64(r.window))))
	}
	return sum
}

// overAllocated reports whether n is an allocated node whose children
// allocate more than its total (then checkAllocation warns or refuses).
func (t *Tree) overAllocated(n *Node) bool {
	return n.Config.Mode == Allocated && t.allocated(n).Cmp(new(big.Rat).SetInt64(n.Config.Total)) > 0
}

// checkAllocation applies the allocation check (docs/budgets.md) to an allocated node: the sum of
// its children's rates against total × overcommit. Only a node in over
// can fail it or warn.
func (t *Tree) checkAllocation(n *Node) (warn string, err error) {
	if tget(t.over, n.Path) == nil {
		return "", nil
	}
	sum := t.allocated(n)
	total := new(big.Rat).SetInt64(n.Config.Total)
	limit := new(big.Rat).Mul(total, big.NewRat(n.Config.Overcommit, 1000))
	msg := func() string {
		w := FormatWindow(n.Config.Window)
		return fmt.Sprintf("children allocate %s/%s, parent total %d/%s × overcommit %s",
			ratString(sum), w, n.Config.Total, w, ratioString(n.Config.Overcommit))
	}
	switch {
	case sum.Cmp(limit) > 0:
		return "", budgetErr("%s", msg())
	case sum.Cmp(total) > 0:
		return "overcommitted: " + msg(), nil
	}
	return "", nil
}

func ratString(r *big.Rat) string {
	if r.IsInt() {
		return r.Num().String()
	}
	s := r.FloatString(3)
	return strings.TrimRight(strings.TrimRight(s, "0"), ".")
}

func ratioString(permille int64) string {
	s := strconv.FormatFloat(float64(permille)/1000, 'f', -1, 64)
	if !strings.Contains(s, ".") {
		s += ".0"
	}
	return s
}

// --- export / import ---------------------------------------------------------

// Export is the JSON of the whole tree: {"version": n, "budgets": {path: config}}.
func (t *Tree) Export() []byte {
	m := make(map[string]Config, t.n)
	t.idx.each(func(e *entry) { m[e.node.Path] = e.node.Config })
	b, _ := json.Marshal(struct {
		Version uint64            `json:"version"`
		Budgets map[string]Config `json:"budgets"`
	}{t.version, m})
	return b
}

// ParseExport parses the Export shape (version is ignored) into configs.
func ParseExport(b []byte) (map[string]Config, error) {
	var doc struct {
		Version json.RawMessage            `json:"version"`
		Budgets map[string]json.RawMessage `json:"budgets"`
	}
	if err := strictDecode(b, &doc); err != nil {
		return nil, errf("budget import: %v", strings.TrimPrefix(err.Error(), "ERR budget config: "))
	}
	if doc.Budgets == nil {
		return nil, errf("budget import: the JSON must have a \"budgets\" object mapping paths to configs")
	}
	out := make(map[string]Config, len(doc.Budgets))
	for p, raw := range doc.Budgets {
		if err := ValidPath(p); err != nil {
			return nil, err
		}
		c, err := ParseJSON(raw)
		if err != nil {
			return nil, errf("budget '%s': %s", printable([]byte(p)), err.(*Error).Msg)
		}
		out[p] = c
	}
	return out, nil
}

// NodeJSON is RL.BUDGET GET's reply for n.
func (t *Tree) NodeJSON(n *Node) []byte {
	type eff struct {
		Rate   int64  `json:"rate"`
		Window string `json:"window"`
		Burst  int64  `json:"burst"`
	}
	out := struct {
		Path      string   `json:"path"`
		Config    Config   `json:"config"`
		Effective *eff     `json:"effective"`
		Allocated *string  `json:"allocated,omitempty"`
		Children  []string `json:"children"`
		Version   uint64   `json:"version"`
	}{Path: n.Path, Config: n.Config, Children: []string{}, Version: n.Version}
	if n.eff != nil {
		out.Effective = &eff{Rate: n.eff.Rate, Window: FormatWindow(time.Duration(n.eff.Window)), Burst: n.eff.Burst}
	}
	if n.Config.Mode == Allocated {
		a := t.Allocated(n)
		out.Allocated = &a
	}
	if e := t.entry(n.Path); e != nil {
		e.kids.ascend("", func(k *tnode) bool {
			out.Children = append(out.Children, k.key)
			return true
		})
	}
	b, _ := json.Marshal(out)
	return b
}

// Versioned is a node's config with the Raft index that set it, the form
// snapshots keep so that every replica reports the same versions.
type Versioned struct {
	Config  Config `json:"config"`
	Version uint64 `json:"version"`
}

// Versioned returns every node's config and version.
func (t *Tree) Versioned() map[string]Versioned {
	out := make(map[string]Versioned, t.n)
	t.idx.each(func(e *entry) { out[e.node.Path] = Versioned{Config: e.node.Config, Version: e.node.Version} })
	return out
}

// UnmarshalJSON reads the form MarshalJSON writes.
func (c *Config) UnmarshalJSON(b []byte) error {
	v, err := ParseJSON(b)
	if err != nil {
		return err
	}
	*c = v
	return nil
}

// Labels returns the distinct metrics labels of the tree's nodes, in the
// order of their first paths.
func (t *Tree) Labels() []string {
	type label struct{ name, first string }
	var ls []label
	t.labels.ascend("", func(l *tnode) bool {
		first := l.key
		if t.entry(first) == nil {
			// The label's paths all start with it and a slash.
			first, _ = t.paths.ceil(l.key + "/")
		}
		ls = append(ls, label{l.key, first})
		return true
	})
	sort.Slice(ls, func(i, j int) bool { return ls[i].first < ls[j].first })
	var out []string
	for _, l := range ls {
		out = append(out, l.name)
	}
	return out
}
