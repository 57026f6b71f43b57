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
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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
	// MaxScriptMemory bounds how much the process's heap may grow while a
	// script runs (sampled every few ms): past it the script is stopped.
	MaxScriptMemory = 256 << 20
	// maxString bounds one string a script builds with string.rep.
	maxString = 64 << 20
	// maxDepth bounds the nesting of a script's reply (a table that holds
	// itself would otherwise never end).
	maxDepth = 64
	// callStack and registry bound a script's Lua stacks.
	callStack   = 200
	registryMax = 256 * 1024
)

// Call runs one command for a script and returns its reply; before it
// runs a command that writes, it calls wrote (so that SCRIPT KILL, from
// then on, spares the script).
type Call func(args [][]byte, wrote func()) keyspace.Reply

type compiled struct {
	proto *lua.FunctionProto
	body  []byte
	// byEval: only EVAL brought it, so it may give its place to a new
	// one when the cache is full (SCRIPT LOAD's are kept until FLUSH).
	byEval bool
}

// Engine keeps the loaded scripts and runs them.
type Engine struct {
	// TimeLimit bounds one script's run (0: DefaultTimeLimit).
	TimeLimit time.Duration
	// Interpret runs every script in the interpreter, the recognised
	// ones too (native.go; --script-native=false).
	Interpret bool
	natives   atomic.Int64 // calls run natively

	// base ends every run when the node stops (Close).
	base    context.Context
	stopAll context.CancelFunc

	mu      sync.Mutex
	scripts map[string]*compiled // sha1 hex → compiled
	bytes   int
	evals   []string // the scripts only EVAL brought, oldest first
	running map[*run]struct{}
	states  sync.Pool
}

type run struct {
	cancel context.CancelFunc
	wrote  bool // it has called a command that writes: SCRIPT KILL spares it
	killed bool
	// overMemory: the heap grew by more than MaxScriptMemory while it ran.
	overMemory bool
}

// New returns an engine with no scripts.
func New() *Engine {
	e := &Engine{scripts: map[string]*compiled{}, running: map[*run]struct{}{}}
	e.base, e.stopAll = context.WithCancel(context.Background())
	return e
}

// Close stops every running script and every later one at once: the
// node is stopping.
func (e *Engine) Close() { e.stopAll() }

// SHA1 is the hex SHA-1 of a script's body, its name for EVALSHA.
func SHA1(body []byte) string {
	h := sha1.Sum(body)
	return hex.EncodeToString(h[:])
}

// errFull refuses a script past the cache's bounds.
var errFull = keyspace.Errf("ERR too many scripts loaded (at most 100000 scripts, 64 MiB of source): SCRIPT FLUSH to load others")

// Load compiles body and keeps it under its SHA-1, which it returns
// (SCRIPT LOAD: kept until SCRIPT FLUSH).
func (e *Engine) Load(body []byte) (string, keyspace.Reply) { return e.load(body, false) }

// LoadForEval is Load for EVAL's body: when the cache is full, the
// oldest scripts only EVAL brought make room for it, as Redis 7.4 evicts
// them, so that a stream of distinct EVALs cannot fill the cache for good.
func (e *Engine) LoadForEval(body []byte) (string, keyspace.Reply) { return e.load(body, true) }

func (e *Engine) load(body []byte, byEval bool) (string, keyspace.Reply) {
	sha := SHA1(body)
	if c, ok := e.get(sha); ok {
		if !byEval {
			e.mu.Lock()
			c.byEval = false // loaded now: kept
			e.mu.Unlock()
		}
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
	clip(proto)
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, ok := e.scripts[sha]; !ok {
		for (len(e.scripts) >= MaxScripts || e.bytes+len(body) > MaxSourceBytes) && len(e.evals) > 0 {
			old := e.evals[0]
			e.evals = e.evals[1:]
			if c, ok := e.scripts[old]; ok && c.byEval {
				delete(e.scripts, old)
				e.bytes -= len(c.body)
			}
		}
		if len(e.scripts) >= MaxScripts || e.bytes+len(body) > MaxSourceBytes {
			return "", errFull
		}
		e.scripts[sha] = &compiled{proto: proto, body: append([]byte(nil), body...), byEval: byEval}
		e.bytes += len(body)
		if byEval {
			e.evals = append(e.evals, sha)
		}
	}
	return sha, keyspace.Reply{}
}

// clip gives a compiled function (and those it defines) tables of their
// own length: gopher-lua's compiler leaves its code, constants and debug
// tables in buffers sized for large functions (the code and line tables
// alone 1,024 entries, 12 KiB), which a cached script would otherwise
// keep: 17 KiB for "return 1" (TestLoadedScriptsMemory).
func clip(p *lua.FunctionProto) {
	p.Code = exact(p.Code)
	p.Constants = exact(p.Constants)
	p.FunctionPrototypes = exact(p.FunctionPrototypes)
	p.DbgSourcePositions = exact(p.DbgSourcePositions)
	p.DbgLocals = exact(p.DbgLocals)
	p.DbgCalls = exact(p.DbgCalls)
	p.DbgUpvalues = exact(p.DbgUpvalues)
	for _, f := range p.FunctionPrototypes {
		clip(f)
	}
}

// exact copies s into an array of its length; an empty s becomes an empty
// slice that holds no array (s[:0:0] would still point into s's).
func exact[S ~[]E, E any](s S) S {
	if len(s) == 0 {
		return S{}
	}
	return append(make(S, 0, len(s)), s...)
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
	e.scripts, e.bytes, e.evals = map[string]*compiled{}, 0, nil
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

// markWrote records that run r has written: the wrote marker Run hands
// its Call calls it before the write, so SCRIPT KILL spares r from then on.
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
	if n := natives[sha]; n != nil && !e.Interpret {
		if r, ok := n.run(&nativeCall{call: call, sha: sha}, keys, argv); ok {
			e.natives.Add(1)
			return r
		}
	}
	limit := e.TimeLimit
	if limit <= 0 {
		limit = DefaultTimeLimit
	}
	ctx, cancel := context.WithTimeout(e.base, limit)
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

	stopWatch := watchMemory(ctx, func() {
		e.mu.Lock()
		r.overMemory = true
		e.mu.Unlock()
		cancel()
	})
	defer stopWatch()

	L := e.state()
	defer e.states.Put(L)
	L.SetContext(ctx)
	defer L.RemoveContext()
	g := L.Get(lua.GlobalsIndex).(*lua.LTable)
	g.RawSetString("KEYS", strings2table(L, keys))
	g.RawSetString("ARGV", strings2table(L, argv))
	ud := L.NewUserData()
	ud.Value = func(args [][]byte) keyspace.Reply { return call(args, func() { r.markWrote(e) }) }
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
			killed, over := r.killed, r.overMemory
			e.mu.Unlock()
			if killed {
				return keyspace.Errf("ERR Script killed by user with SCRIPT KILL...")
			}
			if over {
				return keyspace.Errf("ERR Script stopped: it allocated more than 256 MiB; what it wrote before stays written")
			}
			if e.base.Err() != nil {
				return keyspace.Errf("ERR Script stopped: the node is shutting down; what it wrote before stays written")
			}
			return keyspace.Errf("ERR Script stopped: it ran past its time limit (" + limit.String() + ", --script-time-limit); what it wrote before stays written")
		}
		return scriptError(err, sha)
	}
	ret := L.Get(-1)
	L.SetTop(0)
	return fromLua(ret, 0)
}

// watchMemory samples the heap every few ms from a moment after the
// script starts, and calls over once it has grown by MaxScriptMemory;
// the returned function stops it.
func watchMemory(ctx context.Context, over func()) func() {
	done := make(chan struct{})
	t := time.AfterFunc(2*time.Millisecond, func() {
		sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		metrics.Read(sample)
		base := sample[0].Value.Uint64()
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
				metrics.Read(sample)
				if v := sample[0].Value.Uint64(); v > base+MaxScriptMemory {
					over()
					return
				}
			}
		}
	})
	return func() {
		t.Stop()
		close(done)
	}
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
	if lib, ok := g.RawGetString(lua.StringLibName).(*lua.LTable); ok {
		boundString(L, lib)
	}
	for _, lib := range []string{lua.TabLibName, lua.StringLibName, lua.MathLibName, "redis"} {
		if t, ok := g.RawGetString(lib).(*lua.LTable); ok {
			g.RawSetString(lib, readOnly(L, t, false))
		}
	}
	env := readOnly(L, g, true)
	g.RawSetString("_G", env) // _G is the script's view too, never the real table
	// Strings' methods ('a'):rep() read the string library through its
	// metatable, which gopher-lua makes the library itself: give strings a
	// metatable of their own over the read-only library, and take the
	// library's self-reference away.
	if lib, ok := L.GetGlobal(lua.StringLibName).(*lua.LTable); ok {
		if real, ok := L.GetMetatable(lua.LString("")).(*lua.LTable); ok {
			real.RawSetString("__index", lua.LNil)
		}
		smt := L.NewTable()
		smt.RawSetString("__index", lib)
		smt.RawSetString("__metatable", lua.LFalse)
		L.SetMetatable(lua.LString(""), smt)
	}
	L.SetField(L.Get(lua.RegistryIndex), "sluice.env", env)
	return L
}

// boundString wraps the string library's functions that could allocate
// without end or match for ever inside one call, where the time limit
// cannot stop them: string.rep builds at most maxString bytes, format
// widths and precisions have two digits at most (as in Lua 5.1), and a
// pattern with more than three open-ended repetitions is refused on a
// subject over 256 bytes.
func boundString(L *lua.LState, lib *lua.LTable) {
	wrap := func(name string, check func(L *lua.LState)) {
		orig := lib.RawGetString(name)
		lib.RawSetString(name, L.NewFunction(func(L *lua.LState) int {
			check(L)
			top := L.GetTop()
			L.Push(orig)
			for i := 1; i <= top; i++ {
				L.Push(L.Get(i))
			}
			L.Call(top, lua.MultRet)
			return L.GetTop() - top
		}))
	}
	wrap("rep", func(L *lua.LState) {
		if n := L.CheckInt(2); n > 0 && len(L.CheckString(1))*n > maxString {
			L.RaiseError("string.rep: a result of more than %d bytes", maxString)
		}
	})
	wrap("format", func(L *lua.LState) {
		f := L.CheckString(1)
		for i := 0; i < len(f); i++ {
			if f[i] != '%' {
				continue
			}
			digits := 0
			for i++; i < len(f) && strings.IndexByte("-+ #0.123456789", f[i]) >= 0; i++ {
				if f[i] >= '0' && f[i] <= '9' {
					if digits++; digits > 2 {
						L.RaiseError("invalid format (width or precision too long)")
					}
				} else if f[i] == '.' {
					digits = 0
				}
			}
		}
	})
	for _, name := range []string{"find", "match", "gmatch", "gsub"} {
		wrap(name, func(L *lua.LState) {
			subject, pattern := L.CheckString(1), L.OptString(2, "")
			open := 0
			for i := 0; i < len(pattern); i++ {
				switch pattern[i] {
				case '%':
					i++
				case '*', '-', '+':
					open++
				}
			}
			if open > 3 && len(subject) > 256 {
				L.RaiseError("pattern too complex for a subject of %d bytes (more than three open-ended repetitions)", len(subject))
			}
		})
	}
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
	t.RawSetString("err", lua.LString(raised(msg, string(sha), line(L))))
	L.Error(t, 1)
}

// raised is the error a script ends with when a redis lib call at line ln
// raises msg.
func raised(msg, sha, ln string) string {
	return msg + " script: " + sha + ", on @user_script:" + ln + "."
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
func fromLua(v lua.LValue, depth int) keyspace.Reply {
	if depth > maxDepth {
		return keyspace.Errf("ERR reached lua stack limit")
	}
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
			x := fromLua(e, depth+1)
			if x.IsError() && x.Str == "ERR reached lua stack limit" {
				return x
			}
			out.Elems = append(out.Elems, x)
		}
		return out
	}
	return keyspace.NilReply
}

var (
	errROWrite     = keyspace.Errf("ERR Write commands are not allowed from read-only scripts.")
	errNotInScript = keyspace.Errf("ERR Unknown Redis command called from script")
	errScriptArity = keyspace.Errf("ERR Wrong number of args calling Redis command from script")
)

// Commands is the Call of a script that runs inside tx at now (Unix ns):
// the keyspace's commands on the keys tx holds, and TIME; readOnly
// (EVAL_RO) refuses the commands that write.
func Commands(tx *keyspace.Tx, now int64, readOnly bool) Call {
	return func(args [][]byte, wrote func()) keyspace.Reply {
		sp := keyspace.Lookup(args[0])
		if sp == nil {
			if strings.EqualFold(string(args[0]), "TIME") && len(args) == 1 {
				return timeReply(now)
			}
			return errNotInScript
		}
		if !sp.ArityOK(len(args)) {
			return errScriptArity
		}
		if readOnly && sp.Write {
			return errROWrite
		}
		if sp.Write {
			wrote()
		}
		return tx.Exec(sp, args)
	}
}

func timeReply(now int64) keyspace.Reply {
	sec, usec := now/1e9, now%1e9/1e3
	return keyspace.Reply{Kind: keyspace.Array, Elems: []keyspace.Reply{
		keyspace.BulkString(strconv.FormatInt(sec, 10)), keyspace.BulkString(strconv.FormatInt(usec, 10))}}
}
