package commands

import (
	"strconv"
	"strings"
	"time"

	"github.com/sluice-rl/sluice/access"
)

func connCommands() []*Command {
	return []*Command{
		{Name: "PING", Arity: -1, Flags: FlagFast, Handler: pingCmd, Summary: "Ping the server.", Syntax: "[message]"},
		{Name: "ECHO", Arity: 2, Flags: FlagFast, Handler: echoCmd, Summary: "Return the given string.", Syntax: "message"},
		{Name: "HELLO", Arity: -1, Flags: FlagNoAuth | FlagFast, Handler: helloCmd,
			Summary: "Handshake: choose RESP2 or RESP3, optionally authenticate and name the connection.",
			Syntax:  "[protover [AUTH username password] [SETNAME clientname]]"},
		{Name: "AUTH", Arity: -2, Flags: FlagNoAuth | FlagFast, Handler: authCmd, Summary: "Authenticate the connection.", Syntax: "[username] password"},
		{Name: "CLIENT", Arity: -2, Flags: 0, Handler: clientCmd, Summary: "Connection management.",
			Syntax: "SETNAME name | GETNAME | ID | SETINFO attr value | INFO | LIST | KILL filter [filter ...] | TRACKING ON|OFF [OPTIN] | CACHING YES|NO | TRACKINGINFO | GETREDIRECT | HELP"},
		{Name: "SELECT", Arity: 2, Flags: FlagFast, Handler: selectCmd, Summary: "Select database 0 (the only one).", Syntax: "index"},
		{Name: "QUIT", Arity: -1, Flags: FlagNoAuth | FlagFast, Handler: quitCmd, Summary: "Close the connection.", Syntax: ""},
		{Name: "RESET", Arity: 1, Flags: FlagNoAuth | FlagFast, Handler: resetConnCmd, Summary: "Reset the connection's state.", Syntax: ""},
	}
}

func pingCmd(ctx *Ctx) {
	switch len(ctx.Args) {
	case 1:
		ctx.Conn.WriteString(pongReply)
	case 2:
		ctx.Conn.WriteBulk(ctx.Args[1])
	default:
		ctx.Conn.WriteError(WrongArity("ping"))
	}
}

func echoCmd(ctx *Ctx) { ctx.Conn.WriteBulk(ctx.Args[1]) }

func helloCmd(ctx *Ctx) {
	a := ctx.Args
	proto := int64(ctx.S.Proto())
	if len(a) >= 2 {
		v, ok := parseInt(a[1])
		if !ok {
			ctx.Conn.WriteError("ERR Protocol version is not an integer or out of range")
			return
		}
		if v != 2 && v != 3 {
			ctx.Conn.WriteError("NOPROTO sorry, this protocol version is not supported")
			return
		}
		proto = v
	}
	// Options are checked first, AUTH applied next, and SETNAME and the
	// protocol only once the connection is authenticated: a refused HELLO
	// changes nothing.
	var name []byte
	for i := 2; i < len(a); i++ {
		switch {
		case eq(a[i], "AUTH") && i+2 < len(a):
			i += 2
		case eq(a[i], "SETNAME") && i+1 < len(a):
			name = a[i+1]
			i++
		default:
			ctx.Conn.WriteError("ERR Syntax error in HELLO option '" + printable(a[i], 64) + "'")
			return
		}
	}
	for i := 2; i < len(a); i++ {
		if eq(a[i], "AUTH") && i+2 < len(a) {
			if !ctx.authenticate(a[i+1], a[i+2]) {
				return
			}
			break
		}
	}
	if ctx.S.Role() == access.RoleNone {
		ctx.Conn.WriteError("NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time")
		return
	}
	if name != nil && !ctx.setName(name) {
		return
	}
	ctx.S.setProto(proto)
	c := ctx.Conn
	ctx.WriteMap(7)
	c.WriteBulkString("server")
	c.WriteBulkString("sluice")
	c.WriteBulkString("version")
	c.WriteBulkString(ctx.Env.Version)
	c.WriteBulkString("proto")
	c.WriteInt64(proto)
	c.WriteBulkString("id")
	c.WriteInt64(ctx.S.ID)
	c.WriteBulkString("mode")
	c.WriteBulkString("standalone")
	c.WriteBulkString("role")
	c.WriteBulkString("master")
	c.WriteBulkString("modules")
	c.WriteArray(0)
}

// authenticate checks credentials, replying with the error on failure.
func (ctx *Ctx) authenticate(user, pass []byte) bool {
	if id, isPeer, ok := ctx.Env.PeerAuth.Check(user, pass); isPeer {
		if !ok {
			ctx.Conn.WriteError("WRONGPASS invalid username-password pair or user is disabled.")
			return false
		}
		ctx.S.setPeer(id)
		return true
	}
	if !ctx.Env.Auth.Required() {
		ctx.Conn.WriteError("ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?")
		return false
	}
	role, ok := ctx.Env.Auth.Check(user, pass)
	if !ok {
		ctx.Conn.WriteError("WRONGPASS invalid username-password pair or user is disabled.")
		return false
	}
	ctx.S.setAuth(string(user), role)
	return true
}

func authCmd(ctx *Ctx) {
	a := ctx.Args
	var ok bool
	switch len(a) {
	case 2:
		ok = ctx.authenticate([]byte("default"), a[1])
	case 3:
		ok = ctx.authenticate(a[1], a[2])
	default:
		ctx.Conn.WriteError(errSyntax)
		return
	}
	if ok {
		ctx.Conn.WriteString(okReply)
	}
}

func (ctx *Ctx) setName(name []byte) bool {
	for _, c := range name {
		if c <= ' ' || c > '~' {
			ctx.Conn.WriteError("ERR Client names cannot contain spaces, newlines or special characters.")
			return false
		}
	}
	if len(name) > 256 {
		ctx.Conn.WriteError("ERR client name must be at most 256 bytes")
		return false
	}
	ctx.S.mu.Lock()
	ctx.S.name = string(name)
	ctx.S.mu.Unlock()
	return true
}

func clientCmd(ctx *Ctx) {
	a := ctx.Args
	sub := a[1]
	switch {
	case eq(sub, "SETNAME") && len(a) == 3:
		if ctx.setName(a[2]) {
			ctx.Conn.WriteString(okReply)
		}
	case eq(sub, "GETNAME") && len(a) == 2:
		ctx.S.mu.Lock()
		name := ctx.S.name
		ctx.S.mu.Unlock()
		if name == "" {
			ctx.WriteNull()
		} else {
			ctx.Conn.WriteBulkString(name)
		}
	case eq(sub, "ID") && len(a) == 2:
		ctx.Conn.WriteInt64(ctx.S.ID)
	case eq(sub, "SETINFO") && len(a) == 4:
		v := string(a[3])
		if strings.ContainsAny(v, " \r\n") || len(v) > 128 {
			ctx.Conn.WriteError("ERR " + strings.ToLower(string(a[2])) + " cannot contain spaces, newlines or special characters.")
			return
		}
		ctx.S.mu.Lock()
		switch {
		case eq(a[2], "LIB-NAME"):
			ctx.S.libName = v
		case eq(a[2], "LIB-VER"):
			ctx.S.libVer = v
		default:
			ctx.S.mu.Unlock()
			ctx.Conn.WriteError("ERR Unrecognized option '" + printable(a[2], 64) + "'")
			return
		}
		ctx.S.mu.Unlock()
		ctx.Conn.WriteString(okReply)
	case eq(sub, "INFO") && len(a) == 2:
		ctx.WriteVerbatim(ctx.S.Line(time.Now()) + "\n")
	case eq(sub, "LIST"):
		if ok, e := adminOnly(ctx); !ok {
			ctx.Conn.WriteError(e)
			return
		}
		var b strings.Builder
		for _, s := range ctx.Env.Clients.Snapshot() {
			b.WriteString(s.Line(time.Now()))
			b.WriteByte('\n')
		}
		ctx.WriteVerbatim(b.String())
	case eq(sub, "KILL") && len(a) >= 3:
		if ok, e := adminOnly(ctx); !ok {
			ctx.Conn.WriteError(e)
			return
		}
		clientKill(ctx)
	case eq(sub, "NO-EVICT") || eq(sub, "NO-TOUCH") || eq(sub, "REPLY") && len(a) == 3 && eq(a[2], "ON"):
		ctx.Conn.WriteString(okReply)
	case eq(sub, "TRACKING") && len(a) >= 3:
		clientTracking(ctx)
	case eq(sub, "CACHING") && len(a) == 3:
		clientCaching(ctx)
	case eq(sub, "TRACKINGINFO") && len(a) == 2:
		trackingInfo(ctx)
	case eq(sub, "GETREDIRECT") && len(a) == 2:
		switch r := ctx.S.redirect.Load(); {
		case !ctx.S.tracking.Load():
			ctx.Conn.WriteInt(-1)
		default:
			ctx.Conn.WriteInt64(r)
		}
	case eq(sub, "HELP"):
		lines := []string{"CLIENT <subcommand> [<arg> ...]. Subcommands are:",
			"GETNAME", "SETNAME <name>", "ID", "INFO", "LIST", "KILL <ip:port> | ID <id> | ADDR <ip:port> | LADDR <ip:port> | USER <user> | SKIPME yes|no",
			"SETINFO LIB-NAME|LIB-VER <value>",
			"TRACKING ON OPTIN [NOLOOP] [REDIRECT <id>] | TRACKING OFF (accepted: no reply is cacheable, so none is ever invalidated)",
			"CACHING YES|NO", "TRACKINGINFO", "GETREDIRECT", "HELP"}
		ctx.Conn.WriteArray(len(lines))
		for _, l := range lines {
			ctx.Conn.WriteString(l)
		}
	default:
		ctx.Conn.WriteError("ERR unknown subcommand or wrong number of arguments for '" + printable(sub, 64) + "'. Try CLIENT HELP.")
	}
}

func adminOnly(ctx *Ctx) (bool, string) {
	if ctx.Env.Auth.Required() && ctx.S.Role() != access.RoleAdmin {
		return false, "NOPERM this user has no permissions to run the 'client' command or its subcommand"
	}
	return true, ""
}

func clientKill(ctx *Ctx) {
	a := ctx.Args
	if len(a) == 3 { // old form: CLIENT KILL addr
		for _, s := range ctx.Env.Clients.Snapshot() {
			if s.Addr == string(a[2]) {
				s.kill()
				ctx.Conn.WriteString(okReply)
				return
			}
		}
		ctx.Conn.WriteError("ERR No such client")
		return
	}
	var id int64 = -1
	var addr, laddr, user string
	skipMe := true
	for i := 2; i < len(a); i += 2 {
		if i+1 >= len(a) {
			ctx.Conn.WriteError(errSyntax)
			return
		}
		v := a[i+1]
		switch {
		case eq(a[i], "ID"):
			n, ok := parseInt(v)
			if !ok || n <= 0 {
				ctx.Conn.WriteError("ERR client-id should be greater than 0")
				return
			}
			id = n
		case eq(a[i], "ADDR"):
			addr = string(v)
		case eq(a[i], "LADDR"):
			laddr = string(v)
		case eq(a[i], "USER"):
			user = string(v)
		case eq(a[i], "SKIPME"):
			switch {
			case eq(v, "yes"):
				skipMe = true
			case eq(v, "no"):
				skipMe = false
			default:
				ctx.Conn.WriteError(errSyntax)
				return
			}
		default:
			ctx.Conn.WriteError(errSyntax)
			return
		}
	}
	killed := 0
	for _, s := range ctx.Env.Clients.Snapshot() {
		s.mu.Lock()
		su := s.user
		s.mu.Unlock()
		if (id >= 0 && s.ID != id) || (addr != "" && s.Addr != addr) || (laddr != "" && s.LocalAddr != laddr) ||
			(user != "" && su != user) || (skipMe && s == ctx.S) {
			continue
		}
		s.kill()
		killed++
	}
	ctx.Conn.WriteInt(killed)
}

func selectCmd(ctx *Ctx) {
	n, ok := parseInt(ctx.Args[1])
	switch {
	case !ok:
		ctx.Conn.WriteError(errNotInt)
	case n != 0:
		ctx.Conn.WriteError("ERR DB index is out of range (sluice has database 0 only)")
	default:
		ctx.Conn.WriteString(okReply)
	}
}

func quitCmd(ctx *Ctx) {
	ctx.Conn.WriteString(okReply)
	if c, ok := ctx.Conn.(Closer); ok {
		c.Close()
	}
}

func resetConnCmd(ctx *Ctx) {
	s := ctx.S
	s.endTx()
	s.setProto(2)
	s.tracking.Store(false)
	s.redirect.Store(0)
	s.mu.Lock()
	s.name, s.user, s.peer = "", "default", ""
	if ctx.Env.Auth.Required() {
		s.setRole(access.RoleNone)
	} else {
		s.setRole(access.RoleAdmin)
	}
	s.mu.Unlock()
	ctx.Conn.WriteString("RESET")
}

// itoa is strconv.Itoa for int64.
func itoa(n int64) string { return strconv.FormatInt(n, 10) }
