package commands

import (
	"strconv"
	"time"
)

func slotCommands() []*Command {
	return []*Command{
		{Name: "RL.SLOT", Arity: -4, Flags: FlagAdmin | FlagPeer, Handler: slotCmd,
			Summary: "Internal: what the node deciding a key's concurrency slots tells, or asks, the other members.",
			Syntax:  "from-node-id COPY key id ttl-ns | HOLDS view key | ENDED id [id ...] | RENEWED id ttl-ns"},
	}
}

// maxSlotTTLNs bounds the TTL a copy of a hold carries: a reservation's.
const maxSlotTTLNs = MaxReserveTTLMs * int64(time.Millisecond)

// slotCmd is the receiving side of limiter's slots (limiter/slots.go): a
// copy of a hold the sender granted (COPY), the holds of a key the sender
// is to decide (HOLDS: an array of id, ns left, …), holds that ended
// (ENDED) and a renewed one (RENEWED).
func slotCmd(ctx *Ctx) {
	if !fromPeer(ctx, ctx.Args[1]) {
		return
	}
	a, from, svc := ctx.Args, string(ctx.Args[1]), ctx.Env.Service
	var err error
	switch {
	case eq(a[2], "COPY") && len(a) == 6:
		ttl, e := intArg(a[5], "ttl-ns", 1, maxSlotTTLNs)
		if e != "" {
			ctx.Conn.WriteError(e)
			return
		}
		if err = svc.SlotCopy(from, string(a[3]), string(a[4]), ttl); err == nil {
			ctx.Conn.WriteString("OK")
			return
		}
	case eq(a[2], "HOLDS") && len(a) == 5:
		view, e := strconv.ParseUint(string(a[3]), 10, 64)
		if e != nil {
			ctx.Conn.WriteError(errPrefix + "view must be an unsigned integer")
			return
		}
		cs, err := svc.SlotHolds(from, view, string(a[4]))
		if err != nil {
			peerFailed(ctx, err)
			return
		}
		ctx.Conn.WriteArray(2 * len(cs))
		for _, c := range cs {
			ctx.Conn.WriteBulkString(c.ID)
			ctx.Conn.WriteBulkString(strconv.FormatInt(c.Expires, 10))
		}
		return
	case eq(a[2], "ENDED"):
		ids := make([]string, 0, len(a)-3)
		for _, id := range a[3:] {
			ids = append(ids, string(id))
		}
		if err = svc.SlotsEnded(from, ids); err == nil {
			ctx.Conn.WriteInt(len(ids))
			return
		}
	case eq(a[2], "RENEWED") && len(a) == 5:
		ttl, e := intArg(a[4], "ttl-ns", 1, maxSlotTTLNs)
		if e != "" {
			ctx.Conn.WriteError(e)
			return
		}
		if err = svc.SlotRenewed(from, string(a[3]), ttl); err == nil {
			ctx.Conn.WriteString("OK")
			return
		}
	default:
		ctx.Conn.WriteError(errSyntax)
		return
	}
	peerFailed(ctx, err)
}
