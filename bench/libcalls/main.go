// Command libcalls measures go-redis/redis_rate's calls, unchanged, against
// Redis or sluice (bench/libraries.sh runs it): -workers goroutines call
// Limiter.Allow on random keys for -duration, spread over one limiter per
// address in -addrs, and it prints the calls per second and how many of
// them failed.
package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
)

func main() {
	addrs := flag.String("addrs", "127.0.0.1:6379", "comma-separated RESP addresses: one limiter per address, workers spread over them")
	workers := flag.Int("workers", 32, "goroutines calling at once")
	dur := flag.Duration("duration", 5*time.Second, "how long to call")
	keys := flag.Int("keys", 10000, "distinct keys, chosen at random")
	flag.Parse()
	var ls []*redis_rate.Limiter
	for _, a := range strings.Split(*addrs, ",") {
		c := redis.NewClient(&redis.Options{Addr: a, Protocol: 2, PoolSize: *workers, MaxRetries: -1})
		defer c.Close()
		ls = append(ls, redis_rate.NewLimiter(c))
	}
	limit := redis_rate.PerMinute(100)
	ctx := context.Background()
	var calls, failed atomic.Int64
	var wg sync.WaitGroup
	end := time.Now().Add(*dur)
	for w := range *workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := ls[w%len(ls)]
			for time.Now().Before(end) {
				if _, err := l.Allow(ctx, fmt.Sprintf("k:%d", rand.IntN(*keys)), limit); err != nil {
					failed.Add(1)
				}
				calls.Add(1)
			}
		}()
	}
	wg.Wait()
	fmt.Printf("%.0f calls/s, %d failed\n", float64(calls.Load())/dur.Seconds(), failed.Load())
	if failed.Load() > 0 {
		os.Exit(1)
	}
}
