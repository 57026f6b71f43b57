package limiter_test

import (
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/limiter"
	"github.com/sluice-rl/sluice/testsupport/testlimiter"
	"github.com/sluice-rl/sluice/usage"
)

// benchBudgets is a three-level tree whose every level enforces: the
// enforcing acquire of the hot-path budget (docs/benchmarks.md).
const benchBudgets = `{"budgets":{
 "acme":{"sustained":{"rate":1000000000,"window":"second"}},
 "acme/api":{"sustained":{"rate":1000000000,"window":"second"}},
 "acme/api/v1":{"scope":"user","sustained":{"rate":1000000000,"window":"second"}}}}`

// BenchmarkDecision is one decided call through the service, as RESP and
// HTTP make it, over 100,000 keys: inline (RATE in the call) and through
// the three enforcing levels above, with the console's accounting (the
// usage recorder: top keys, per-node counts) off and on. The hot-path
// budget: on costs at most 10 % above off, and neither allocates.
func BenchmarkDecision(b *testing.B) {
	const keys = 100_000
	lim, _ := engine.NewLimit(engine.TokenBucket, 1_000_000_000, time.Second, 1_000_000_000)
	names := make([][]byte, keys)
	for i := range names {
		names[i] = []byte("key:" + strconv.Itoa(i))
	}
	for _, form := range []string{"inline", "hierarchy"} {
		for _, acct := range []string{"off", "on"} {
			b.Run(form+"/accounting="+acct, func(b *testing.B) {
				var clock atomic.Int64
				clock.Store(t0)
				s := testlimiter.New(b, benchBudgets, 64, func() int64 { return clock.Add(1000) })
				if acct == "on" {
					s.Recorder = usage.NewRecorder()
				}
				var seq atomic.Uint64
				b.ReportAllocs()
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					var sc limiter.Scratch
					c := limiter.Call{Rate: &lim}
					if form == "hierarchy" {
						c = limiter.Call{Path: []byte("acme/api/v1")}
					}
					for i := seq.Add(7919); pb.Next(); i += 7919 {
						k := names[i%keys]
						if form == "inline" {
							c.Path = k
						} else {
							c.Subject = k
						}
						if out, err := s.Acquire(&c, &sc, nil); err != nil || out.Allowed != 1 {
							b.Fatalf("%+v %v", out, err)
						}
					}
				})
			})
		}
	}
}
