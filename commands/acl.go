package commands

import (
	"strings"

	"github.com/sluice-rl/sluice/access"
)

// ACL shows the users and roles sluice has (from --requirepass and
// --acl-file, read at start and again on SIGHUP) in Redis's ACL rule
// notation, so that tools that read them (redis-cli, admin UIs) see what
// each user may do. ACL commands cannot change them.

func aclCommands() []*Command {
	return []*Command{
		{Name: "ACL", Arity: -2, Flags: 0, Handler: aclCmd, Summary: "The users and their roles (read-only).",
			Syntax: "WHOAMI | USERS | LIST | CAT | HELP"},
	}
}

// aclRules renders a role as Redis ACL rules: admin may run everything; a
// limiter every command that is not admin-only, less the admin
// subcommands.
func aclRules(reg *Registry, r access.Role) string {
	if r == access.RoleAdmin {
		return "~* &* +@all"
	}
	var b strings.Builder
	b.WriteString("~* &* -@all")
	for _, c := range reg.list {
		if c.Flags&FlagAdmin == 0 {
			b.WriteString(" +" + lower(c.Name))
		}
	}
	for _, sub := range []string{"client|list", "client|kill", "rl.budget|set", "rl.budget|del", "rl.budget|import",
		"rl.cluster|join", "rl.cluster|leave", "rl.cluster|apply", "rl.quota|reset", "rl.quota|set", "acl|list", "acl|users"} {
		b.WriteString(" -" + sub)
	}
	return b.String()
}

func aclCmd(ctx *Ctx) {
	a := ctx.Args
	c := ctx.Conn
	switch sub := a[1]; {
	case eq(sub, "WHOAMI") && len(a) == 2:
		ctx.S.mu.Lock()
		u := ctx.S.user
		ctx.S.mu.Unlock()
		c.WriteBulkString(u)
	case eq(sub, "USERS") && len(a) == 2:
		if !aclAdmin(ctx) {
			return
		}
		users := ctx.Env.Auth.List()
		c.WriteArray(len(users))
		for _, u := range users {
			c.WriteBulkString(u.Name)
		}
	case eq(sub, "LIST") && len(a) == 2:
		if !aclAdmin(ctx) {
			return
		}
		users := ctx.Env.Auth.List()
		c.WriteArray(len(users))
		for _, u := range users {
			pass := "nopass"
			if u.Hash != "" {
				pass = "#" + u.Hash
			}
			c.WriteBulkString("user " + u.Name + " on " + pass + " " + aclRules(ctx.Env.Registry, u.Role))
		}
	case eq(sub, "CAT") && len(a) == 2:
		c.WriteArray(0) // sluice has roles, not categories
	case eq(sub, "HELP") && len(a) == 2:
		lines := []string{"ACL <subcommand> [<arg> ...]. Subcommands are:",
			"WHOAMI", "    The user this connection is authenticated as.",
			"USERS", "    The users' names.",
			"LIST", "    The users and their rules (admin: +@all; limiter: the limiting and read commands).",
			"Users come from --requirepass and --acl-file and cannot be changed at run time.",
			"HELP", "    Print this help."}
		c.WriteArray(len(lines))
		for _, l := range lines {
			c.WriteString(l)
		}
	case eq(sub, "SETUSER") || eq(sub, "DELUSER") || eq(sub, "LOAD") || eq(sub, "SAVE") || eq(sub, "GETUSER") ||
		eq(sub, "DRYRUN") || eq(sub, "GENPASS") || eq(sub, "LOG"):
		c.WriteError("ERR ACL " + strings.ToUpper(printable(sub, 64)) + " is not supported: users and roles come from --requirepass and --acl-file, read at start and on SIGHUP (see ACL LIST)")
	default:
		c.WriteError("ERR unknown subcommand or wrong number of arguments for '" + printable(sub, 64) + "'. Try ACL HELP.")
	}
}

// aclAdmin replies NOPERM unless the session may read the users.
func aclAdmin(ctx *Ctx) bool {
	if ok, e := adminOnly(ctx); !ok {
		ctx.Conn.WriteError(strings.Replace(e, "'client'", "'acl'", 1))
		return false
	}
	return true
}
