// Command writes measures configuration writes: it sends N distinct
// RL.BUDGET SETs (path w/<i>, RATE 10) to a sluice node over C
// connections, waits for every reply, and prints the time they took. With
// --ready it instead measures how long a node takes to report /readyz 200
// (for a node just started on a data directory with a long log).
//
//	go run ./bench/writes --addr 127.0.0.1:6380 -n 10000 -c 16
//	go run ./bench/writes --ready 127.0.0.1:9380 --since-file /tmp/started
package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:6380", "RESP address of the node")
	n := flag.Int("n", 10000, "writes to send (1 to 10000000)")
	conns := flag.Int("c", 16, "connections (1 to 1024)")
	prefix := flag.String("prefix", "w", "first path segment of the written paths")
	ready := flag.String("ready", "", "HTTP address: poll /readyz until 200 and print how long it took since --since (unix ns) or now")
	since := flag.Int64("since", 0, "with --ready: unix ns to measure from (default: now)")
	flag.Parse()
	if *ready != "" {
		waitReady(*ready, *since)
		return
	}
	if *n < 1 || *n > 10000000 || *conns < 1 || *conns > 1024 {
		fmt.Fprintln(os.Stderr, "writes: -n must be 1 to 10000000 and -c 1 to 1024")
		os.Exit(2)
	}
	var next, failed atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for c := 0; c < *conns; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := redis.NewClient(&redis.Options{Addr: *addr, ReadTimeout: 30 * time.Second, MaxRetries: -1})
			defer cl.Close()
			for {
				i := next.Add(1) - 1
				if i >= int64(*n) {
					return
				}
				err := cl.Do(context.Background(), "RL.BUDGET", "SET", *prefix+"/"+strconv.FormatInt(i, 10), "RATE", "10").Err()
				if err != nil {
					if failed.Add(1) <= 3 {
						fmt.Fprintln(os.Stderr, "writes:", err)
					}
				}
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	fmt.Printf("%d RL.BUDGET SETs over %d connections in %.2fs (%.0f/s), %d failed\n", *n, *conns, el.Seconds(), float64(*n)/el.Seconds(), failed.Load())
	if failed.Load() > 0 {
		os.Exit(1)
	}
}

func waitReady(addr string, since int64) {
	from := time.Now()
	if since > 0 {
		from = time.Unix(0, since)
	}
	for {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				fmt.Printf("ready %.2fs after start\n", time.Since(from).Seconds())
				return
			}
		}
		if time.Since(from) > 10*time.Minute {
			fmt.Fprintln(os.Stderr, "writes: not ready after 10 minutes")
			os.Exit(1)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
