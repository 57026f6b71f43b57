// Package script runs Redis's Lua scripts (EVAL, EVALSHA) with a real
// Lua 5.1 interpreter (gopher-lua), as Redis does: the KEYS and ARGV
// tables, redis.call and redis.pcall with Redis's conversions between
// Lua and replies, redis.status_reply, error_reply, sha1hex and
// replicate_commands, no globals of the script's own, and a time budget
// after which the script is stopped. The commands a script calls are the
// caller's (Call): package keyspace's, run inside the transaction that
// holds the script's keys, so a script is atomic with respect to them.
package script

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	lua "github.com/yuin/gopher-lua"
	"github.com/yuin/gopher-lua/parse"

	"github.com/sluice-rl/sluice/keyspace"
)

// Bounds on the scripts a node keeps and runs.
const (
	// MaxScripts and MaxSourceBytes bound the cache of loaded scripts
	// (SCRIPT LOAD, and every EVAL's body): past either, a new script is
	// refused until SCRIPT FLUSH.
	MaxScripts     = 100_000
	MaxSourceBytes = 64 << 20
	// DefaultTimeLimit is how long a script may run before it is stopped
	// (Redis's lua-time-limit is 5 s).
	DefaultTimeLimit = 5 * time.Second
	// callStack and registry bound a script's Lua stacks.
	callStack   = 200
	registryMax = 256 * 1024
)

// Call runs one command for a script and returns its reply, and whether
// the command writes.
type Call func(args [][]byte) (r keyspace.Reply, writes bool)

type compiled struct {
	proto *lua.FunctionProto
	body  []byte
}

// Engine keeps the loaded scripts and runs them.
type Engine struct {
	// TimeLimit bounds one script's run (0: DefaultTimeLimit).
	TimeLimit time.Duration

	mu      sync.Mutex
	scripts map[string]*compiled // sha1 hex → compiled
	bytes   int
	running map[*run]struct{}
	states  sync.Pool
}

type run struct {
	cancel context.CancelFunc
	wrote  bool // it has called a command that writes: SCRIPT KILL spares it
	killed bool
}

// New returns an engine with no scripts.
func New() *Engine {
	return &Engine{scripts: map[string]*compiled{}, running: map[*run]struct{}{}}
}

// SHA1 is the hex SHA-1 of a script's body, its name for EVALSHA.
func SHA1(body []byte) string {
	h := sha1.Sum(body)
	return hex.EncodeToString(h[:])
}

// errFull refuses a script past the cache's bounds.
var errFull = keyspace.Errf("ERR too many scripts loaded (at most 100000 scripts, 64 MiB of source): SCRIPT FLUSH to load others")

// Load compiles body and keeps it under its SHA-1, which it returns.
func (e *Engine) Load(body []byte) (string, keyspace.Reply) {
	sha := SHA1(body)
	if _, ok := e.get(sha); ok {
		return sha, keyspace.Reply{}
	}
	chunk, err := parse.Parse(strings.NewReader(string(body)), "@user_script")
	if err != nil {
		return "", keyspace.Errf("ERR Error compiling script (new function): user_script:" + compileErr(err))
	}
	proto, err := lua.Compile(chunk, "@user_script")
	if err != nil {
		return "", keyspace.Errf("ERR Error compiling script (new function): user_script:" + compileErr(err))
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, ok := e.scripts[sha]; !ok {
		if len(e.scripts) >= MaxScripts || e.bytes+len(body) > MaxSourceBytes {
			return "", errFull
		}
		e.scripts[sha] = &compiled{proto: proto, body: append([]byte(nil), body...)}
		e.bytes += len(body)
	}
	return sha, keyspace.Reply{}
}

func compileErr(err error) string {
	s := err.Error()
	s = strings.ReplaceAll(s, "\n", " ")
	return strings.TrimSpace(s)
}

func (e *Engine) get(sha string) (*compiled, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	c, ok := e.scripts[strings.ToLower(sha)]
	return c, ok
}

// Source returns the body of the loaded script sha, or nil.
func (e *Engine) Source(sha string) []byte {
	if c, ok := e.get(sha); ok {
		return c.body
	}
	return nil
}

// Exists reports whether a script of that SHA-1 is loaded.
func (e *Engine) Exists(sha string) bool { _, ok := e.get(sha); return ok }

// Flush forgets every loaded script.
func (e *Engine) Flush() {
	e.mu.Lock()
	e.scripts, e.bytes = map[string]*compiled{}, 0
	e.mu.Unlock()
}

// Len and Bytes are the cache's size: scripts and bytes of source.
func (e *Engine) Len() int   { e.mu.Lock(); defer e.mu.Unlock(); return len(e.scripts) }
func (e *Engine) Bytes() int { e.mu.Lock(); defer e.mu.Unlock(); return e.bytes }

// Kill stops every running script that has not written (SCRIPT KILL, as
// Redis: stopping one that wrote would leave half its writes); it
// answers NOTBUSY when none runs, UNKILLABLE when every one has written.
func (e *Engine) Kill() keyspace.Reply {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.running) == 0 {
		return keyspace.Errf("NOTBUSY No scripts in execution right now.")
	}
	n := 0
	for r := range e.running {
		if !r.wrote {
			r.killed = true
			r.cancel()
			n++
		}
	}
	if n == 0 {
		return keyspace.Errf("UNKILLABLE Sorry the script already executed write commands against the dataset. You can either wait the script termination or kill the server in a hard way using the SHUTDOWN NOSAVE command.")
	}
	return keyspace.OK
}

// Wrote records that the running script whose call this is has written;
// the caller's Call reports it (Run passes it the marker).
func (r *run) markWrote(e *Engine) {
	e.mu.Lock()
	r.wrote = true
	e.mu.Unlock()
}

// Running is how many scripts run now, and how many of them have written.
func (e *Engine) Running() (n, wrote int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for r := range e.running {
		if r.wrote {
			wrote++
		}
	}
	return len(e.running), wrote
}

// ErrNoScript answers EVALSHA of a script that is not loaded.
var ErrNoScript = keyspace.Errf("NOSCRIPT No matching script. Please use EVAL.")

// Run runs the loaded script sha with KEYS keys and ARGV argv, calling
// call for every redis.call and redis.pcall, and returns its reply.
func (e *Engine) Run(sha string, keys, argv [][]byte, call Call) keyspace.Reply {
	c, ok := e.get(sha)
	if !ok {
		return ErrNoScript
	}
	limit := e.TimeLimit
	if limit <= 0 {
		limit = DefaultTimeLimit
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	r := &run{cancel: cancel}
	e.mu.Lock()
	e.running[r] = struct{}{}
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		delete(e.running, r)
		e.mu.Unlock()
	}()

	L := e.state()
	defer e.states.Put(L)
	L.SetContext(ctx)
	defer L.RemoveContext()
	g := L.Get(lua.GlobalsIndex).(*lua.LTable)
	g.RawSetString("KEYS", strings2table(L, keys))
	g.RawSetString("ARGV", strings2table(L, argv))
	ud := L.NewUserData()
	ud.Value = func(args [][]byte) keyspace.Reply {
		rep, writes := call(args)
		if writes {
			r.markWrote(e)
		}
		return rep
	}
	L.SetField(L.Get(lua.RegistryIndex), "sluice.call", ud)
	L.SetField(L.Get(lua.RegistryIndex), "sluice.sha", lua.LString(sha))

	fn := L.NewFunctionFromProto(c.proto)
	fn.Env = L.GetField(L.Get(lua.RegistryIndex), "sluice.env").(*lua.LTable)
	L.Push(fn)
	err := L.PCall(0, 1, nil)
	if err != nil {
		L.SetTop(0)
		if ctx.Err() != nil {
			e.mu.Lock()
			killed := r.killed
			e.mu.Unlock()
			if killed {
				return keyspace.Errf("ERR Script killed by user with SCRIPT KILL...")
			}
			return keyspace.Errf("ERR Script stopped: it ran past its time limit (" + limit.String() + ", --script-time-limit); what it wrote before stays written")
		}
		return scriptError(err, sha)
	}
	ret := L.Get(-1)
	L.SetTop(0)
	return fromLua(ret)
}

// scriptError turns a Lua error into Redis's reply: an error a redis lib
// call raised as it is; a runtime error as ERR user_script:LINE: message,
// naming the script and the line.
func scriptError(err error, sha string) keyspace.Reply {
	var le *lua.ApiError
	if !errors.As(err, &le) {
		return keyspace.Errf("ERR " + err.Error())
	}
	if t, ok := le.Object.(*lua.LTable); ok {
		if s, ok := t.RawGetString("err").(lua.LString); ok {
			return keyspace.Errf(string(s))
		}
	}
	msg := le.Object.String()
	if i := strings.Index(msg, "\nstack traceback"); i >= 0 {
		msg = msg[:i]
	}
	msg = strings.TrimPrefix(strings.TrimSpace(msg), "@")
	ln := "?"
	if rest, ok := strings.CutPrefix(msg, "user_script:"); ok {
		if i := strings.IndexByte(rest, ':'); i > 0 {
			ln = rest[:i]
		}
	}
	return keyspace.Errf("ERR " + msg + " script: " + sha + ", on @user_script:" + ln + ".")
}

// state returns a sandboxed interpreter: Redis's libraries (base, table,
// string, math), the redis table, and globals locked.
func (e *Engine) state() *lua.LState {
	if L, ok := e.states.Get().(*lua.LState); ok {
		return L
	}
	L := lua.NewState(lua.Options{SkipOpenLibs: true, CallStackSize: callStack, RegistrySize: 1024, RegistryMaxSize: registryMax})
	for _, lib := range []struct {
		name string
		fn   lua.LGFunction
	}{{lua.BaseLibName, lua.OpenBase}, {lua.TabLibName, lua.OpenTable}, {lua.StringLibName, lua.OpenString}, {lua.MathLibName, lua.OpenMath}} {
		L.Push(L.NewFunction(lib.fn))
		L.Push(lua.LString(lib.name))
		L.Call(1, 0)
	}
	g := L.Get(lua.GlobalsIndex).(*lua.LTable)
	// tostring writes numbers as Lua 5.1 does (numberString).
	base := g.RawGetString("tostring")
	g.RawSetString("tostring", L.NewFunction(func(L *lua.LState) int {
		if n, ok := L.Get(1).(lua.LNumber); ok {
			L.Push(lua.LString(numberString(n)))
			return 1
		}
		L.Push(base)
		L.Push(L.Get(1))
		L.Call(1, 1)
		return 1
	}))
	for _, name := range []string{"dofile", "loadfile", "load", "loadstring", "require", "module", "collectgarbage", "newproxy", "print", "_printregs",
		"setmetatable", "getmetatable", "rawset", "setfenv", "getfenv"} {
		g.RawSetString(name, lua.LNil)
	}
	redis := L.NewTable()
	L.SetFuncs(redis, map[string]lua.LGFunction{
		"call":               func(L *lua.LState) int { return redisCall(L, true) },
		"pcall":              func(L *lua.LState) int { return redisCall(L, false) },
		"status_reply":       statusReply,
		"error_reply":        errorReply,
		"sha1hex":            sha1hex,
		"replicate_commands": func(L *lua.LState) int { L.Push(lua.LTrue); return 1 },
		"set_repl":           func(L *lua.LState) int { return 0 },
		"log":                func(L *lua.LState) int { return 0 },
	})
	for _, k := range []string{"REPL_ALL", "REPL_AOF", "REPL_SLAVE", "REPL_REPLICA", "REPL_NONE", "LOG_DEBUG", "LOG_VERBOSE", "LOG_NOTICE", "LOG_WARNING"} {
		redis.RawSetString(k, lua.LNumber(0))
	}
	g.RawSetString("redis", redis)
	// Every library table, and the globals themselves, are read-only to a
	// script, as in Redis: interpreters are reused, so nothing one script
	// does may reach the next. A script sees the globals through an empty
	// table that reads them and refuses writes; it may not read an
	// undefined global either.
	for _, lib := range []string{lua.TabLibName, lua.StringLibName, lua.MathLibName, "redis"} {
		if t, ok := g.RawGetString(lib).(*lua.LTable); ok {
			g.RawSetString(lib, readOnly(L, t, false))
		}
	}
	env := readOnly(L, g, true)
	L.SetField(L.Get(lua.RegistryIndex), "sluice.env", env)
	return L
}

// readOnly returns an empty table that reads t and refuses writes
// ("Attempt to modify a readonly table"); strict: reading a name t does
// not have is an error too.
func readOnly(L *lua.LState, t *lua.LTable, strict bool) *lua.LTable {
	p := L.NewTable()
	mt := L.NewTable()
	mt.RawSetString("__newindex", L.NewFunction(func(L *lua.LState) int {
		L.RaiseError("Attempt to modify a readonly table")
		return 0
	}))
	if strict {
		mt.RawSetString("__index", L.NewFunction(func(L *lua.LState) int {
			v := t.RawGet(L.Get(2))
			if v == lua.LNil {
				L.RaiseError("Script attempted to access nonexistent global variable '%s'", L.Get(2).String())
			}
			L.Push(v)
			return 1
		}))
	} else {
		mt.RawSetString("__index", t)
	}
	mt.RawSetString("__metatable", lua.LFalse)
	L.SetMetatable(p, mt)
	return p
}

// argNumber writes a number a script passes to a command as Redis 7
// does (fpconv_dtoa): the shortest digits that read back as the number,
// without an exponent between 1e-7 and 1e21.
func argNumber(n lua.LNumber) string {
	f := float64(n)
	if a := math.Abs(f); a == 0 || a >= 1e-7 && a < 1e21 {
		return strconv.FormatFloat(f, 'f', -1, 64)
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}

// numberString writes a number as Lua 5.1 (and so Redis) does, "%.14g":
// a script's numbers reach commands and tostring in the same digits as
// on Redis.
func numberString(n lua.LNumber) string {
	f := float64(n)
	if f == float64(int64(f)) && f > -1e15 && f < 1e15 {
		return strconv.FormatInt(int64(f), 10)
	}
	return strconv.FormatFloat(f, 'g', 14, 64)
}

func strings2table(L *lua.LState, a [][]byte) *lua.LTable {
	t := L.CreateTable(len(a), 0)
	for i, s := range a {
		t.RawSetInt(i+1, lua.LString(s))
	}
	return t
}

// redisCall is redis.call (raise: an error reply raises) and redis.pcall
// (an error reply is returned as a table with err).
func redisCall(L *lua.LState, raising bool) int {
	n := L.GetTop()
	if n == 0 {
		raise(L, "ERR Please specify at least one argument for this redis lib call")
		return 0
	}
	args := make([][]byte, n)
	for i := 1; i <= n; i++ {
		switch v := L.Get(i).(type) {
		case lua.LString:
			args[i-1] = []byte(v)
		case lua.LNumber:
			args[i-1] = []byte(argNumber(v))
		default:
			raise(L, "ERR Lua redis lib command arguments must be strings or integers")
			return 0
		}
	}
	ud, _ := L.GetField(L.Get(lua.RegistryIndex), "sluice.call").(*lua.LUserData)
	call, _ := ud.Value.(func([][]byte) keyspace.Reply)
	r := call(args)
	if r.Kind == keyspace.Error && raising {
		raise(L, r.Str) // Redis names the script and the line that raised it
		return 0
	}
	L.Push(toLua(L, r))
	return 1
}

// raise raises Redis's error msg from a redis lib call: the message,
// then the script and the line that called.
func raise(L *lua.LState, msg string) {
	sha, _ := L.GetField(L.Get(lua.RegistryIndex), "sluice.sha").(lua.LString)
	t := L.NewTable()
	t.RawSetString("err", lua.LString(msg+" script: "+string(sha)+", on @user_script:"+line(L)+"."))
	L.Error(t, 1)
}

// line is the script's line that is running, as Redis reports it.
func line(L *lua.LState) string {
	w := strings.TrimSuffix(L.Where(1), ":")
	if i := strings.LastIndexByte(w, ':'); i >= 0 {
		return w[i+1:]
	}
	return "?"
}

func statusReply(L *lua.LState) int {
	t := L.NewTable()
	t.RawSetString("ok", lua.LString(L.CheckString(1)))
	L.Push(t)
	return 1
}

// errorReply is redis.error_reply: {err=msg}, without a leading '-'.
func errorReply(L *lua.LState) int {
	t := L.NewTable()
	t.RawSetString("err", lua.LString(strings.TrimPrefix(L.CheckString(1), "-")))
	L.Push(t)
	return 1
}

func sha1hex(L *lua.LState) int {
	L.Push(lua.LString(SHA1([]byte(L.CheckString(1)))))
	return 1
}

// toLua converts a reply as Redis does: integers to numbers, bulk
// strings to strings, a nil to false, arrays to tables, a status to
// {ok=…}, an error to {err=…}.
func toLua(L *lua.LState, r keyspace.Reply) lua.LValue {
	switch r.Kind {
	case keyspace.Int:
		return lua.LNumber(r.Int)
	case keyspace.Bulk:
		return lua.LString(r.Str)
	case keyspace.Nil, keyspace.NilArray:
		return lua.LFalse
	case keyspace.Status:
		t := L.NewTable()
		t.RawSetString("ok", lua.LString(r.Str))
		return t
	case keyspace.Error:
		t := L.NewTable()
		t.RawSetString("err", lua.LString(r.Str))
		return t
	}
	t := L.CreateTable(len(r.Elems), 0)
	for i, e := range r.Elems {
		t.RawSetInt(i+1, toLua(L, e))
	}
	return t
}

// fromLua converts a script's return value as Redis does: a number to an
// integer (truncated), a string to a bulk string, true to 1, false and
// nil to nil, a table with ok or err to a status or an error, any other
// table to an array up to its first nil.
func fromLua(v lua.LValue) keyspace.Reply {
	switch x := v.(type) {
	case lua.LNumber:
		return keyspace.IntReply(int64(x))
	case lua.LString:
		return keyspace.BulkString(string(x))
	case lua.LBool:
		if x {
			return keyspace.One
		}
		return keyspace.NilReply
	case *lua.LTable:
		if e, ok := x.RawGetString("err").(lua.LString); ok {
			return keyspace.Errf(string(e))
		}
		if s, ok := x.RawGetString("ok").(lua.LString); ok {
			return keyspace.Reply{Kind: keyspace.Status, Str: string(s)}
		}
		out := keyspace.Reply{Kind: keyspace.Array}
		for i := 1; ; i++ {
			e := x.RawGetInt(i)
			if e == lua.LNil {
				break
			}
			out.Elems = append(out.Elems, fromLua(e))
		}
		return out
	}
	return keyspace.NilReply
}
