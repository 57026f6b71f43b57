package commands

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/sluice-rl/sluice/budget"
	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/raftfsm"
)

func quotaCommands() []*Command {
	return []*Command{
		{Name: "RL.QUOTA", Arity: -2, Flags: 0, FirstKey: 1, Handler: quotaCmd,
			Summary: "Report a calendar quota (the tightest a call counts against), or forget one.",
			Syntax:  "key|path [KEY subject] [QUOTA n PER period [TZ zone]] | RESET key|path [KEY subject] [QUOTA n PER period [TZ zone]]"},
		{Name: "RL.QUOTASYNC", Arity: 3, Flags: FlagAdmin, Handler: quotaSyncCmd,
			Summary: "Internal: commit a node's batch of quota counts through Raft.",
			Syntax:  "from-node-id payload"},
	}
}

// quotaTarget is what RL.QUOTA addresses: an inline key's quota or the
// quotas of a budget call.
type quotaTarget struct {
	la     limitArgs
	budget bool
	key    string // inline: the counter key
}

// parseQuotaTarget parses key|path [KEY subject] [QUOTA …]. For an
// inline key without QUOTA, the period and limit are the ones the cluster
// last committed for it.
func (ctx *Ctx) parseQuotaTarget(args [][]byte) (qt quotaTarget, ok bool) {
	la, e := parseLimitArgs(args, optSubject|optQuota)
	if e != "" {
		ctx.Conn.WriteError(e)
		return qt, false
	}
	if !ctx.checkKey(la.target) {
		return qt, false
	}
	qt.la = la
	if !la.hasQuota && budgetTarget(ctx, la.target) {
		qt.budget = true
		return qt, true
	}
	if la.subject != nil {
		ctx.Conn.WriteError("NOBUDGET no budget node on path '" + printable(la.target, 256) + "'; KEY applies to budget paths only")
		return qt, false
	}
	qt.key = inlineQuotaPrefix + string(la.target)
	if la.hasQuota {
		return qt, true
	}
	if ctx.Env.Quotas != nil {
		if it, found := ctx.Env.Quotas.Quota(qt.key); found {
			name, zone, _ := strings.Cut(it.Period, " ")
			if p, err := budget.ParsePeriod(name, zone); err == nil && it.Limit > 0 {
				qt.la.hasQuota, qt.la.quota, qt.la.period = true, it.Limit, p
				return qt, true
			}
		}
	}
	ctx.Conn.WriteError("ERR no quota known for '" + printable(la.target, 256) +
		"': not a budget path, and no inline quota committed for that key; give QUOTA n PER period to describe one")
	return qt, false
}

func quotaCmd(ctx *Ctx) {
	a := ctx.Args
	if eq(a[1], "RESET") && len(a) >= 3 {
		quotaReset(ctx)
		return
	}
	qt, ok := ctx.parseQuotaTarget(a)
	if !ok {
		return
	}
	now := ctx.Now()
	var st budget.QuotaStatus
	if qt.budget {
		tree := ctx.Env.Cluster.State().Tree
		call := budget.Call{Path: qt.la.target, Subject: qt.la.subject, Quotas: ctx.Env}
		found, err := false, error(nil)
		if st, found, err = tree.Quota(ctx.Env.Store, now, &call, &ctx.S.scratch); err != nil {
			ctx.Conn.WriteError(err.Error())
			return
		} else if !found {
			ctx.Conn.WriteError("ERR no quota applies to '" + printable(qt.la.target, 256) + "': neither the node nor a level it charges has one")
			return
		}
	} else {
		qlim := qt.la.quotaLimit()
		r := ctx.inlineQuota(&qt.la, &qlim, now, 0)
		st = budget.QuotaStatus{Level: qt.la.target, Limit: qlim.Burst, Period: qt.la.period, Start: r.PeriodStart, End: r.PeriodEnd,
			Used: ctx.Env.Store.QuotaUsed(&r)}
	}
	c := ctx.Conn
	ctx.WriteMap(7)
	c.WriteBulkString("level")
	c.WriteBulk(st.Level)
	c.WriteBulkString("limit")
	c.WriteInt64(st.Limit)
	c.WriteBulkString("used")
	c.WriteInt64(st.Used)
	c.WriteBulkString("remaining")
	c.WriteInt64(max(st.Limit-st.Used, 0))
	c.WriteBulkString("period")
	c.WriteBulkString(st.Period.String())
	c.WriteBulkString("resets_at")
	c.WriteInt64(st.End / 1e9)
	c.WriteBulkString("reset_after_ms")
	c.WriteInt64(engine.CeilMs(st.End - now))
}

// quotaReset forgets the counters of a quota target, cluster-wide: one
// Raft entry; every node drops its uncommitted count as it applies it.
func quotaReset(ctx *Ctx) {
	if !adminRole(ctx) {
		return
	}
	qt, ok := ctx.parseQuotaTarget(ctx.Args[1:])
	if !ok {
		return
	}
	keys := []string{qt.key}
	if qt.budget {
		var err error
		tree := ctx.Env.Cluster.State().Tree
		if keys, err = tree.QuotaKeys(&budget.Call{Path: qt.la.target, Subject: qt.la.subject}, &ctx.S.scratch); err != nil {
			ctx.Conn.WriteError(err.Error())
			return
		}
		if len(keys) == 0 {
			ctx.Conn.WriteError("ERR no quota applies to '" + printable(qt.la.target, 256) + "': the node has none")
			return
		}
	}
	// A counter known only here (not yet committed) counts as existing;
	// every node forgets its own as it applies the entry.
	local := false
	for _, k := range keys {
		_, found := ctx.Env.Store.Limit(engine.SpaceQuota, []byte(k))
		local = local || found
	}
	e := raftfsm.Entry{Type: raftfsm.QuotaReset, Now: ctx.Env.Clock()}
	for _, k := range keys {
		e.Keys = append(e.Keys, raftfsm.QuotaKey(k))
	}
	ctx.write(&e, func(r raftfsm.Response) {
		if r.N > 0 || local {
			ctx.Conn.WriteInt(1)
		} else {
			ctx.Conn.WriteInt(0)
		}
	})
}

// QuotaBatch is the payload of RL.QUOTASYNC: one node's uncommitted quota
// counts, numbered so that a retry is counted once.
type QuotaBatch struct {
	Seq    uint64              `json:"seq"`
	Now    int64               `json:"now"`
	Quotas []raftfsm.QuotaItem `json:"quotas"`
}

// maxQuotaSkew is how far ahead of this node's clock a quota batch may be
// stamped: clocks of nodes differ, by far less.
const maxQuotaSkew = time.Hour

func quotaSyncCmd(ctx *Ctx) {
	if !fromPeer(ctx, ctx.Args[1]) {
		return
	}
	from := string(ctx.Args[1])
	if _, ok := ctx.Env.Cluster.State().Members[from]; !ok {
		ctx.Conn.WriteError("ERR RL.QUOTASYNC from '" + printable(ctx.Args[1], 64) + "', which is not a member")
		return
	}
	var b QuotaBatch
	if err := json.Unmarshal(ctx.Args[2], &b); err != nil || b.Seq == 0 || len(b.Quotas) == 0 {
		ctx.Conn.WriteError("ERR RL.QUOTASYNC payload: not a batch of quota counts")
		return
	}
	// Batch numbers are the sender's wall clock in ns, batch times its
	// service clock. One from the future would make every later batch of
	// that node look already counted (or purge counters early): refuse
	// it, whoever sends it.
	if horizon := max(ctx.Env.Clock(), time.Now().UnixNano()) + int64(maxQuotaSkew); b.Seq > uint64(horizon) || b.Now > horizon {
		ctx.Conn.WriteError("ERR RL.QUOTASYNC payload: batch number or time more than an hour ahead of this node's clock")
		return
	}
	e := raftfsm.Entry{Type: raftfsm.QuotaAdd, Origin: from, Seq: b.Seq, Now: b.Now, Quotas: b.Quotas}
	ctx.write(&e, func(r raftfsm.Response) { ctx.Conn.WriteInt(r.N) })
}
