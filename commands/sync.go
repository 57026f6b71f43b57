package commands

import (
	"errors"

	"github.com/sluice-rl/sluice/limiter"
)

func syncCommands() []*Command {
	return []*Command{
		{Name: "RL.SYNC", Arity: 3, Flags: FlagAdmin | FlagPeer, Handler: syncCmd,
			Summary: "Internal: a peer's consumption since its last message, applied to the local buckets.",
			Syntax:  "from-node-id payload"},
		{Name: "RL.LEASE", Arity: -3, Flags: FlagAdmin | FlagPeer, Handler: leaseCmd,
			Summary: "Internal: a peer asks this node, the owner of some buckets, for tokens (or gives unused ones back).",
			Syntax:  "from-node-id [RETURN] payload"},
	}
}

// syncCmd applies a peer's consumption (limiter.Service.ApplySync).
func syncCmd(ctx *Ctx) {
	if !fromPeer(ctx, ctx.Args[1]) {
		return
	}
	n, err := ctx.Env.Service.ApplySync(string(ctx.Args[1]), ctx.Args[2])
	if err != nil {
		peerFailed(ctx, err)
		return
	}
	ctx.Conn.WriteInt(n)
}

// leaseCmd is the owner's side of the token leases
// (limiter.Service.Lease): it answers the grants as one bulk string. With
// RETURN it takes back tokens of expired leases (ReturnLease).
func leaseCmd(ctx *Ctx) {
	if !fromPeer(ctx, ctx.Args[1]) {
		return
	}
	a := ctx.Args
	from := string(a[1])
	svc := ctx.Env.Service
	if !svc.IsMember(from) {
		peerFailed(ctx, &limiter.PeerError{From: from})
		return
	}
	ret := len(a) == 4 && eq(a[2], "RETURN")
	if len(a) != 3 && !ret {
		ctx.Conn.WriteError(errSyntax)
		return
	}
	if ret {
		n, err := svc.ReturnLease(from, a[3])
		if err != nil {
			peerFailed(ctx, err)
			return
		}
		ctx.Conn.WriteInt(n)
		return
	}
	out, err := svc.Lease(from, a[2])
	if err != nil {
		peerFailed(ctx, err)
		return
	}
	ctx.Conn.WriteBulk(out)
}

// peerFailed replies with a peer operation's error; a refusal of the
// limiter's (not a member, a bad payload) is named after the command.
func peerFailed(ctx *Ctx, err error) {
	var pe *limiter.PeerError
	if errors.As(err, &pe) {
		ctx.Conn.WriteError("ERR " + ctx.Cmd.Name + " " + pe.Error())
		return
	}
	ctx.Conn.WriteError(err.Error())
}
