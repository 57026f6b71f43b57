package commands

import (
	"strings"

	"github.com/sluice-rl/sluice/keyspace"
	"github.com/sluice-rl/sluice/limiter"
)

// Scripts: EVAL, EVALSHA and SCRIPT, as Redis has them (package script),
// over the data commands; a script runs where its keys live
// (limiter.Service.Eval).

func scriptCommands() []*Command {
	return []*Command{
		{Name: "EVAL", Arity: -3, Flags: 0, Handler: evalCmd(false, false),
			Summary: "Run a Lua script over the data commands' keys.", Syntax: "script numkeys [key ...] [arg ...]"},
		{Name: "EVALSHA", Arity: -3, Flags: 0, Handler: evalCmd(true, false),
			Summary: "Run a loaded Lua script by its SHA-1.", Syntax: "sha1 numkeys [key ...] [arg ...]"},
		{Name: "EVAL_RO", Arity: -3, Flags: FlagReadOnly, Handler: evalCmd(false, true),
			Summary: "Run a Lua script that only reads.", Syntax: "script numkeys [key ...] [arg ...]"},
		{Name: "EVALSHA_RO", Arity: -3, Flags: FlagReadOnly, Handler: evalCmd(true, true),
			Summary: "Run a loaded Lua script that only reads.", Syntax: "sha1 numkeys [key ...] [arg ...]"},
		{Name: "SCRIPT", Arity: -2, Flags: 0, Handler: scriptCmd,
			Summary: "Load, look up, flush or stop Lua scripts.", Syntax: "LOAD script | EXISTS sha1 [sha1 ...] | FLUSH [ASYNC | SYNC] | KILL"},
	}
}

func evalCmd(bySHA, ro bool) func(ctx *Ctx) {
	return func(ctx *Ctx) {
		a := ctx.Args
		n, ok := keyspace.ParseInt(a[2])
		switch {
		case !ok:
			ctx.Conn.WriteError("ERR value is not an integer or out of range")
			return
		case n < 0:
			ctx.Conn.WriteError("ERR Number of keys can't be negative")
			return
		case n > int64(len(a)-3):
			ctx.Conn.WriteError("ERR Number of keys can't be greater than number of args")
			return
		}
		sc := &limiter.Script{Keys: a[3 : 3+n], Argv: a[3+n:], ReadOnly: ro}
		if bySHA {
			sc.SHA = strings.ToLower(string(a[1]))
		} else {
			sc.Body = a[1]
		}
		ctx.writeData(ctx.Env.Service.Eval(ctx.Now(), sc, ctx.relayed()))
	}
}

func scriptCmd(ctx *Ctx) {
	a, eng := ctx.Args, ctx.Env.Service.Scripts
	if eng == nil {
		ctx.Conn.WriteError("ERR scripts are not enabled on this node")
		return
	}
	switch sub := a[1]; {
	case eq(sub, "LOAD") && len(a) == 3:
		sha, e := eng.Load(a[2])
		if e.IsError() {
			ctx.writeData(e)
			return
		}
		ctx.Conn.WriteBulkString(sha)
	case eq(sub, "EXISTS") && len(a) >= 3:
		ctx.Conn.WriteArray(len(a) - 2)
		for _, sha := range a[2:] {
			if eng.Exists(string(sha)) {
				ctx.Conn.WriteInt(1)
			} else {
				ctx.Conn.WriteInt(0)
			}
		}
	case eq(sub, "FLUSH") && (len(a) == 2 || len(a) == 3 && (eq(a[2], "ASYNC") || eq(a[2], "SYNC"))):
		eng.Flush()
		ctx.Conn.WriteString("OK")
	case eq(sub, "FLUSH"):
		ctx.Conn.WriteError("ERR SCRIPT FLUSH only support SYNC|ASYNC option")
	case eq(sub, "KILL") && len(a) == 2:
		ctx.writeData(eng.Kill())
	default:
		ctx.Conn.WriteError("ERR unknown subcommand or wrong number of arguments for '" + printable(sub, 64) + "'. Try SCRIPT LOAD, EXISTS, FLUSH or KILL.")
	}
}
