package script

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/keyspace"
)

func load(t *testing.T, e *Engine, body string) string {
	t.Helper()
	sha, r := e.Load([]byte(body))
	if r.IsError() {
		t.Fatalf("load %q: %s", body, r.Str)
	}
	return sha
}

func noCall(args [][]byte, wrote func()) keyspace.Reply { return keyspace.Errf("ERR no commands here") }

// Replies convert as Redis converts them, both ways.
func TestConversions(t *testing.T) {
	e := New()
	echo := func(args [][]byte, wrote func()) keyspace.Reply {
		switch string(args[0]) {
		case "int":
			return keyspace.IntReply(42)
		case "nil":
			return keyspace.NilReply
		case "arr":
			return keyspace.Reply{Kind: keyspace.Array, Elems: []keyspace.Reply{keyspace.BulkString("a"), keyspace.NilReply}}
		case "ok":
			return keyspace.OK
		}
		return keyspace.Errf("WRONGTYPE no")
	}
	for body, want := range map[string]string{
		"return redis.call('int') + 1":                  ":43",
		"return redis.call('nil') == false":             ":1",
		"local r = redis.call('arr') return {#r, r[1]}": "*[:2 $a]",
		"return redis.call('ok')['ok']":                 "$OK",
		"return redis.pcall('bad')['err']":              "$WRONGTYPE no",
		"return 2.9":                                    ":2",
		"return {1, nil, 3}":                            "*[:1]",
		"return {err='E x'}":                            "-E x",
		"return {ok='S'}":                               "+S",
		"return #KEYS + #ARGV":                          ":3",
		"return redis.sha1hex('')":                      "$da39a3ee5e6b4b0d3255bfef95601890afd80709",
		"return redis.call('bad')":                      "-WRONGTYPE no script: ",
		"local ok, e = pcall(function() return x end) return tostring(ok)": "$false",
	} {
		sha := load(t, e, body)
		got := show(e.Run(sha, [][]byte{[]byte("k")}, [][]byte{[]byte("a"), []byte("b")}, echo))
		if !strings.HasPrefix(got, want) {
			t.Errorf("%s: got %s, want %s", body, got, want)
		}
	}
}

func show(r keyspace.Reply) string {
	switch r.Kind {
	case keyspace.Int:
		return ":" + itoa(r.Int)
	case keyspace.Bulk:
		return "$" + r.Str
	case keyspace.Status:
		return "+" + r.Str
	case keyspace.Error:
		return "-" + r.Str
	case keyspace.Nil:
		return "nil"
	}
	var b []string
	for _, x := range r.Elems {
		b = append(b, show(x))
	}
	return "*[" + strings.Join(b, " ") + "]"
}

func itoa(n int64) string {
	if n < 0 {
		return "-" + itoa(-n)
	}
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}

// A script cannot escape its sandbox nor leave state for the next one.
func TestSandbox(t *testing.T) {
	e := New()
	for _, body := range []string{"return os.time()", "return io.open('/etc/passwd')", "return dofile('/x')", "return loadstring('return 1')()", "x = 1"} {
		if r := e.Run(load(t, e, body), nil, nil, noCall); !r.IsError() {
			t.Errorf("%s: %s", body, show(r))
		}
	}
	// Nothing a script does reaches the next run on the same interpreter:
	// the library tables and the globals are read-only.
	for _, body := range []string{"string.rep = nil", "redis.call = nil", "tonumber = nil", "redis = nil", "math.floor = function() return 0 end",
		"KEYS = {}", "rawset(_G, 'x', 1)", "setmetatable(_G, nil)", "getmetatable('').__index.rep = nil",
		"_G.x = 1", "_G.redis = {call = function() return 'hijacked' end}", "_G.tostring = nil",
		"string.__index.rep = function() return 'pwned' end", "('').__index = 1", "_G._G.x = 1"} {
		if r := e.Run(load(t, e, body), nil, nil, noCall); !r.IsError() {
			t.Errorf("%s: %s", body, show(r))
		}
	}
	sha := load(t, e, "KEYS[2] = 'x' return string.rep('a', 2) .. ('b'):rep(2) .. math.floor(1.5) .. #KEYS .. tostring(redis.call ~= nil) .. tostring(rawget(_G, 'x'))")
	for range 3 {
		if got := show(e.Run(sha, [][]byte{[]byte("a")}, nil, noCall)); got != "$aabb12truenil" {
			t.Fatalf("a run saw what an earlier one did: %s", got)
		}
	}
}

// What could crash the node or hold it past every limit inside one call
// is refused: a reply that holds itself, a string.rep of a terabyte, a
// format of a billion columns, a pattern that backtracks for ever; and a
// script that keeps allocating is stopped.
func TestScriptsCannotExhaustTheNode(t *testing.T) {
	e := New()
	for body, want := range map[string]string{
		"local t = {} t[1] = t return t":                         "-ERR reached lua stack limit",
		"return string.rep('x', 2^40)":                           "-ERR user_script:1: string.rep: a result of more than",
		"return ('x'):rep(2^40)":                                 "-ERR user_script:1: string.rep: a result of more than",
		"return string.format('%999999999d', 1)":                 "-ERR user_script:1: invalid format",
		"return string.format('%5.2f|%-10s|%03d', 1.5, 'a', 7)":  "$ 1.50|a         |007",
		"return string.find(string.rep('a', 3000), '.-.-.-.-b')": "-ERR user_script:1: pattern too complex",
		"return {string.find('aab', 'a*b')}":                     "*[:1 :3]",
	} {
		if got := show(e.Run(load(t, e, body), nil, nil, noCall)); !strings.HasPrefix(got, want) {
			t.Errorf("%s: got %.120s, want %s", body, got, want)
		}
	}
	// A MiB a step, and a time limit far past what reaching the memory
	// bound takes even under -race beside busy cores: the heap watch, not
	// the clock, must stop it.
	e.TimeLimit = 2 * time.Minute
	sha := load(t, e, "local t = {} local s = string.rep('x', 1048576) while true do t[#t + 1] = s .. #t end")
	if got := show(e.Run(sha, nil, nil, noCall)); !strings.HasPrefix(got, "-ERR Script stopped: it allocated more than") {
		t.Fatalf("a script allocating without end: %.120s", got)
	}
}

// A loop is stopped at the time limit, or sooner by Kill.
func TestLoopsAreStopped(t *testing.T) {
	e := New()
	e.TimeLimit = 200 * time.Millisecond
	sha := load(t, e, "while true do end")
	start := time.Now()
	if r := e.Run(sha, nil, nil, noCall); !strings.HasPrefix(r.Str, "ERR Script stopped") {
		t.Fatalf("past the limit: %s", show(r))
	}
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Fatalf("stopped after %v, before its limit", d)
	}
	e.TimeLimit = time.Hour
	var wg sync.WaitGroup
	wg.Add(1)
	var r keyspace.Reply
	go func() { defer wg.Done(); r = e.Run(sha, nil, nil, noCall) }()
	for {
		if n, _ := e.Running(); n == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if k := e.Kill(); k.Kind != keyspace.Status {
		t.Fatalf("Kill: %s", show(k))
	}
	wg.Wait()
	if !strings.HasPrefix(r.Str, "ERR Script killed by user") {
		t.Fatalf("killed: %s", show(r))
	}
}

// The cache refuses scripts past its bound and forgets them on Flush;
// scripts only EVAL brought give their place to new ones, loaded ones do
// not.
func TestCacheBound(t *testing.T) {
	e := New()
	big := "return '" + strings.Repeat("x", MaxSourceBytes/3-100) + "'"
	load(t, e, big)
	load(t, e, big+" ")
	sha, r := e.LoadForEval([]byte(big + "  "))
	if r.IsError() || e.Len() != 3 {
		t.Fatalf("the third: %v, %d scripts", r, e.Len())
	}
	sha2, r := e.LoadForEval([]byte(big + "   "))
	if r.IsError() || e.Exists(sha) || e.Len() != 3 {
		t.Fatalf("EVAL past the bytes: %v, %d scripts, the older EVAL kept: %v", r, e.Len(), e.Exists(sha))
	}
	if _, r := e.Load([]byte(big + "    ")); r.IsError() || e.Exists(sha2) || e.Len() != 3 {
		t.Fatalf("SCRIPT LOAD past the bytes: %v, %d scripts, the EVAL kept: %v", r, e.Len(), e.Exists(sha2))
	}
	if _, r := e.LoadForEval([]byte(big + "     ")); !r.IsError() || e.Len() != 3 {
		t.Fatalf("EVAL with every place held by loaded scripts: %v, %d scripts", r, e.Len())
	}
	e.Flush()
	if e.Len() != 0 || e.Bytes() != 0 {
		t.Fatalf("after Flush: %d scripts, %d bytes", e.Len(), e.Bytes())
	}
}

// TestLoadedScriptsMemory loads 10,000 distinct scripts, short ones and
// hand-written token buckets, and measures the heap they hold against the
// bound docs/commands.md states: a cached script costs its source and
// its compiled code: at most 2 KiB and eight times its source.
func TestLoadedScriptsMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("loads 20,000 scripts")
	}
	bucket := `local key = KEYS[1]
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local now = redis.call('TIME')
local t = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local b = redis.call('HMGET', key, 'tokens', 'ts')
local tokens = tonumber(b[1]) or burst
local ts = tonumber(b[2]) or t
tokens = math.min(burst, tokens + (t - ts) * rate / 1000)
local ok = 0
if tokens >= 1 then tokens = tokens - 1; ok = 1 end
redis.call('HSET', key, 'tokens', tokens, 'ts', t)
redis.call('PEXPIRE', key, math.ceil(burst / rate * 1000))
return {ok, math.floor(tokens)} -- %d`
	for _, form := range []string{"return %d", bucket} {
		const n = 10000
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		e := New()
		src := 0
		for i := range n {
			b := fmt.Sprintf(form, i)
			src += len(b)
			if _, r := e.Load([]byte(b)); r.IsError() {
				t.Fatal(r.Str)
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		per, perSrc := float64(after.HeapAlloc-before.HeapAlloc)/n, float64(src)/n
		t.Logf("%d scripts of %.0f bytes: %.0f bytes of heap each", n, perSrc, per)
		if per > 8*perSrc+2048 {
			t.Errorf("%d scripts of %.0f bytes hold %.0f bytes each, bound %.0f", n, perSrc, per, 8*perSrc+2048)
		}
		runtime.KeepAlive(e)
	}
}
