package server

import (
	"fmt"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/testsupport/resptest"
)

// At --max-buckets with no bucket full, a call that needs a new bucket is
// refused and counted, and keys already in use keep their limits: no
// bucket that holds consumption is forgotten to make room. Budget calls
// get an error naming the setting; inline calls are denied with a retry
// time.
func TestNewBucketsAreRefusedAtMaxBuckets(t *testing.T) {
	n := startNode(t, func(c *Config) { c.MaxBuckets = 1000; c.Shards = 1 })
	c := resptest.Dial(t, n.Server.RespAddr())
	if got := c.Do("RL.BUDGET", "SET", "acme/api", "RATE", "5", "PER", "hour", "SCOPE", "user"); got != "+OK" {
		t.Fatal(got)
	}
	if got := c.Do("RL.ACQUIRE", "acme/api", "KEY", "victim"); !strings.HasPrefix(got, "[1 4 5 ") {
		t.Fatalf("the victim's first call: %s", got)
	}
	for i := 0; i < 999; i++ {
		if got := c.Do("RL.ACQUIRE", fmt.Sprintf("flood:%d", i), "RATE", "1", "PER", "day"); !strings.HasPrefix(got, "[1 ") {
			t.Fatalf("flood key %d below the bound: %s", i, got)
		}
	}
	if got := c.Do("RL.ACQUIRE", "flood:x", "RATE", "1", "PER", "day"); !strings.HasPrefix(got, "[0 0 1 ") {
		t.Fatalf("an inline key at the bound: %s", got)
	}
	want := "-ERR no room for a new bucket: the store is at --max-buckets and every bucket holds consumption; new keys are refused until buckets refill (keys in use are limited as before)"
	if got := c.Do("RL.ACQUIRE", "acme/api", "KEY", "newcomer"); got != want {
		t.Fatalf("a budget key at the bound:\n got %s\nwant %s", got, want)
	}
	for i := 0; i < 4; i++ {
		if got := c.Do("RL.ACQUIRE", "acme/api", "KEY", "victim"); !strings.HasPrefix(got, "[1 ") {
			t.Fatalf("the victim's call %d: %s", i+2, got)
		}
	}
	if got := c.Do("RL.ACQUIRE", "acme/api", "KEY", "victim"); !strings.HasPrefix(got, "[0 0 5 ") {
		t.Fatalf("the victim's sixth call of 5 per hour: %s", got)
	}
	m := scrape(t, n.Server.HTTPAddr())
	if got := m["sluice_buckets_refused_total"]; got != 2 {
		t.Errorf("sluice_buckets_refused_total = %v, want 2", got)
	}
	if got := c.Do("INFO", "stats"); !strings.Contains(got, "refused_new_buckets:2") {
		t.Errorf("INFO stats: %s", got)
	}
}
