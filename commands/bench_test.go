package commands

import (
	"bytes"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/sluice-rl/sluice/access"
	"github.com/sluice-rl/sluice/reserve"
	"github.com/sluice-rl/sluice/testsupport/testkit"
)

// BenchmarkExecAcquire runs RL.ACQUIRE through the whole command path
// (lookup, arity, permission, parsing, engine, reply, metrics) into an
// in-memory connection.
func BenchmarkExecAcquire(b *testing.B) { benchExecAcquire(b, false) }

// BenchmarkExecAcquireRESP3 is the same on a connection that sent HELLO 3.
func BenchmarkExecAcquireRESP3(b *testing.B) { benchExecAcquire(b, true) }

func benchExecAcquire(b *testing.B, resp3 bool) {
	env := testEnv(b)
	s := NewSession(1, "127.0.0.1:1", "127.0.0.1:2", access.RoleAdmin, func() {})
	s.Stats = env.Metrics.Connect() // as a connection's session
	c := NewCapture()
	if resp3 {
		env.Exec(c, s, [][]byte{[]byte("HELLO"), []byte("3")})
		c.Reset()
	}
	keys := make([][]byte, 1024)
	for i := range keys {
		keys[i] = []byte("key:" + strconv.Itoa(i))
	}
	args := [][]byte{[]byte("RL.ACQUIRE"), nil, []byte("RATE"), []byte("100"), []byte("BURST"), []byte("100")}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		args[1] = keys[i&1023]
		env.Exec(c, s, args)
		if i&1023 == 0 {
			c.Reset()
		}
	}
}

func BenchmarkExecBudgetAcquire(b *testing.B) { benchExecBudgetAcquire(b, false) }

// BenchmarkExecBudgetAcquireRESP3 is the same on a connection that sent HELLO 3.
func BenchmarkExecBudgetAcquireRESP3(b *testing.B) { benchExecBudgetAcquire(b, true) }

func benchExecBudgetAcquire(b *testing.B, resp3 bool) {
	env := testEnv(b)
	env.Run("RL.BUDGET", "SET", "system", "RATE", "100000000", "SHARING", "enforce")
	env.Run("RL.BUDGET", "SET", "system/p", "RATE", "10000000", "SHARING", "enforce")
	env.Run("RL.BUDGET", "SET", "system/p/t", "RATE", "1000000", "SHARING", "enforce", "SCOPE", "user")
	s := NewSession(1, "127.0.0.1:1", "127.0.0.1:2", access.RoleAdmin, func() {})
	c := NewCapture()
	if resp3 {
		env.Exec(c, s, [][]byte{[]byte("HELLO"), []byte("3")})
		c.Reset()
	}
	args := [][]byte{[]byte("RL.ACQUIRE"), []byte("system/p/t/api"), []byte("KEY"), []byte("user-1")}
	env.Exec(c, s, args)
	if got := string(c.Bytes()); got[:4] != "*6\r\n" {
		b.Fatalf("reply %q", got)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		env.Exec(c, s, args)
		if i&1023 == 0 {
			c.Reset()
		}
	}
}

func BenchmarkExecAcquireWithQuota(b *testing.B) {
	env := testEnv(b)
	s := NewSession(1, "127.0.0.1:1", "127.0.0.1:2", access.RoleAdmin, func() {})
	c := NewCapture()
	keys := make([][]byte, 1024)
	for i := range keys {
		keys[i] = []byte("key:" + strconv.Itoa(i))
	}
	args := [][]byte{[]byte("RL.ACQUIRE"), nil, []byte("RATE"), []byte("100000"), []byte("QUOTA"), []byte("1000000000000"),
		[]byte("PER"), []byte("month"), []byte("TZ"), []byte("Europe/Paris")}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		args[1] = keys[i&1023]
		env.Exec(c, s, args)
		if i&1023 == 0 {
			c.Reset()
		}
	}
}

func BenchmarkExecBudgetAcquireWithQuota(b *testing.B) {
	env := testEnv(b)
	env.Run("RL.BUDGET", "SET", "system", "RATE", "100000000", "SHARING", "enforce", "QUOTA", "1000000000000", "PER", "month")
	env.Run("RL.BUDGET", "SET", "system/p/t", "RATE", "1000000", "SCOPE", "user", "QUOTA", "1000000000000", "PER", "day")
	s := NewSession(1, "127.0.0.1:1", "127.0.0.1:2", access.RoleAdmin, func() {})
	c := NewCapture()
	args := [][]byte{[]byte("RL.ACQUIRE"), []byte("system/p/t"), []byte("KEY"), []byte("user-1")}
	env.Exec(c, s, args)
	if got := string(c.Bytes()); got[:4] != "*6\r\n" {
		b.Fatalf("reply %q", got)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		env.Exec(c, s, args)
		if i&1023 == 0 {
			c.Reset()
		}
	}
}

// The hot paths allocate nothing per call, quotas included.
func TestAcquireAllocatesNothing(t *testing.T) {
	env := testEnv(t)
	env.Run("RL.BUDGET", "SET", "system", "RATE", "100000000", "SHARING", "enforce", "QUOTA", "1000000000000", "PER", "month")
	env.Run("RL.BUDGET", "SET", "system/p/t", "RATE", "1000000", "SCOPE", "user", "QUOTA", "1000000000000", "PER", "day")
	s := NewSession(1, "127.0.0.1:1", "127.0.0.1:2", access.RoleAdmin, func() {})
	c := NewCapture()
	for _, call := range []string{
		"RL.ACQUIRE key RATE 100000 BURST 100000",
		"RL.ACQUIRE key RATE 100000 QUOTA 1000000000000 PER month TZ Europe/Paris",
		"RL.ACQUIRE q QUOTA 1000000000000 PER week",
		"RL.ACQUIRE system/p/t KEY user-1",
		"RL.PEEK key RATE 100000 BURST 100000",
	} {
		args := bytes.Fields([]byte(call))
		env.Exec(c, s, args) // warm the session's buffers
		if n := testkit.LeastAllocsPerRun(200, func() {
			c.Reset()
			env.Exec(c, s, args)
		}); n != 0 {
			t.Errorf("%s: %.1f allocations a call", call, n)
		}
	}
}

// BenchmarkExecReserveSettle runs RL.RESERVE then RL.SETTLE of its id
// through the whole command path, inline, beside BenchmarkExecAcquire: one
// iteration is one reservation opened and settled.
func BenchmarkExecReserveSettle(b *testing.B) {
	benchReserveSettle(b, nil, "RATE", "1000000000000", "COST", "1")
}

// BenchmarkExecBudgetReserveSettle is the same in the budget form of
// BenchmarkExecBudgetAcquire (three levels).
func BenchmarkExecBudgetReserveSettle(b *testing.B) {
	benchReserveSettle(b, func(env *Env) {
		env.Run("RL.BUDGET", "SET", "system", "RATE", "100000000", "SHARING", "enforce")
		env.Run("RL.BUDGET", "SET", "system/p", "RATE", "10000000", "SHARING", "enforce")
		env.Run("RL.BUDGET", "SET", "system/p/t", "RATE", "1000000", "SHARING", "enforce", "SCOPE", "user")
	}, "KEY", "user-1", "COST", "1")
}

func benchReserveSettle(b *testing.B, setup func(*Env), opts ...string) {
	env := testEnv(b)
	env.Service.Holds = reserve.New("n0", 1<<20, 0)
	target := "key"
	if setup != nil {
		setup(env)
		target = "system/p/t/api"
	}
	s := NewSession(1, "127.0.0.1:1", "127.0.0.1:2", access.RoleAdmin, func() {})
	c := NewCapture()
	res := [][]byte{[]byte("RL.RESERVE"), []byte(target)}
	for _, o := range opts {
		res = append(res, []byte(o))
	}
	settle := [][]byte{[]byte("RL.SETTLE"), nil, []byte("ACTUAL"), []byte("1")}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c.Reset()
		env.Exec(c, s, res)
		r := c.Bytes()
		r = r[:len(r)-2]
		settle[1] = r[bytes.LastIndexByte(r, '\n')+1:]
		c.Reset()
		env.Exec(c, s, settle)
		if r := c.Bytes(); r[0] != '*' {
			b.Fatalf("settle: %q", r)
		}
	}
}

// BenchmarkExecAcquireParallel runs RL.ACQUIRE from GOMAXPROCS
// connections at once, each with its own session, counts and keys: what
// the connections share (metrics, the console's accounting, engine
// shards) shows as the figure stops scaling with -cpu.
func BenchmarkExecAcquireParallel(b *testing.B) {
	env := testEnv(b)
	var next atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		id := next.Add(1)
		s := NewSession(id, "127.0.0.1:1", "127.0.0.1:2", access.RoleAdmin, func() {})
		s.Stats = env.Metrics.Connect()
		c := NewCapture()
		keys := make([][]byte, 1024)
		for i := range keys {
			keys[i] = []byte("key:" + strconv.FormatInt(id, 10) + ":" + strconv.Itoa(i))
		}
		args := [][]byte{[]byte("RL.ACQUIRE"), nil, []byte("RATE"), []byte("100"), []byte("BURST"), []byte("100")}
		for i := 0; pb.Next(); i++ {
			args[1] = keys[i&1023]
			env.Exec(c, s, args)
			if i&1023 == 0 {
				c.Reset()
			}
		}
	})
}
