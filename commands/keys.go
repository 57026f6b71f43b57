package commands

import (
	"strconv"

	"github.com/sluice-rl/sluice/budget"
	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/internal/glob"
	"github.com/sluice-rl/sluice/keyspace"
	"github.com/sluice-rl/sluice/raftfsm"
)

// The keyspace commands let operators and tools (redis-cli --scan) look at
// what is being limited. A key is a live bucket, named as a client names
// it: an inline key (RL.ACQUIRE key RATE …, CL.THROTTLE), a budget bucket
// (the node path, or path#subject), or a calendar quota counter
// ("quota:" and its level, as limited_by names it). A full bucket is
// forgotten (it loses nothing), so the keyspace holds the keys that are
// not at full capacity, as DBSIZE counts them. Beside the buckets are the
// keys of the data commands this node keeps (package keyspace).

func keyCommands() []*Command {
	return []*Command{
		{Name: "SCAN", Arity: -2, Flags: FlagReadOnly, Handler: scanCmd,
			Summary: "Iterate over the live buckets and this node's data keys.", Syntax: "cursor [MATCH pattern] [COUNT count] [TYPE type]"},
		{Name: "KEYS", Arity: 2, Flags: FlagReadOnly, Handler: keysCmd,
			Summary: "The names of the live buckets and this node's data keys that match a pattern.", Syntax: "pattern"},
		{Name: "TYPE", Arity: 2, Flags: FlagReadOnly | FlagFast, FirstKey: 1, Handler: typeCmd,
			Summary: "The algorithm of a live bucket (quota for a quota counter), or none.", Syntax: "key"},
		{Name: "TTL", Arity: 2, Flags: FlagReadOnly | FlagFast, FirstKey: 1, Handler: ttlCmd,
			Summary: "Seconds until a bucket is full again and forgotten (-2 if there is none).", Syntax: "key"},
		{Name: "PTTL", Arity: 2, Flags: FlagReadOnly | FlagFast, FirstKey: 1, Handler: ttlCmd,
			Summary: "Milliseconds until a bucket is full again and forgotten (-2 if there is none).", Syntax: "key"},
	}
}

const quotaKeyName = "quota:"

// committedQuotas is the replicated state's quota counters (a
// *raftfsm.FSM). A quota counter is in the keyspace once the cluster has
// committed it (within --sync-interval of its first count): the store's
// quota entries are this node's counts on their way there, so SCAN and
// DBSIZE name each counter once, from the replicated state, and every
// node shows the same counters.
type committedQuotas interface {
	QuotaCounters() int
	ScanQuotas(part int, f func(it raftfsm.QuotaItem))
	Quota(key string) (raftfsm.QuotaItem, bool)
}

// committed returns the node's committed quota counters, or nil on a
// store without a replicated state (whose quota counters are its own).
func (ctx *Ctx) committed() committedQuotas {
	q, _ := ctx.Env.Service.Quotas.(committedQuotas)
	return q
}

// keyCount is DBSIZE's figure: live buckets, with the committed quota
// counters in place of the store's quota entries.
func (ctx *Ctx) keyCount() int {
	st := ctx.Env.Service.Store
	data := 0
	if k := ctx.Env.Service.Keys; k != nil {
		data = k.Len() // this node's keys of the data commands
	}
	q := ctx.committed()
	if q == nil {
		return st.Len() + data
	}
	return max(st.Len()-st.QuotaLen(), 0) + q.QuotaCounters() + data
}

// A SCAN cursor walks three phases, each a range of the cursor's values:
// the store's buckets (below scanDataPhase: the store's own cursor, a
// shard number under 2^12 shifted by 32 and an entry number), then this
// node's data keys (scanDataPhase and the keyspace part to go on from,
// a place in the keys' hash space: keyspace.Store.Scan), then the
// committed quota counters (scanQuotaPhase and the next part). Each
// phase's cursor names a place that does not move while keys come and
// go, so a key that lives throughout a scan is named exactly once.
const (
	scanDataPhase  = 1 << 61
	scanQuotaPhase = 1 << 62
)

// keyName appends the name SCAN shows for a stored key.
func keyName(b []byte, space engine.Space, key []byte) []byte {
	switch {
	case space == engine.SpaceQuota && len(key) >= 2:
		return append(append(b, quotaKeyName...), key[2:]...) // "i|" or "b|"
	case space == engine.SpaceBudget && len(key) > 0 && key[0] == budget.ReqPrefix[0]:
		// A node's requests, as limited_by names them.
		return append(append(b, budget.RequestsPrefix...), key[len(budget.ReqPrefix):]...)
	}
	return append(b, key...)
}

// lookupKey finds the bucket a name shows: a budget bucket first (as
// RL.RESET resolves a path), else an inline one, else a quota counter.
func (ctx *Ctx) lookupKey(name []byte) (algo engine.Algo, idle int64, ok bool) {
	st := ctx.Env.Service.Store
	for _, sp := range []engine.Space{engine.SpaceBudget, engine.SpaceInline} {
		if algo, idle, ok = st.Inspect(sp, name); ok {
			return
		}
	}
	if len(name) > len(budget.RequestsPrefix) && string(name[:len(budget.RequestsPrefix)]) == budget.RequestsPrefix {
		key := append([]byte(budget.ReqPrefix), name[len(budget.RequestsPrefix):]...)
		if algo, idle, ok = st.Inspect(engine.SpaceBudget, key); ok {
			return
		}
	}
	if len(name) > len(quotaKeyName) && string(name[:len(quotaKeyName)]) == quotaKeyName {
		level := name[len(quotaKeyName):]
		for _, p := range []string{"b|", "i|"} {
			key := append([]byte(p), level...)
			// A committed counter lives until its period ends, whatever
			// this node still holds of it.
			if q := ctx.committed(); q != nil {
				if it, found := q.Quota(string(key)); found && it.End > ctx.Now() {
					return engine.Quota, it.End, true
				}
			}
			if algo, idle, ok = st.Inspect(engine.SpaceQuota, key); ok {
				return
			}
		}
	}
	return 0, 0, false
}

func typeCmd(ctx *Ctx) {
	if ki, ok := ctx.dataKey(ctx.Args[1]); ok {
		ctx.Conn.WriteString(ki.Type.Name())
		return
	}
	if algo, _, ok := ctx.lookupKey(ctx.Args[1]); ok {
		ctx.Conn.WriteString(algo.String())
		return
	}
	ctx.Conn.WriteString("none")
}

// dataKey returns what the keyspace holds under name, where it lives.
func (ctx *Ctx) dataKey(name []byte) (keyspace.KeyInfo, bool) {
	return ctx.Env.Service.DataInfo(ctx.Now(), name, ctx.relayed())
}

func ttlCmd(ctx *Ctx) {
	if ki, ok := ctx.dataKey(ctx.Args[1]); ok {
		// A key of the data commands answers as in Redis: -1 without an
		// expiry, seconds rounded to the nearest.
		switch {
		case ki.TTLMs < 0:
			ctx.Conn.WriteInt(-1)
		case ctx.Cmd.Name == "TTL":
			ctx.Conn.WriteInt64((ki.TTLMs + 500) / 1000)
		default:
			ctx.Conn.WriteInt64(ki.TTLMs)
		}
		return
	}
	_, idle, ok := ctx.lookupKey(ctx.Args[1])
	if !ok {
		ctx.Conn.WriteInt(-2)
		return
	}
	var ms int64
	if now := ctx.Now(); idle > now { // idle may be math.MinInt64: no subtraction below now
		ms = engine.CeilMs(idle - now)
	}
	if ctx.Cmd.Name == "TTL" {
		ctx.Conn.WriteInt64((ms + 999) / 1000)
		return
	}
	ctx.Conn.WriteInt64(ms)
}

// scanCmd is SCAN cursor [MATCH pattern] [COUNT count] [TYPE type].
func scanCmd(ctx *Ctx) {
	a := ctx.Args
	cursor, err := strconv.ParseUint(string(a[1]), 10, 64)
	if err != nil {
		ctx.Conn.WriteError("ERR invalid cursor")
		return
	}
	count := int64(10)
	var l nameList
	for i := 2; i < len(a); i += 2 {
		if i+1 >= len(a) {
			ctx.Conn.WriteError(errSyntax)
			return
		}
		switch v := a[i+1]; {
		case eq(a[i], "MATCH"):
			l.match = v
		case eq(a[i], "COUNT"):
			var e string
			if count, e = intArg(v, "COUNT", 1, 1<<20); e != "" {
				ctx.Conn.WriteError(e)
				return
			}
		case eq(a[i], "TYPE"):
			l.typ = v
		default:
			ctx.Conn.WriteError(errSyntax)
			return
		}
	}
	next := ctx.scanStep(cursor, count, &l)
	c := ctx.Conn
	c.WriteArray(2)
	c.WriteBulkString(strconv.FormatUint(next, 10))
	c.WriteArray(len(l.ends))
	l.each(c.WriteBulk)
}

// keysCmd is KEYS pattern: what a SCAN from 0 to its end with MATCH
// pattern names, in one reply.
func keysCmd(ctx *Ctx) {
	l := nameList{match: ctx.Args[1]}
	for cursor := ctx.scanStep(0, 1<<20, &l); cursor != 0; {
		cursor = ctx.scanStep(cursor, 1<<20, &l)
	}
	ctx.Conn.WriteArray(len(l.ends))
	l.each(ctx.Conn.WriteBulk)
}

// nameList collects the names a SCAN or KEYS keeps: of type typ (a
// bucket's algorithm or a data key's type; nil: any) and matching match
// (nil: any), one after another in buf.
type nameList struct {
	match, typ []byte
	buf        []byte
	ends       []int // where each name ends in buf
}

// add keeps the name build appends, of type typ, if it passes.
func (l *nameList) add(typ string, build func(b []byte) []byte) {
	if l.typ != nil && !eq(l.typ, typ) {
		return
	}
	start := len(l.buf)
	l.buf = build(l.buf)
	if l.match != nil && !glob.All(l.match) && !glob.Match(l.match, l.buf[start:]) {
		l.buf = l.buf[:start]
		return
	}
	l.ends = append(l.ends, len(l.buf))
}

func (l *nameList) each(f func(name []byte)) {
	start := 0
	for _, end := range l.ends {
		f(l.buf[start:end])
		start = end
	}
}

// scanStep walks the keyspace from cursor on, about count keys (COUNT is
// a hint, as in Redis), adds what it visits to l, and returns the cursor
// to go on from: 0 at the end (scanDataPhase says how the cursor reads).
func (ctx *Ctx) scanStep(cursor uint64, count int64, l *nameList) uint64 {
	q := ctx.committed()
	next := cursor
	if next < scanDataPhase {
		next = ctx.Env.Service.Store.Scan(cursor, int(count), func(space engine.Space, key []byte, algo engine.Algo) {
			if space == engine.SpaceQuota && q != nil {
				return // named from the committed counters below
			}
			count--
			l.add(algo.String(), func(b []byte) []byte { return keyName(b, space, key) })
		})
		if next == 0 {
			next = scanDataPhase
		}
	}
	if next >= scanDataPhase && next < scanQuotaPhase {
		part := keyspace.Parts
		if keys := ctx.Env.Service.Keys; keys != nil {
			part = int(min(next-scanDataPhase, keyspace.Parts))
			if count > 0 {
				part = keys.Scan(ctx.Now(), part, int(count), func(k string, t keyspace.Type) {
					count--
					l.add(t.Name(), func(b []byte) []byte { return append(b, k...) })
				})
			}
		}
		next = scanDataPhase + uint64(part)
		if part >= keyspace.Parts {
			next = scanQuotaPhase
		}
	}
	if next >= scanQuotaPhase {
		if q == nil {
			return 0 // no committed counters: the walk is over
		}
		// The committed counters, a whole part at a time, so that the
		// cursor never points inside one.
		now := ctx.Now()
		part := int(min(next-scanQuotaPhase, uint64(raftfsm.QuotaParts)))
		for ; part < raftfsm.QuotaParts && count > 0; part++ {
			q.ScanQuotas(part, func(it raftfsm.QuotaItem) {
				if it.End > now {
					count--
					l.add(engine.Quota.String(), func(b []byte) []byte { return keyName(b, engine.SpaceQuota, []byte(it.Key)) })
				}
			})
		}
		next = scanQuotaPhase + uint64(part)
		if part >= raftfsm.QuotaParts {
			next = 0
		}
	}
	return next
}
