package budget

import "github.com/sluice-rl/sluice/engine"

// What a reservation (RL.RESERVE) needs of the tree: the requests an
// admitted call charged, so that settling it later charges or gives back
// exactly those buckets and counters whatever the tree has become since,
// and the target's concurrency limit.

// Charged returns how many requests the last Acquire on sc charged.
func (sc *Scratch) Charged() int { return sc.ch.n }

// ChargedLevel returns request i of the last Acquire on sc, and the name
// limited_by reports for it. Both point into sc (and the tree) and are
// valid until sc's next call: a caller that keeps them copies them. The
// name is built apart from the Acquire's own limited_by, which stays as
// it was.
func (sc *Scratch) ChargedLevel(i int) (*engine.Request, []byte) {
	return &sc.ch.reqs[i], sc.ch.name(i, &sc.held)
}

// ChargedPerCall reports whether request i of the last Acquire on sc
// counted the call rather than its cost (a node's requests): a
// settlement leaves it, a release gives back its 1.
func (sc *Scratch) ChargedPerCall(i int) bool { return sc.ch.perCall(i) }

// ConcurrencyPrefix starts the limited_by of a call refused for want of a
// concurrency slot.
const ConcurrencyPrefix = "concurrency:"

// Concurrency returns the concurrency limit of c's target (0: none) and
// the key its slots are counted under, which is also what limited_by
// reports: "concurrency:" and the node's own bucket key by its scope (the
// path, path#subject, or for global the configured node's path). The key
// is built in sc and valid until its next call.
func (t *Tree) Concurrency(c *Call, sc *Scratch) (key []byte, n int64, err error) {
	plan, _, ok := t.Resolve(c.Path)
	if !ok {
		return nil, 0, NoBudget(c.Path)
	}
	cfg := &plan.Config.Config
	if cfg.Concurrency == 0 {
		return nil, 0, nil
	}
	k := append(sc.slot[:0], ConcurrencyPrefix...)
	switch s := cfg.Scope; s {
	case User, IP, Route:
		if len(c.Subject) == 0 {
			return nil, 0, errKeyRequired(c.Path, s)
		}
		k = append(append(append(k, c.Path...), '#'), c.Subject...)
	case Global:
		k = append(k, plan.Config.Path...)
	default:
		k = append(k, c.Path...)
	}
	sc.slot = k
	return k, cfg.Concurrency, nil
}
