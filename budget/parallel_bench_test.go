package budget

import (
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/engine"
)

// BenchmarkParallelAcquire measures how budget-form calls scale with
// cores; run it with -cpu 1,2,4,8,16 (ns/op is the inverse of the whole
// store's throughput at that GOMAXPROCS). Each call names one of 100,000
// users, as RL.ACQUIRE <path> KEY __rand_int__ under redis-benchmark -r
// 100000, and every call is admitted:
//
//	private   free (private) → free/api (scope user): one bucket per call
//	enforce   acme (enforce) → acme/api (scope user): acme's aggregate, which
//	          every call shares, and the user's bucket
//	enforce3  system (enforce) → system/p (enforce) → system/p/t (scope
//	          user): two shared aggregates and the user's bucket
func BenchmarkParallelAcquire(b *testing.B) {
	const big = `"sustained":{"rate":1000000000,"window":"second"}`
	tree := map[string]string{
		"free":       `{"sharing":"private",` + big + `}`,
		"free/api":   `{"scope":"user",` + big + `}`,
		"acme":       `{"sharing":"enforce",` + big + `}`,
		"acme/api":   `{"scope":"user",` + big + `}`,
		"system":     `{"sharing":"enforce",` + big + `}`,
		"system/p":   `{"sharing":"enforce",` + big + `}`,
		"system/p/t": `{"scope":"user",` + big + `}`,
	}
	nodes := map[string]Config{}
	for p, js := range tree {
		c, err := ParseJSON([]byte(js))
		if err != nil {
			b.Fatal(err)
		}
		nodes[p] = c
	}
	ch, err := Empty.Import(nodes, true, 1)
	if err != nil {
		b.Fatal(err)
	}
	tr := ch.Tree
	subjects := make([][]byte, 100_000)
	for i := range subjects {
		subjects[i] = strconv.AppendInt(nil, int64(i), 10)
	}
	for _, c := range []struct {
		name, path string
		levels     int
	}{{"private", "free/api", 1}, {"enforce", "acme/api", 2}, {"enforce3", "system/p/t", 3}} {
		b.Run(c.name, func(b *testing.B) {
			s := engine.New(engine.Options{})
			var sc Scratch
			call := Call{Path: []byte(c.path), Subject: subjects[0]}
			if o, err := tr.Acquire(s, time.Now().UnixNano(), &call, &sc); err != nil || o.Levels != c.levels || o.Allowed != 1 {
				b.Fatalf("%s: levels %d, allowed %d, %v", c.path, o.Levels, o.Allowed, err)
			}
			for _, sub := range subjects[1:] { // every user's bucket exists
				call.Subject = sub
				tr.Acquire(s, time.Now().UnixNano(), &call, &sc)
			}
			var seq atomic.Int64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := int(seq.Add(1)) * 7919
				var sc Scratch
				call := Call{Path: []byte(c.path)}
				for pb.Next() {
					i++
					call.Subject = subjects[i%len(subjects)]
					if o, _ := tr.Acquire(s, time.Now().UnixNano(), &call, &sc); o.Allowed != 1 {
						b.Error("denied")
						return
					}
				}
			})
		})
	}
}
