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
// not at full capacity, as DBSIZE counts them.

func keyCommands() []*Command {
	return []*Command{
		{Name: "SCAN", Arity: -2, Flags: FlagReadOnly, Handler: scanCmd,
			Summary: "Iterate over the live buckets.", Syntax: "cursor [MATCH pattern] [COUNT count] [TYPE type]"},
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

// scanQuotaPhase marks a SCAN cursor that has gone through the store and
// is in the committed quota counters: the low bits are the next part.
// Store cursors stay far below it (a shard number under 2^12, shifted by
// 32).
const scanQuotaPhase = 1 << 62

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
	var match, typ []byte
	for i := 2; i < len(a); i += 2 {
		if i+1 >= len(a) {
			ctx.Conn.WriteError(errSyntax)
			return
		}
		switch v := a[i+1]; {
		case eq(a[i], "MATCH"):
			match = v
		case eq(a[i], "COUNT"):
			var e string
			if count, e = intArg(v, "COUNT", 1, 1<<20); e != "" {
				ctx.Conn.WriteError(e)
				return
			}
		case eq(a[i], "TYPE"):
			typ = v
		default:
			ctx.Conn.WriteError(errSyntax)
			return
		}
	}
	var names [][]byte
	var buf []byte
	add := func(space engine.Space, key []byte, algo engine.Algo) {
		if typ != nil && !eq(typ, algo.String()) {
			return
		}
		start := len(buf)
		buf = keyName(buf, space, key)
		name := buf[start:len(buf):len(buf)]
		if match != nil && !glob.All(match) && !glob.Match(match, name) {
			buf = buf[:start]
			return
		}
		names = append(names, name)
	}
	q := ctx.committed()
	next := cursor
	if cursor < scanQuotaPhase {
		next = ctx.Env.Service.Store.Scan(cursor, int(count), func(space engine.Space, key []byte, algo engine.Algo) {
			if space == engine.SpaceQuota && q != nil {
				return // named from the committed counters below
			}
			count--
			add(space, key, algo)
		})
		if next == 0 && q != nil {
			next = scanQuotaPhase
		}
	}
	if next >= scanQuotaPhase {
		// The committed counters, a whole part at a time (COUNT is a
		// hint, as in Redis), so that the cursor never points inside one.
		now := ctx.Now()
		part := int(next - scanQuotaPhase)
		for ; part < raftfsm.QuotaParts && count > 0; part++ {
			q.ScanQuotas(part, func(it raftfsm.QuotaItem) {
				if it.End > now {
					count--
					add(engine.SpaceQuota, []byte(it.Key), engine.Quota)
				}
			})
		}
		next = scanQuotaPhase + uint64(part)
		if part >= raftfsm.QuotaParts {
			next = 0
		}
	}
	// names alias buf, which may have moved as it grew: rebuild the slices.
	if len(names) > 0 {
		off := 0
		for i, n := range names {
			names[i] = buf[off : off+len(n)]
			off += len(n)
		}
	}
	c := ctx.Conn
	c.WriteArray(2)
	c.WriteBulkString(strconv.FormatUint(next, 10))
	c.WriteArray(len(names))
	for _, n := range names {
		c.WriteBulk(n)
	}
}
