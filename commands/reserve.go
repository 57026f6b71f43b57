package commands

import (
	"time"

	"github.com/sluice-rl/sluice/bounds"
	"github.com/sluice-rl/sluice/budget"
	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/limiter"
)

// MaxReserveTTLMs bounds a reservation's TTL (and RL.RENEW's).
const MaxReserveTTLMs = bounds.MaxTTLMs

func reserveCommands() []*Command {
	return []*Command{
		{Name: "RL.RESERVE", Arity: -2, Flags: 0, FirstKey: 1, Handler: reserveCmd,
			Summary: "Admit an estimated cost now and hold it under an id until RL.SETTLE, RL.RELEASE or its TTL.",
			Syntax:  "key [RATE n [PER unit] [BURST n] [ALGO name]] [QUOTA n PER period [TZ zone]] [CONCURRENCY n] COST estimate [TTL ms] [WAIT ms] | path [KEY subject] COST estimate [TTL ms] [WAIT ms]"},
		{Name: "RL.SETTLE", Arity: 4, Flags: 0, Handler: settleCmd,
			Summary: "Charge a reservation's real cost: give back or charge the difference from its estimate, never refused.",
			Syntax:  "id ACTUAL n"},
		{Name: "RL.RELEASE", Arity: 2, Flags: FlagFast, Handler: releaseCmd,
			Summary: "Give a reservation's whole estimate back: the work did not happen.",
			Syntax:  "id"},
		{Name: "RL.RENEW", Arity: 4, Flags: FlagFast, Handler: renewCmd,
			Summary: "Make a reservation expire TTL ms from now.",
			Syntax:  "id TTL ms"},
	}
}

// errKeyConcurrency refuses KEY with CONCURRENCY (budget.CheckSubject).
var errKeyConcurrency = budget.SubjectInline("KEY", "CONCURRENCY n makes the call inline (a budget node's limit is its concurrency)").Error()

func reserveCmd(ctx *Ctx) {
	la, e := parseLimitArgs(ctx.Args, optLimit|optCost|optWait|optSubject|optReserve)
	switch {
	case e != "":
	case !la.hasCost:
		e = "ERR COST is required: RL.RESERVE key|path … COST estimate"
	case budget.CheckSubject(la.concurrency > 0, la.subject) != nil:
		e = errKeyConcurrency
	case la.hasRate:
		ctx.S.lim, e = la.limit()
	}
	if e != "" {
		ctx.Conn.WriteError(e)
		return
	}
	if !ctx.checkKey(la.target) {
		return
	}
	var rate *engine.Limit
	if la.hasRate {
		rate = &ctx.S.lim
	}
	call := la.call(rate, &ctx.S.spec)
	call.Now = ctx.Now()
	o := limiter.ReserveOpts{TTL: la.ttlMs * int64(time.Millisecond), Concurrency: la.concurrency}
	out, id, err := ctx.Env.Service.Reservation(&call, o, &ctx.S.scratch, ctx.watcher())
	if err != nil {
		ctx.Conn.WriteError(err.Error())
		return
	}
	ctx.Conn.WriteArray(7)
	writeFields(ctx, out.Allowed, &out.Result, out.LimitedBy)
	ctx.Conn.WriteBulkString(id)
}

func settleCmd(ctx *Ctx) {
	if !eq(ctx.Args[2], "ACTUAL") {
		ctx.Conn.WriteError("ERR syntax error: RL.SETTLE id ACTUAL n")
		return
	}
	n, e := intArg(ctx.Args[3], "ACTUAL", 0, engine.MaxCost)
	if e != "" {
		ctx.Conn.WriteError(e)
		return
	}
	out, err := ctx.Env.Service.Settle(string(ctx.Args[1]), n)
	ctx.reply(&out, err)
}

func releaseCmd(ctx *Ctx) {
	ok, err := ctx.Env.Service.Release(string(ctx.Args[1]))
	ctx.writeBool(ok, err)
}

func renewCmd(ctx *Ctx) {
	if !eq(ctx.Args[2], "TTL") {
		ctx.Conn.WriteError("ERR syntax error: RL.RENEW id TTL ms")
		return
	}
	ms, e := boundArg(ctx.Args[3], "TTL", bounds.TTL)
	if e != "" {
		ctx.Conn.WriteError(e)
		return
	}
	ok, err := ctx.Env.Service.Renew(string(ctx.Args[1]), ms*int64(time.Millisecond))
	ctx.writeBool(ok, err)
}

// writeBool replies :1 or :0, or the error.
func (ctx *Ctx) writeBool(ok bool, err error) {
	switch {
	case err != nil:
		ctx.Conn.WriteError(err.Error())
	case ok:
		ctx.Conn.WriteInt(1)
	default:
		ctx.Conn.WriteInt(0)
	}
}
