package commands

// Client-side caching. Clients that cache replies ask the server to track
// what they read (CLIENT TRACKING ON) and to tell them when it changes.
// No sluice reply can be cached: each describes limiter state that
// changes with every call and as time passes. sluice therefore accepts
// tracking only in OPTIN mode, where nothing is tracked unless the client
// marks the next command with CLIENT CACHING YES, and refuses the keyed
// commands so marked (multi.go, intercept): no reply is ever cached, so no
// invalidation is ever owed. This is what rueidis sends by default
// (CLIENT TRACKING ON OPTIN at connect, CLIENT CACHING YES only in
// DoCache), so rueidis connects with its default options, and a DoCache
// of a sluice command fails with a clear error instead of caching.

const errTrackingMode = "ERR sluice accepts CLIENT TRACKING ON only with OPTIN: no sluice reply can be cached " +
	"(each describes state that changes with every call and as time passes), and in OPTIN mode nothing is tracked " +
	"unless asked for. Turn client-side caching off in the client (rueidis: DisableCache) or use OPTIN"

func clientTracking(ctx *Ctx) {
	a := ctx.Args
	s := ctx.S
	switch {
	case eq(a[2], "OFF"):
		s.tracking.Store(false)
		s.redirect.Store(0)
		s.caching = false
		s.mu.Lock()
		s.noLoop = false
		s.mu.Unlock()
		ctx.Conn.WriteString(okReply)
		return
	case !eq(a[2], "ON"):
		ctx.Conn.WriteError(errSyntax)
		return
	}
	optin, noloop := false, false
	var redirect int64
	for i := 3; i < len(a); i++ {
		switch {
		case eq(a[i], "OPTIN"):
			optin = true
		case eq(a[i], "NOLOOP"):
			noloop = true
		case eq(a[i], "REDIRECT") && i+1 < len(a):
			id, ok := parseInt(a[i+1])
			if !ok {
				ctx.Conn.WriteError(errNotInt)
				return
			}
			if id != s.ID && ctx.Env.Clients.Get(id) == nil {
				ctx.Conn.WriteError("ERR The client ID you want redirect to does not exist")
				return
			}
			redirect = id
			i++
		case eq(a[i], "OPTOUT"), eq(a[i], "BCAST"), eq(a[i], "PREFIX"):
			ctx.Conn.WriteError(errTrackingMode)
			return
		default:
			ctx.Conn.WriteError(errSyntax)
			return
		}
	}
	if !optin {
		ctx.Conn.WriteError(errTrackingMode)
		return
	}
	s.mu.Lock()
	s.noLoop = noloop
	s.mu.Unlock()
	s.redirect.Store(redirect)
	s.tracking.Store(true)
	ctx.Conn.WriteString(okReply)
}

func clientCaching(ctx *Ctx) {
	switch v := ctx.Args[2]; {
	case !ctx.S.tracking.Load():
		ctx.Conn.WriteError("ERR CLIENT CACHING can be called only when the client is in tracking mode with OPTIN or OPTOUT mode enabled")
	case eq(v, "YES"):
		ctx.S.caching = true
		ctx.Conn.WriteString(okReply)
	case eq(v, "NO"):
		ctx.Conn.WriteError("ERR CLIENT CACHING NO is only valid when tracking is enabled in OPTOUT mode.")
	default:
		ctx.Conn.WriteError(errSyntax)
	}
}

// trackingInfo answers CLIENT TRACKINGINFO as Redis does: flags, redirect,
// prefixes.
func trackingInfo(ctx *Ctx) {
	s := ctx.S
	c := ctx.Conn
	on := s.tracking.Load()
	s.mu.Lock()
	noloop := s.noLoop
	s.mu.Unlock()
	flags := []string{"off"}
	redirect := int64(-1)
	if on {
		flags = []string{"on", "optin"}
		if noloop {
			flags = append(flags, "noloop")
		}
		if s.caching {
			flags = append(flags, "caching-yes")
		}
		redirect = s.redirect.Load()
	}
	ctx.WriteMap(3)
	c.WriteBulkString("flags")
	ctx.WriteSet(len(flags))
	for _, f := range flags {
		c.WriteString(f)
	}
	c.WriteBulkString("redirect")
	c.WriteInt64(redirect)
	c.WriteBulkString("prefixes")
	c.WriteArray(0)
}
