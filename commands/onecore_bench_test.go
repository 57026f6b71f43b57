package commands

import (
	"strconv"
	"testing"

	"github.com/sluice-rl/sluice/access"
	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/raftfsm"
)

// BenchmarkExecOneCore runs bench/onecore.sh's two sluice workloads
// through the command path over 100,000 keys: an inline limit, and a
// budget node under an enforcing parent.
func BenchmarkExecOneCore(b *testing.B) {
	// The key is written into one buffer per call, as the server's
	// arguments lie in its connection's read buffer: hot in the cache
	// (100,000 separate slices would add a miss no server call pays).
	key := append(make([]byte, 0, 32), "key:"...)
	next := func(i int) []byte { return strconv.AppendInt(key[:4], int64((i*7919)%100000), 10) }
	run := func(b *testing.B, args [][]byte, at int) {
		args[at] = next(0)
		env := testEnv(b)
		// The server's own store: shards sized to the machine, its bound
		// on buckets (testEnv's is small enough to refuse these keys).
		env.Service.Store = engine.New(engine.Options{MaxBuckets: 10000000})
		env.Service.Store.SetQuotaSource(env.Cluster.(*raftfsm.Node).FSM())
		env.Run("RL.BUDGET", "SET", "acme", "RATE", "1000000000", "PER", "second", "SHARING", "enforce")
		env.Run("RL.BUDGET", "SET", "acme/api", "RATE", "1000000", "PER", "second", "SCOPE", "user")
		s := NewSession(1, "127.0.0.1:1", "127.0.0.1:2", access.RoleAdmin, func() {})
		s.Stats = env.Metrics.Connect()
		c := NewCapture()
		env.Exec(c, s, args)
		if got := c.Bytes(); got[0] != '*' {
			b.Fatalf("reply %q", got)
		}
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			args[at] = next(i)
			env.Exec(c, s, args)
			if i&1023 == 0 {
				c.Reset()
			}
		}
	}
	b.Run("inline", func(b *testing.B) {
		run(b, [][]byte{[]byte("RL.ACQUIRE"), nil, []byte("RATE"), []byte("100"), []byte("BURST"), []byte("100")}, 1)
	})
	b.Run("enforcing", func(b *testing.B) {
		run(b, [][]byte{[]byte("RL.ACQUIRE"), []byte("acme/api"), []byte("KEY"), nil}, 3)
	})
}
