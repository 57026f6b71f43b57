package commands

import (
	"strings"
	"time"

	"github.com/sluice-rl/sluice/budget"
	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/fault"
	"github.com/sluice-rl/sluice/limiter"
	"github.com/sluice-rl/sluice/raftfsm"
	"github.com/sluice-rl/sluice/reserve"
)

// MaxReserveTTLMs bounds a reservation's TTL (and RL.RENEW's): an hour,
// so that an abandoned reservation holds its tokens and slot no longer.
const MaxReserveTTLMs = 3_600_000

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
	var out limiter.Outcome
	var id string
	var err error
	// A decision chosen here while another member took the key's slots
	// over (reserve.ErrMoved) is chosen again: a few times at most, as a
	// takeover happens once per key and member list.
	for try := 0; ; try++ {
		if ctx.relayToSlotOwner(&call, o, la.waitMs) {
			return
		}
		out, id, err = ctx.Env.Service.Reservation(&call, o, &ctx.S.scratch, ctx.watcher())
		if err != reserve.ErrMoved || try == 3 {
			break
		}
	}
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
	if ctx.relayToIssuer() {
		return
	}
	out, err := ctx.Env.Service.Settle(string(ctx.Args[1]), n)
	ctx.reply(&out, err)
}

func releaseCmd(ctx *Ctx) {
	if ctx.relayToIssuer() {
		return
	}
	ok, err := ctx.Env.Service.Release(string(ctx.Args[1]))
	ctx.writeBool(ok, err)
}

func renewCmd(ctx *Ctx) {
	if !eq(ctx.Args[2], "TTL") {
		ctx.Conn.WriteError("ERR syntax error: RL.RENEW id TTL ms")
		return
	}
	ms, e := intArg(ctx.Args[3], "TTL", 1, MaxReserveTTLMs)
	if e != "" {
		ctx.Conn.WriteError(e)
		return
	}
	if ctx.relayToIssuer() {
		return
	}
	ok, err := ctx.Env.Service.Renew(string(ctx.Args[1]), ms*int64(time.Millisecond))
	ctx.writeBool(ok, err)
}

// relayToIssuer sends RL.SETTLE, RL.RELEASE or RL.RENEW of a reservation
// another node issued to that node, and writes its reply: an id is valid
// on every node. It returns false, having replied nothing, for an id of
// this node's (or one that is no id at all: the store answers it). A
// command relayed here by another node is not relayed again.
func (ctx *Ctx) relayToIssuer() bool {
	if strings.HasPrefix(ctx.S.Name(), raftfsm.ForwardPrefix) {
		return false
	}
	raw, relayed, err := RelayToIssuer(ctx.Env.Cluster, ctx.Args)
	switch {
	case !relayed:
		return false
	case err != nil:
		ctx.Conn.WriteError(err.Error())
	default:
		ctx.writeRelayed(raw)
	}
	return true
}

// RelayToIssuer sends a reservation command (args[1] is the id) to the
// member that issued the id, over the nodes' own connections, and returns
// its raw RESP reply. relayed is false, with nothing sent, when this node
// issued the id, when it is no id at all, or with no cluster: the local
// store answers. An id of a node that is not a member is NORESERVATION;
// an issuer that does not answer within --apply-timeout is TRYAGAIN.
// RESP and HTTP both relay through it.
func RelayToIssuer(cl Cluster, args [][]byte) (raw []byte, relayed bool, err error) {
	id := args[1]
	node, ok := reserve.IssuedBy(string(id))
	if !ok || cl == nil || node == cl.ID() {
		return nil, false, nil
	}
	m, known := cl.State().Members[node]
	if !known || m.RespAddr == "" {
		return nil, true, fault.New("NORESERVATION", "reservation '%s' was issued by node '%s', which is not a member of this cluster",
			fault.Printable(id), fault.Printable([]byte(node)))
	}
	raw, err = cl.RelayTo(m.RespAddr, args, 0)
	if err != nil {
		return nil, true, fault.New("TRYAGAIN", "reservation '%s' lives on node '%s' (%s), which did not answer: %v",
			fault.Printable(id), fault.Printable([]byte(node)), m.RespAddr, err)
	}
	return raw, true, nil
}

// slotRelayTimeout bounds how long a reservation waits for the member
// that decides its concurrency slots, beyond its own WAIT: that member
// answers from memory, after asking the others once per key and member
// list (a second at most each), so three seconds is long; one that does
// not answer is skipped for limiter.SlotOwnerPause, and the next member of
// the key's ranking decides meanwhile.
const slotRelayTimeout = 3 * time.Second

// relayToSlotOwner sends RL.RESERVE to the member that decides the
// concurrency slots of its key (limiter.Service.SlotOwner), when another
// member does, and writes its reply (its id names that member, so
// RL.SETTLE finds it from any node): a concurrency limit then holds across
// the cluster. A member that does not answer is marked unreachable and the
// next one of the key's ranking is asked. It returns false, having
// replied nothing, when this node decides: no slot to take, this node
// first of the members it can reach in the key's ranking. A reservation
// relayed here is relayed on the same way — only ever to a member ranked
// above this one, so never in a loop.
func (ctx *Ctx) relayToSlotOwner(call *limiter.Call, o limiter.ReserveOpts, waitMs int64) bool {
	cl := ctx.Env.Cluster
	if cl == nil {
		return false
	}
	svc := ctx.Env.Service
	for {
		owner, err := svc.SlotOwner(call, o, &ctx.S.scratch)
		if err != nil {
			ctx.Conn.WriteError(err.Error())
			return true
		}
		if owner == "" {
			return false
		}
		m, known := cl.State().Members[owner]
		if !known || m.RespAddr == "" {
			svc.SlotOwnerUnreachable(owner, svc.Clock())
			continue
		}
		raw, err := cl.RelayTo(m.RespAddr, ctx.Args, slotRelayTimeout+time.Duration(waitMs)*time.Millisecond)
		if err != nil {
			svc.SlotOwnerUnreachable(owner, svc.Clock())
			continue
		}
		ctx.writeRelayed(raw)
		return true
	}
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
