package script

import (
	"math"
	"strconv"

	lua "github.com/yuin/gopher-lua"

	"github.com/sluice-rl/sluice/keyspace"
)

// Recognised scripts. The rate-limit libraries that users point at
// sluice unchanged (docs/redis-libraries.md) send a handful of scripts,
// always the same text. Each is known here by the SHA-1 of that exact
// text and runs as Go: the same redis.call calls in the same order with
// the same arguments, the same float64 arithmetic (every product and
// quotient rounded where Lua rounds it, never fused), and the reply the
// interpreter's conversion would make of what the script returns — an
// error a call raises names the script and the line as the interpreter
// does. A native reads its inputs first and, when one is outside what it
// handles (an argument missing, a number not written as plain decimal
// digits, a stored value that is not such a number), it gives the script
// back to the interpreter before any call that writes, so every input a
// client can send still gets the interpreter's answer.
// e2e/TestRecognisedScriptsMatchTheInterpreter captures each library's
// scripts from the library itself and runs them both ways on the same
// inputs, comparing every reply and the keys left behind.

// A native runs a recognised script; ok false: the interpreter runs it
// (nothing was written).
type native struct {
	// Library names the library and the script, as INFO and the docs do.
	Library string
	run     func(c *nativeCall, keys, argv [][]byte) (r keyspace.Reply, ok bool)
}

var natives = map[string]*native{
	// rate-limiter-flexible 11, RateLimiterRedis: its incrTtlLuaScript.
	"a1de965f42e177aa339706bd580f049065eca79a": {"rate-limiter-flexible RateLimiterRedis", flexibleIncrTTL},
	// rate-limit-redis 4 (express-rate-limit): increment and get.
	"81dbecea94d2d10514719b20ed51faf711529d9d": {"rate-limit-redis increment", storeIncrement},
	"6aeb97ed6086dcdeafdc6fda3999a0d0e38ec96a": {"rate-limit-redis get", storeGet},
	// go-redis/redis_rate v10: allowN and allowAtMost (GCRA).
	"f52a5b566060d79fd321d695df55bc918339c4aa": {"redis_rate allowN", gcraAllowN},
	"054143318f521948424aa25df61d7f7ba835a9d7": {"redis_rate allowAtMost", gcraAllowAtMost},
	// Python limits 2.8 (slowapi, Flask-Limiter): the fixed window's
	// incr_expire, the moving window's acquire and read.
	"628bd136a573a06b346879695681af12ccef300f": {"limits incr_expire", limitsIncrExpire},
	"d19f37c18768a509dbf1310a257bfc35be65609f": {"limits acquire_moving_window", limitsAcquireMovingWindow},
	"3136f0028c572d2959b5cdc5ec15b287fab6a9ff": {"limits moving_window", limitsMovingWindow},
}

// Recognised returns the library script that sha names, if it is one
// sluice runs natively.
func Recognised(sha string) (library string, ok bool) {
	if n := natives[sha]; n != nil {
		return n.Library, true
	}
	return "", false
}

// NativeRuns returns how many script calls the engine ran natively.
func (e *Engine) NativeRuns() int64 { return e.natives.Load() }

// nativeCall makes a native's redis.call calls.
type nativeCall struct {
	call Call
	sha  string
}

func noWrite() {}

// do is redis.call at line ln of the script: an error reply raises,
// ending the script with the error the interpreter would give.
func (c *nativeCall) do(ln int, args ...[]byte) keyspace.Reply {
	r := c.call(args, noWrite)
	if r.IsError() {
		return keyspace.Errf(raised(r.Str, c.sha, strconv.Itoa(ln)))
	}
	return r
}

// plain parses a number written as plain decimal digits ("-12", "0.25":
// no sign but a leading minus, no leading zero, no spaces, hex or
// exponent, at most 18 digits before the point), the form every library
// sends and stores. In that form Lua's tonumber, its arithmetic on
// strings and the interpreter all read the same number; any other form
// is left to the interpreter.
func plain(s []byte) (float64, bool) {
	if len(s) == 0 || len(s) > 40 {
		return 0, false
	}
	i := 0
	if s[0] == '-' {
		i = 1
	}
	start, dot := i, -1
	for ; i < len(s); i++ {
		switch c := s[i]; {
		case c >= '0' && c <= '9':
		case c == '.' && dot < 0:
			dot = i
		default:
			return 0, false
		}
	}
	intDigits := len(s) - start
	if dot >= 0 {
		intDigits = dot - start
		if dot == len(s)-1 {
			return 0, false
		}
	}
	if intDigits == 0 || intDigits > 18 || intDigits > 1 && s[start] == '0' {
		return 0, false
	}
	if dot < 0 {
		// As Lua reads an integer here: an int64, then its double.
		n, err := strconv.ParseInt(string(s), 10, 64)
		return float64(n), err == nil
	}
	f, err := strconv.ParseFloat(string(s), 64)
	return f, err == nil
}

// plainArgs parses every argument as plain.
func plainArgs(argv [][]byte) ([]float64, bool) {
	out := make([]float64, len(argv))
	for i, a := range argv {
		f, ok := plain(a)
		if !ok {
			return nil, false
		}
		out[i] = f
	}
	return out, true
}

// num writes a number as a script passes it to a command.
func num(f float64) []byte { return []byte(argNumber(lua.LNumber(f))) }

// luaInt is a script's number as its reply (truncated, as fromLua).
func luaInt(f float64) keyspace.Reply { return keyspace.IntReply(int64(f)) }

// throughLua is a command's reply as a script that returns it unchanged
// passes it on: an integer through a Lua number (a double).
func throughLua(r keyspace.Reply) keyspace.Reply {
	if r.Kind == keyspace.Int {
		return luaInt(float64(r.Int))
	}
	return r
}

// ceil is math.ceil.
func ceil(f float64) float64 { return math.Ceil(f) }

func array(e ...keyspace.Reply) keyspace.Reply {
	return keyspace.Reply{Kind: keyspace.Array, Elems: e}
}

var (
	cSET     = []byte("SET")
	cGET     = []byte("GET")
	cPTTL    = []byte("PTTL")
	cINCR    = []byte("INCR")
	cINCRBY  = []byte("incrby")
	cPEXPIRE = []byte("PEXPIRE")
	cEXPIRE  = []byte("expire")
	cTIME    = []byte("TIME")
	cLRANGE  = []byte("lrange")
	cLINDEX  = []byte("lindex")
	cLPUSH   = []byte("lpush")
	cLTRIM   = []byte("ltrim")
	aEX      = []byte("EX")
	aPX      = []byte("PX")
	aNX      = []byte("NX")
	aZero    = []byte("0")
	aOne     = []byte("1")
)

// flexibleIncrTTL is rate-limiter-flexible's script (one line):
//
//	redis.call('set', KEYS[1], 0, 'EX', ARGV[2], 'NX')
//	local consumed = redis.call('incrby', KEYS[1], ARGV[1])
//	local ttl = redis.call('pttl', KEYS[1])
//	if ttl == -1 then redis.call('expire', KEYS[1], ARGV[2]); ttl = 1000 * ARGV[2] end
//	return {consumed, ttl}
func flexibleIncrTTL(c *nativeCall, keys, argv [][]byte) (keyspace.Reply, bool) {
	if len(keys) < 1 || len(argv) < 2 {
		return keyspace.Reply{}, false
	}
	secs, ok := plain(argv[1])
	if !ok {
		return keyspace.Reply{}, false
	}
	k := keys[0]
	if r := c.do(1, []byte("set"), k, aZero, []byte("EX"), argv[1], aNX); r.IsError() {
		return r, true
	}
	consumed := c.do(1, cINCRBY, k, argv[0])
	if consumed.IsError() {
		return consumed, true
	}
	ttl := c.do(1, []byte("pttl"), k)
	if ttl.IsError() {
		return ttl, true
	}
	out := throughLua(ttl)
	if ttl.Kind == keyspace.Int && float64(ttl.Int) == -1 {
		if r := c.do(1, cEXPIRE, k, argv[1]); r.IsError() {
			return r, true
		}
		out = luaInt(float64(1000 * secs))
	}
	return array(throughLua(consumed), out), true
}

// storeIncrement is rate-limit-redis's increment script:
//
//	local windowMs = tonumber(ARGV[2])
//	local resetOnChange = ARGV[1] == "1"
//	local timeToExpire = redis.call("PTTL", KEYS[1])
//	if timeToExpire <= 0 then
//	redis.call("SET", KEYS[1], 1, "PX", windowMs)
//	return { 1, windowMs }
//	end
//	local totalHits = redis.call("INCR", KEYS[1])
//	if resetOnChange then
//	redis.call("PEXPIRE", KEYS[1], windowMs)
//	timeToExpire = windowMs
//	end
//	return { totalHits, timeToExpire }
func storeIncrement(c *nativeCall, keys, argv [][]byte) (keyspace.Reply, bool) {
	if len(keys) < 1 || len(argv) < 2 {
		return keyspace.Reply{}, false
	}
	windowMs, ok := plain(argv[1])
	if !ok {
		return keyspace.Reply{}, false
	}
	k := keys[0]
	ttl := c.do(3, cPTTL, k)
	if ttl.IsError() {
		return ttl, true
	}
	if ttl.Kind != keyspace.Int {
		return keyspace.Reply{}, false
	}
	if float64(ttl.Int) <= 0 {
		if r := c.do(5, cSET, k, aOne, aPX, num(windowMs)); r.IsError() {
			return r, true
		}
		return array(keyspace.IntReply(1), luaInt(windowMs)), true
	}
	hits := c.do(8, cINCR, k)
	if hits.IsError() {
		return hits, true
	}
	out := throughLua(ttl)
	if string(argv[0]) == "1" {
		if r := c.do(10, cPEXPIRE, k, num(windowMs)); r.IsError() {
			return r, true
		}
		out = luaInt(windowMs)
	}
	return array(throughLua(hits), out), true
}

// storeGet is rate-limit-redis's get script:
//
//	local totalHits = redis.call("GET", KEYS[1])
//	local timeToExpire = redis.call("PTTL", KEYS[1])
//	return { totalHits, timeToExpire }
func storeGet(c *nativeCall, keys, argv [][]byte) (keyspace.Reply, bool) {
	if len(keys) < 1 {
		return keyspace.Reply{}, false
	}
	hits := c.do(1, cGET, keys[0])
	if hits.IsError() {
		return hits, true
	}
	ttl := c.do(2, cPTTL, keys[0])
	if ttl.IsError() {
		return ttl, true
	}
	if hits.Kind == keyspace.Nil {
		// {false, ttl}: false is a nil element, not the array's end.
		return array(keyspace.NilReply, throughLua(ttl)), true
	}
	return array(throughLua(hits), throughLua(ttl)), true
}

// gcraInputs reads redis_rate's arguments (burst, rate, period, cost),
// the clock (TIME, at line timeLn) and the key's stored instant (GET, at
// line getLn): now and tat as the script computes them.
type gcraState struct {
	burst, rate, period, cost float64
	now, tat                  float64
}

func gcraRead(c *nativeCall, keys, argv [][]byte, timeLn, getLn int) (st gcraState, r keyspace.Reply, ok bool) {
	if len(keys) < 1 || len(argv) < 4 {
		return st, r, false
	}
	a, ok := plainArgs(argv[:4])
	if !ok {
		return st, r, false
	}
	st.burst, st.rate, st.period, st.cost = a[0], a[1], a[2], a[3]
	t := c.do(timeLn, cTIME)
	if t.IsError() || t.Kind != keyspace.Array || len(t.Elems) != 2 {
		return st, t, t.IsError()
	}
	sec, ok1 := plain([]byte(t.Elems[0].Str))
	usec, ok2 := plain([]byte(t.Elems[1].Str))
	if !ok1 || !ok2 {
		return st, r, false
	}
	const jan2017 = 1483228800
	st.now = float64(sec-jan2017) + float64(usec/1000000)
	g := c.do(getLn, cGET, keys[0])
	switch {
	case g.IsError():
		return st, g, true
	case g.Kind == keyspace.Nil:
		st.tat = st.now
	default:
		tat, ok := plain([]byte(g.Str))
		if !ok {
			return st, r, false
		}
		st.tat = tat
	}
	if st.now > st.tat { // math.max(tat, now)
		st.tat = st.now
	}
	return st, r, true
}

// gcraAllowN is redis_rate's allowN (lua.go in redis_rate v10).
func gcraAllowN(c *nativeCall, keys, argv [][]byte) (keyspace.Reply, bool) {
	st, r, ok := gcraRead(c, keys, argv, 23, 26)
	if !ok || r.IsError() {
		return r, ok
	}
	emission := float64(st.period / st.rate)
	increment := float64(emission * st.cost)
	burstOffset := float64(emission * st.burst)
	newTat := float64(st.tat + increment)
	allowAt := float64(newTat - burstOffset)
	diff := float64(st.now - allowAt)
	remaining := float64(diff / emission)
	if remaining < 0 {
		resetAfter := float64(st.tat - st.now)
		retryAfter := float64(diff * -1)
		return array(keyspace.Zero, keyspace.Zero, tostr(retryAfter), tostr(resetAfter)), true
	}
	resetAfter := float64(newTat - st.now)
	if resetAfter > 0 {
		if r := c.do(55, cSET, keys[0], num(newTat), aEX, num(ceil(resetAfter))); r.IsError() {
			return r, true
		}
	}
	return array(luaInt(st.cost), luaInt(remaining), tostr(-1), tostr(resetAfter)), true
}

// gcraAllowAtMost is redis_rate's allowAtMost.
func gcraAllowAtMost(c *nativeCall, keys, argv [][]byte) (keyspace.Reply, bool) {
	st, r, ok := gcraRead(c, keys, argv, 22, 25)
	if !ok || r.IsError() {
		return r, ok
	}
	emission := float64(st.period / st.rate)
	burstOffset := float64(emission * st.burst)
	diff := float64(st.now - float64(st.tat-burstOffset))
	remaining := float64(diff / emission)
	if remaining < 1 {
		resetAfter := float64(st.tat - st.now)
		retryAfter := float64(emission - diff)
		return array(keyspace.Zero, keyspace.Zero, tostr(retryAfter), tostr(resetAfter)), true
	}
	cost := st.cost
	if remaining < cost {
		cost, remaining = remaining, 0
	} else {
		remaining = float64(remaining - cost)
	}
	increment := float64(emission * cost)
	newTat := float64(st.tat + increment)
	resetAfter := float64(newTat - st.now)
	if resetAfter > 0 {
		if r := c.do(61, cSET, keys[0], num(newTat), aEX, num(ceil(resetAfter))); r.IsError() {
			return r, true
		}
	}
	return array(luaInt(cost), luaInt(remaining), tostr(-1), tostr(resetAfter)), true
}

// limitsIncrExpire is limits' incr_expire.lua:
//
//	local current
//	local amount = tonumber(ARGV[2])
//	current = redis.call("incrby", KEYS[1], amount)
//
//	if tonumber(current) == amount then
//	    redis.call("expire", KEYS[1], ARGV[1])
//	end
//
//	return current
func limitsIncrExpire(c *nativeCall, keys, argv [][]byte) (keyspace.Reply, bool) {
	if len(keys) < 1 || len(argv) < 2 {
		return keyspace.Reply{}, false
	}
	amount, ok := plain(argv[1])
	if !ok {
		return keyspace.Reply{}, false
	}
	cur := c.do(3, cINCRBY, keys[0], num(amount))
	if cur.IsError() {
		return cur, true
	}
	if cur.Kind != keyspace.Int {
		return keyspace.Reply{}, false
	}
	if float64(cur.Int) == amount {
		if r := c.do(6, cEXPIRE, keys[0], argv[0]); r.IsError() {
			return r, true
		}
	}
	return throughLua(cur), true
}

// maxNativeEntries bounds the entries one native moving-window acquire
// pushes; a larger amount runs in the interpreter, under its budget.
const maxNativeEntries = 1000

// limitsAcquireMovingWindow is limits' acquire_moving_window.lua:
//
//	local amount = tonumber(ARGV[4])
//	local entry = redis.call('lindex', KEYS[1], tonumber(ARGV[2]) - amount)
//	local timestamp = tonumber(ARGV[1])
//	local expiry = tonumber(ARGV[3])
//
//	if entry and tonumber(entry) >= timestamp - expiry then
//	    return false
//	end
//	local limit = tonumber(ARGV[2])
//	local entries= {}
//	for i=1, amount do
//	    entries[i] = timestamp
//	end
//	redis.call('lpush', KEYS[1], unpack(entries))
//	redis.call('ltrim', KEYS[1], 0, limit - 1)
//	redis.call('expire', KEYS[1], expiry)
//
//	return true
func limitsAcquireMovingWindow(c *nativeCall, keys, argv [][]byte) (keyspace.Reply, bool) {
	if len(keys) < 1 || len(argv) < 4 {
		return keyspace.Reply{}, false
	}
	a, ok := plainArgs(argv[:4])
	if !ok {
		return keyspace.Reply{}, false
	}
	timestamp, limit, expiry, amount := a[0], a[1], a[2], a[3]
	if amount < 1 || amount > maxNativeEntries || amount != float64(int64(amount)) {
		return keyspace.Reply{}, false
	}
	entry := c.do(2, cLINDEX, keys[0], num(float64(limit-amount)))
	if entry.IsError() {
		return entry, true
	}
	if entry.Kind == keyspace.Bulk {
		e, ok := plain([]byte(entry.Str))
		if !ok {
			return keyspace.Reply{}, false
		}
		if e >= float64(timestamp-expiry) {
			return keyspace.NilReply, true
		}
	} else if entry.Kind != keyspace.Nil {
		return keyspace.Reply{}, false
	}
	push := make([][]byte, 2, 2+int(amount))
	push[0], push[1] = cLPUSH, keys[0]
	ts := num(timestamp)
	for range int(amount) {
		push = append(push, ts)
	}
	if r := c.do(14, push...); r.IsError() {
		return r, true
	}
	if r := c.do(15, cLTRIM, keys[0], aZero, num(float64(limit-1))); r.IsError() {
		return r, true
	}
	if r := c.do(16, cEXPIRE, keys[0], num(expiry)); r.IsError() {
		return r, true
	}
	return keyspace.One, true
}

// limitsMovingWindow is limits' moving_window.lua:
//
//	local items = redis.call('lrange', KEYS[1], 0, tonumber(ARGV[2]))
//	local expiry = tonumber(ARGV[1])
//	local a = 0
//	local oldest = nil
//
//	for idx=1,#items do
//	    if tonumber(items[idx]) >= expiry then
//	        a = a + 1
//
//	        if oldest == nil then
//	            oldest = tonumber(items[idx])
//	        end
//	    else
//	        break
//	    end
//	end
//
//	return {oldest, a}
func limitsMovingWindow(c *nativeCall, keys, argv [][]byte) (keyspace.Reply, bool) {
	if len(keys) < 1 || len(argv) < 2 {
		return keyspace.Reply{}, false
	}
	a, ok := plainArgs(argv[:2])
	if !ok {
		return keyspace.Reply{}, false
	}
	expiry, limit := a[0], a[1]
	items := c.do(1, cLRANGE, keys[0], aZero, num(limit))
	if items.IsError() {
		return items, true
	}
	if items.Kind != keyspace.Array {
		return keyspace.Reply{}, false
	}
	n, oldest, have := 0, 0.0, false
	for _, it := range items.Elems {
		v, ok := plain([]byte(it.Str))
		if it.Kind != keyspace.Bulk || !ok {
			return keyspace.Reply{}, false
		}
		if v < expiry {
			break
		}
		n++
		if !have {
			oldest, have = v, true
		}
	}
	if !have {
		// {nil, a}: an array ends at its first nil.
		return array(), true
	}
	return array(luaInt(oldest), luaInt(float64(n))), true
}

func tostr(f float64) keyspace.Reply { return keyspace.BulkString(numberString(lua.LNumber(f))) }
