package commands

import "github.com/sluice-rl/sluice/keyspace"

// The data commands: Redis's strings, integer counters, hashes, lists and
// sorted sets with their expiry (package keyspace), so that rate-limit
// libraries written for Redis run unchanged. Each runs where its keys
// live (limiter.Service.Data) and answers as Redis does; a RESP3 client
// gets scores as doubles (keyspace.Spec.RESP3), whichever node answered.

func dataCommands() []*Command {
	var out []*Command
	for _, sp := range keyspace.Specs() {
		if sp.ScriptOnly {
			continue // the server's own TYPE, TTL and PTTL answer clients
		}
		flags := FlagFast
		if !sp.Write {
			flags |= FlagReadOnly
		}
		out = append(out, &Command{Name: sp.Name, Arity: sp.Arity, Flags: flags, FirstKey: sp.FirstKey,
			Handler: func(ctx *Ctx) {
				r := ctx.data(sp)
				if ctx.RESP3() {
					r = sp.RESP3(ctx.Args, r)
				}
				ctx.writeData(r)
			}, Summary: sp.Summary, Syntax: sp.Syntax})
	}
	return out
}

// data runs the data command sp of the current call.
func (ctx *Ctx) data(sp *keyspace.Spec) keyspace.Reply {
	return ctx.Env.Service.Data(ctx.Now(), sp, ctx.Args, ctx.relayed())
}

// writeData writes a keyspace reply in the session's protocol.
func (ctx *Ctx) writeData(r keyspace.Reply) {
	c := ctx.Conn
	switch r.Kind {
	case keyspace.Nil:
		ctx.WriteNull()
	case keyspace.NilArray:
		ctx.WriteNullArray()
	case keyspace.Status:
		c.WriteString(r.Str)
	case keyspace.Error:
		c.WriteError(r.Str)
	case keyspace.Int:
		c.WriteInt64(r.Int)
	case keyspace.Bulk:
		c.WriteBulkString(r.Str)
	case keyspace.Double:
		if !ctx.RESP3() {
			c.WriteBulkString(r.Str)
			return
		}
		h := append(append(append(ctx.S.hdr[:0], ','), r.Str...), '\r', '\n')
		ctx.S.hdr = h
		c.WriteRaw(h)
	case keyspace.Map:
		ctx.WriteMap(len(r.Elems) / 2)
		for _, e := range r.Elems {
			ctx.writeData(e)
		}
	default:
		c.WriteArray(len(r.Elems))
		for _, e := range r.Elems {
			ctx.writeData(e)
		}
	}
}
