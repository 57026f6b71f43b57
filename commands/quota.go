package commands

import (
	"github.com/sluice-rl/sluice/budget"
	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/limiter"
	"github.com/sluice-rl/sluice/quota"
)

func quotaCommands() []*Command {
	return []*Command{
		{Name: "RL.QUOTA", Arity: -2, Flags: 0, FirstKey: 1, Handler: quotaCmd,
			Summary: "Report a calendar quota (the tightest a call counts against), list the cluster's counters, set one's count or forget one.",
			Syntax:  "key|path [KEY subject] [QUOTA n PER period [TZ zone]] | LIST [prefix] [AFTER level] [COUNT n] | SET key|path [KEY subject] [QUOTA n PER period [TZ zone]] USED n | RESET key|path [KEY subject] [QUOTA n PER period [TZ zone]]"},
	}
}

// quotaCall parses key|path [KEY subject] [QUOTA …] into a call, or
// replies with the error.
func (ctx *Ctx) quotaCall(args [][]byte, spec *quota.Spec) (budget.Call, bool) {
	la, e := parseLimitArgs(args, optSubject|optQuota)
	if e != "" {
		ctx.Conn.WriteError(e)
		return budget.Call{}, false
	}
	if !ctx.checkKey(la.target) {
		return budget.Call{}, false
	}
	return la.call(nil, spec), true
}

func quotaCmd(ctx *Ctx) {
	a := ctx.Args
	switch {
	case eq(a[1], "RESET") && len(a) >= 3:
		quotaReset(ctx)
		return
	case eq(a[1], "LIST"):
		quotaList(ctx)
		return
	case eq(a[1], "SET") && len(a) >= 3:
		quotaSet(ctx)
		return
	}
	call, ok := ctx.quotaCall(a, &ctx.S.spec)
	if !ok {
		return
	}
	st, err := ctx.Env.Service.Quota(&call, &ctx.S.scratch)
	if err != nil {
		ctx.Conn.WriteError(err.Error())
		return
	}
	now := ctx.Now()
	c := ctx.Conn
	ctx.WriteMap(7)
	c.WriteBulkString("level")
	c.WriteBulk(st.Level)
	c.WriteBulkString("limit")
	c.WriteInt64(st.Limit)
	c.WriteBulkString("used")
	c.WriteInt64(st.Used)
	c.WriteBulkString("remaining")
	c.WriteInt64(st.Remaining())
	c.WriteBulkString("period")
	c.WriteBulkString(st.Period.String())
	c.WriteBulkString("resets_at")
	c.WriteInt64(st.End / 1e9)
	c.WriteBulkString("reset_after_ms")
	c.WriteInt64(engine.CeilMs(st.End - now))
}

// quotaReset forgets the counters of a quota target, cluster-wide.
func quotaReset(ctx *Ctx) {
	if !adminRole(ctx) {
		return
	}
	call, ok := ctx.quotaCall(ctx.Args[1:], &ctx.S.spec)
	if !ok {
		return
	}
	found, err := ctx.Env.Service.QuotaReset(&call, &ctx.S.scratch)
	ctx.writeBool(found, err)
}

// quotaList lists the cluster's committed quota counters, a page at a
// time: RL.QUOTA LIST [prefix] [AFTER level] [COUNT n].
func quotaList(ctx *Ctx) {
	u, e := parseUsageArgs(ctx.Args[1:], false)
	if e != "" {
		ctx.Conn.WriteError(e)
		return
	}
	list, next, err := ctx.Env.Service.QuotaList(u.prefix, u.after, u.count)
	if err != nil {
		ctx.Conn.WriteError(err.Error())
		return
	}
	now := ctx.Now()
	c := ctx.Conn
	ctx.WriteMap(2)
	c.WriteBulkString("counters")
	c.WriteArray(len(list))
	for i := range list {
		writePairs(ctx, QuotaCounterFields(&list[i], now))
	}
	c.WriteBulkString("next")
	c.WriteBulkString(next)
}

// QuotaCounterFields are the fields RL.QUOTA LIST reports for a counter.
func QuotaCounterFields(q *limiter.QuotaCounter, now int64) []Field {
	kind := "budget"
	if q.Inline {
		kind = "inline"
	}
	return []Field{strF("level", q.Level), strF("kind", kind), intF("limit", q.Limit), intF("used", q.Used),
		intF("remaining", max(q.Limit-q.Used, 0)), strF("period", q.Period), intF("resets_at", q.End/1e9),
		intF("reset_after_ms", max(engine.CeilMs(q.End-now), 0))}
}

// MaxQuotaUsed bounds RL.QUOTA SET's USED.
const MaxQuotaUsed = engine.MaxRate

// quotaSet sets the count of a quota target's counters, cluster-wide.
func quotaSet(ctx *Ctx) {
	if !adminRole(ctx) {
		return
	}
	a := ctx.Args
	if len(a) < 5 || !eq(a[len(a)-2], "USED") {
		ctx.Conn.WriteError("ERR syntax error: RL.QUOTA SET key|path [KEY subject] USED n")
		return
	}
	used, e := intArg(a[len(a)-1], "USED", 0, int64(MaxQuotaUsed))
	if e != "" {
		ctx.Conn.WriteError(e)
		return
	}
	call, ok := ctx.quotaCall(a[1:len(a)-2], &ctx.S.spec)
	if !ok {
		return
	}
	n, err := ctx.Env.Service.QuotaSet(&call, used, &ctx.S.scratch)
	if err != nil {
		ctx.Conn.WriteError(err.Error())
		return
	}
	ctx.Conn.WriteInt(n)
}
