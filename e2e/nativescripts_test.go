package e2e

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/keyspace"
	"github.com/sluice-rl/sluice/script"
	"github.com/sluice-rl/sluice/testsupport/testkit"
)

// monitor records the commands a redis-server receives (MONITOR).
type monitor struct {
	mu   sync.Mutex
	cmds [][]string
}

// startMonitor begins recording what the redis-server at addr receives.
func startMonitor(t *testing.T, addr string) *monitor {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	r := bufio.NewReaderSize(c, 1<<20)
	if _, err := c.Write([]byte("MONITOR\r\n")); err != nil {
		t.Fatal(err)
	}
	if l, err := r.ReadString('\n'); err != nil || l != "+OK\r\n" {
		t.Fatalf("MONITOR: %q %v", l, err)
	}
	m := &monitor{}
	go func() {
		for {
			l, err := r.ReadString('\n')
			if err != nil {
				return
			}
			// +1733097600.123456 [0 127.0.0.1:5555] "EVAL" "..." ...
			if _, rest, ok := strings.Cut(l, "] "); ok {
				if args, ok := unrepr(strings.TrimRight(rest, "\r\n")); ok {
					m.mu.Lock()
					m.cmds = append(m.cmds, args)
					m.mu.Unlock()
				}
			}
		}
	}()
	return m
}

// sync waits until every command sent to addr before it has been
// recorded, and returns them all.
func (m *monitor) sync(t *testing.T, addr string) [][]string {
	t.Helper()
	mark := fmt.Sprintf("monitor-mark-%d", time.Now().UnixNano())
	c := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2})
	defer c.Close()
	if err := c.Echo(context.Background(), mark).Err(); err != nil {
		t.Fatal(err)
	}
	var out [][]string
	testkit.WaitFor(t, 30*time.Second, "MONITOR to show the mark", func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		for _, a := range m.cmds {
			if len(a) == 2 && a[1] == mark {
				out = append([][]string(nil), m.cmds...)
				return true
			}
		}
		return false
	})
	return out
}

// unrepr reads MONITOR's quoted arguments (Redis's sdscatrepr).
func unrepr(s string) ([]string, bool) {
	var out []string
	for len(s) > 0 {
		if s[0] == ' ' {
			s = s[1:]
			continue
		}
		if s[0] != '"' {
			return nil, false
		}
		var b strings.Builder
		i := 1
		for ; i < len(s) && s[i] != '"'; i++ {
			if s[i] != '\\' || i+1 >= len(s) {
				b.WriteByte(s[i])
				continue
			}
			i++
			switch s[i] {
			case 'n':
				b.WriteByte('\n')
			case 'r':
				b.WriteByte('\r')
			case 't':
				b.WriteByte('\t')
			case 'a':
				b.WriteByte('\a')
			case 'b':
				b.WriteByte('\b')
			case 'x':
				if i+2 >= len(s) {
					return nil, false
				}
				v, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
				if err != nil {
					return nil, false
				}
				b.WriteByte(byte(v))
				i += 2
			default:
				b.WriteByte(s[i])
			}
		}
		if i >= len(s) {
			return nil, false
		}
		out = append(out, b.String())
		s = s[i+1:]
	}
	return out, true
}

// libraryScript is one script a library sent, and the calls it made of it.
type libraryScript struct {
	body  string
	calls [][2][]string // KEYS, ARGV
}

// scriptsOf gathers the scripts in recorded commands: their bodies (EVAL,
// SCRIPT LOAD) and every call (EVAL, EVALSHA), by SHA-1.
func scriptsOf(cmds [][]string) map[string]*libraryScript {
	out := map[string]*libraryScript{}
	get := func(sha string) *libraryScript {
		if out[sha] == nil {
			out[sha] = &libraryScript{}
		}
		return out[sha]
	}
	for _, a := range cmds {
		switch name := strings.ToUpper(a[0]); {
		case name == "SCRIPT" && len(a) == 3 && strings.EqualFold(a[1], "LOAD"):
			get(script.SHA1([]byte(a[2]))).body = a[2]
		case (name == "EVAL" || name == "EVALSHA") && len(a) >= 3:
			sha := strings.ToLower(a[1])
			if name == "EVAL" {
				sha = script.SHA1([]byte(a[1]))
				get(sha).body = a[1]
			}
			n, err := strconv.Atoi(a[2])
			if err != nil || n < 0 || 3+n > len(a) {
				continue
			}
			s := get(sha)
			s.calls = append(s.calls, [2][]string{a[3 : 3+n], a[3+n:]})
		}
	}
	return out
}

// Every script the libraries send — captured from the libraries
// themselves, run against redis-server under MONITOR — is one sluice
// recognises and runs natively, and the native run answers exactly as
// the interpreter does: the same calls (the libraries' own, and the same
// with arguments changed to every kind of odd value, keys of the wrong
// type, stored values that are not numbers, time moving by steps from
// 0 to an hour) give the same reply, errors included, and leave the same
// keys, values and expiries behind, on two keyspaces run side by side.
func TestRecognisedScriptsMatchTheInterpreter(t *testing.T) {
	capture := func(t *testing.T, drive func(addr string)) map[string]*libraryScript {
		addr := startRedis(t)
		m := startMonitor(t, addr)
		drive(addr)
		got := scriptsOf(m.sync(t, addr))
		if len(got) == 0 {
			t.Fatal("the library sent no script")
		}
		return got
	}
	t.Run("redis_rate", func(t *testing.T) {
		scripts := capture(t, func(addr string) {
			ctx := context.Background()
			c := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2})
			defer c.Close()
			l := redis_rate.NewLimiter(c)
			for i := range 4 {
				if _, err := l.Allow(ctx, "user:1", redis_rate.PerMinute(3)); err != nil {
					t.Fatal(err)
				}
				if _, err := l.AllowAtMost(ctx, "user:2", redis_rate.PerSecond(5), i+1); err != nil {
					t.Fatal(err)
				}
			}
		})
		compareNative(t, scripts)
	})
	t.Run("node", func(t *testing.T) {
		run := nodeLibraries(t)
		compareNative(t, capture(t, func(addr string) { run("SLUICE_PORT=" + port(addr)) }))
	})
	t.Run("limits", func(t *testing.T) {
		compareNative(t, capture(t, func(addr string) { runLimits(t, "SLUICE_PORT="+port(addr)) }))
	})
}

// compareNative checks that each script is recognised, then runs it
// natively and in the interpreter on the same inputs.
func compareNative(t *testing.T, scripts map[string]*libraryScript) {
	for sha, s := range scripts {
		first, _, _ := strings.Cut(strings.TrimSpace(s.body), "\n")
		lib, ok := script.Recognised(sha)
		if !ok {
			t.Errorf("script %s (%q…) is not recognised: the library's script has changed, or is new", sha, first)
			continue
		}
		if s.body == "" || len(s.calls) == 0 {
			t.Errorf("%s (%s): body %d bytes, %d calls recorded", lib, sha, len(s.body), len(s.calls))
			continue
		}
		t.Run(strings.ReplaceAll(lib, " ", "_"), func(t *testing.T) { differential(t, sha, s) })
	}
}

// odd are the argument values a differential step may put in place of a
// library's own.
var odd = []string{"0", "1", "-1", "2", "3", "5", "10", "60", "1000", "60000", "0.5", "1.5", "-0", "-0.0", "abc", "",
	"007", " 5", "1e3", "0x10", "999999999999999", "9223372036854775807", "-60", "1.", ".5", "+5", "inf", "nan"}

func differential(t *testing.T, sha string, s *libraryScript) {
	seed := time.Now().UnixNano()
	rng := rand.New(rand.NewPCG(uint64(seed), 7))
	t.Logf("seed %d, %d recorded calls", seed, len(s.calls))
	type side struct {
		keys *keyspace.Store
		eng  *script.Engine
	}
	mk := func(interpret bool) side {
		sd := side{keys: keyspace.New(keyspace.Options{MaxKeys: 1000, MaxBytes: 1 << 20}), eng: script.New()}
		sd.eng.Interpret = interpret
		sd.eng.TimeLimit = 2 * time.Second
		if _, e := sd.eng.Load([]byte(s.body)); e.IsError() {
			t.Fatalf("load: %s", e.Str)
		}
		return sd
	}
	nat, interp := mk(false), mk(true)
	t.Cleanup(func() { nat.eng.Close(); interp.eng.Close() })
	eval := func(sd side, now int64, keys, argv [][]byte) keyspace.Reply {
		tx := sd.keys.Lock(now, false, keys...)
		tx.Only(keys)
		defer tx.Unlock()
		return sd.eng.Run(sha, keys, argv, script.Commands(tx, now, false))
	}
	exec := func(sd side, now int64, a ...string) keyspace.Reply {
		args := make([][]byte, len(a))
		for i := range a {
			args[i] = []byte(a[i])
		}
		return sd.keys.Exec(now, keyspace.Lookup(args[0]), args)
	}
	keyNames := []string{"k1", "k2"}
	dump := func(sd side, now int64) string {
		var b strings.Builder
		for _, k := range keyNames {
			typ := exec(sd, now, "TYPE", k).Str
			fmt.Fprintf(&b, "%s %s pttl=%d ", k, typ, exec(sd, now, "PTTL", k).Int)
			switch typ {
			case "string":
				fmt.Fprintf(&b, "%q", exec(sd, now, "GET", k).Str)
			case "hash":
				fmt.Fprintf(&b, "%v", exec(sd, now, "HGETALL", k).Elems)
			case "list":
				fmt.Fprintf(&b, "%v", exec(sd, now, "LRANGE", k, "0", "-1").Elems)
			}
			b.WriteString("; ")
		}
		return b.String()
	}
	steps := []int64{0, 0, 1e6, 7e6, 250e6, 999e6, 1e9, 30e9, 61e9, 3600e9}
	now := time.Now().UnixNano()
	natives := 0
	const n = 600
	for i := range n {
		switch step := steps[rng.IntN(len(steps))]; {
		case rng.IntN(10) == 0:
			now += rng.Int64N(120e9)
		default:
			now += step
		}
		// Now and then the key holds something the library never left.
		if rng.IntN(12) == 0 {
			k := keyNames[rng.IntN(len(keyNames))]
			pre := [][]string{{"SET", k, "abc"}, {"SET", k, "12"}, {"SET", k, "1.5"}, {"SET", k, "1e3"}, {"HSET", k, "f", "v"},
				{"RPUSH", k, "abc"}, {"RPUSH", k, "1.5"}, {"DEL", k}, {"PERSIST", k}, {"PEXPIRE", k, "10"}, {"SET", k, "-0"}}[rng.IntN(11)]
			exec(nat, now, pre...)
			exec(interp, now, pre...)
		}
		call := s.calls[rng.IntN(len(s.calls))]
		keys := make([][]byte, len(call[0]))
		for j := range keys {
			keys[j] = []byte(keyNames[rng.IntN(len(keyNames))])
		}
		if rng.IntN(40) == 0 {
			keys = nil
		}
		argv := make([][]byte, len(call[1]))
		for j, a := range call[1] {
			argv[j] = []byte(a)
		}
		// Arguments that are instants (limits' moving window) move with
		// the clock.
		for j, a := range call[1] {
			if f, err := strconv.ParseFloat(a, 64); err == nil && f > 1e9 && f < 1e10 && strings.Contains(a, ".") {
				argv[j] = []byte(strconv.FormatFloat(float64(now)/1e9-float64(rng.IntN(3))*30, 'f', -1, 64))
			}
		}
		switch r := rng.IntN(10); {
		case r < 3 && len(argv) > 0:
			argv[rng.IntN(len(argv))] = []byte(odd[rng.IntN(len(odd))])
		case r == 3 && len(argv) > 0:
			argv = argv[:len(argv)-1]
		case r == 4:
			argv = append(argv, []byte("extra"))
		}
		before := nat.eng.NativeRuns()
		got, want := eval(nat, now, keys, argv), eval(interp, now, keys, argv)
		if nat.eng.NativeRuns() > before {
			natives++
		}
		if stopped(got) && stopped(want) {
			// Both ran into a budget (an amount of 10^15 entries): which
			// of time and memory stopped each first may differ.
			got = want
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("step %d, KEYS %q ARGV %q:\n native      %+v\n interpreter %+v", i, keys, argv, got, want)
		}
		if a, b := dump(nat, now), dump(interp, now); a != b {
			t.Fatalf("step %d, KEYS %q ARGV %q left different keys:\n native      %s\n interpreter %s", i, keys, argv, a, b)
		}
	}
	if interp.eng.NativeRuns() != 0 {
		t.Fatalf("the interpreter side ran %d calls natively", interp.eng.NativeRuns())
	}
	// A fair share of the steps must have run natively, or the comparison
	// proved little (the generator's mix leaves about a third of some
	// scripts' steps native: 195 of 600 for one seed of allowAtMost).
	if natives < n/5 {
		t.Fatalf("only %d of %d steps ran natively", natives, n)
	}
	t.Logf("%d of %d steps ran natively", natives, n)
}

// stopped reports whether a script's reply says a budget stopped it.
func stopped(r keyspace.Reply) bool {
	return r.IsError() && strings.HasPrefix(r.Str, "ERR Script stopped")
}
