package commands

import (
	"encoding/binary"
	"sync"

	"github.com/sluice-rl/sluice/engine"
)

// Peers records when each peer's consumption last arrived, for the sync
// lag of RL.CLUSTER INFO and sluice_sync_lag_seconds.
type Peers struct {
	mu   sync.Mutex
	last map[string]int64 // peer id → unix ns of its last sync message
}

// Heard notes a sync message from peer id at now.
func (p *Peers) Heard(id string, now int64) {
	p.mu.Lock()
	if p.last == nil {
		p.last = map[string]int64{}
	}
	p.last[id] = now
	p.mu.Unlock()
}

// Lag returns, over the given peers, the longest time since one was heard
// from (a peer never heard from counts from since), or -1 with no peers.
func (p *Peers) Lag(peers []string, since, now int64) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	lag := int64(-1)
	for _, id := range peers {
		t, ok := p.last[id]
		if !ok {
			t = since
		}
		lag = max(lag, now-t)
	}
	return lag
}

func syncCommands() []*Command {
	return []*Command{
		{Name: "RL.SYNC", Arity: 3, Flags: FlagAdmin, Handler: syncCmd,
			Summary: "Internal: a peer's consumption since its last message, applied to the local buckets.",
			Syntax:  "from-node-id payload"},
		{Name: "RL.LEASE", Arity: -3, Flags: FlagAdmin, Handler: leaseCmd,
			Summary: "Internal: a peer asks this node, the owner of some buckets, for tokens (or gives unused ones back).",
			Syntax:  "from-node-id [RETURN] payload"},
	}
}

// syncCmd applies a peer's consumption. Each bucket may go into debt by up
// to one burst per peer, enough for the cluster to absorb every node
// spending its full burst at once.
func syncCmd(ctx *Ctx) {
	if !fromPeer(ctx, ctx.Args[1]) {
		return
	}
	from := string(ctx.Args[1])
	st := ctx.Env.Cluster.State()
	if _, ok := st.Members[from]; !ok {
		ctx.Conn.WriteError("ERR RL.SYNC from '" + printable(ctx.Args[1], 64) + "', which is not a member")
		return
	}
	peers := int64(max(len(st.Members)-1, 1))
	now := ctx.Env.Clock()
	n := 0
	err := engine.DecodeDeltas(ctx.Args[2], func(space engine.Space, key []byte, lim *engine.Limit, delta int64) {
		ctx.Env.Store.Consume(now, space, key, lim, delta, peers*lim.Burst)
		n++
	})
	ctx.Env.Peers.Heard(from, now)
	if err != nil {
		ctx.Conn.WriteError("ERR RL.SYNC payload: " + err.Error())
		return
	}
	ctx.Conn.WriteInt(n)
}

// leaseCmd is the owner's side of the token leases: for each bucket asked
// for, it charges the credit the peer spent, takes up to the tokens wanted
// from its own bucket and answers,
// in order, how many it granted, for how long (ns) they may be used,
// when none, in how many ns to ask again, and how many it kept. With RETURN it takes back tokens
// of expired leases.
func leaseCmd(ctx *Ctx) {
	if !fromPeer(ctx, ctx.Args[1]) {
		return
	}
	a := ctx.Args
	from := string(a[1])
	if _, ok := ctx.Env.Cluster.State().Members[from]; !ok {
		ctx.Conn.WriteError("ERR RL.LEASE from '" + printable(a[1], 64) + "', which is not a member")
		return
	}
	ret := len(a) == 4 && eq(a[2], "RETURN")
	if len(a) != 3 && !ret {
		ctx.Conn.WriteError(errSyntax)
		return
	}
	now := ctx.Env.Clock()
	if ret {
		n := 0
		err := engine.DecodeDeltas(a[3], func(space engine.Space, key []byte, lim *engine.Limit, tokens int64) {
			ctx.Env.Store.Return(now, space, key, lim, tokens)
			n++
		})
		if err != nil {
			ctx.Conn.WriteError("ERR RL.LEASE payload: " + err.Error())
			return
		}
		ctx.Conn.WriteInt(n)
		return
	}
	var out []byte
	err := engine.DecodeWants(a[2], func(space engine.Space, key []byte, lim *engine.Limit, tokens, owed int64) {
		got, expires, retry, left := ctx.Env.Store.Take(now, engine.Request{Space: space, Key: key, Limit: lim, Cost: tokens}, owed)
		ttl := int64(0)
		if got > 0 {
			ttl = max(expires-now, 0)
		}
		out = binary.AppendUvarint(out, uint64(got))
		out = binary.AppendUvarint(out, uint64(ttl))
		out = binary.AppendUvarint(out, uint64(max(retry, 0)))
		out = binary.AppendUvarint(out, uint64(max(left, 0)))
	})
	if err != nil {
		ctx.Conn.WriteError("ERR RL.LEASE payload: " + err.Error())
		return
	}
	ctx.Conn.WriteBulk(out)
}
