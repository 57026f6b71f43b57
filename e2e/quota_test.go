package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// quotaPairs reads RL.QUOTA's reply (a map in RESP3) into a map.
func quotaPairs(c *redis.Client, args ...any) (map[string]any, error) {
	v, err := c.Do(context.Background(), append([]any{"RL.QUOTA"}, args...)...).Result()
	if err != nil {
		return nil, err
	}
	return asMap(v)
}

func TestQuotasOnTheRealBinaryOutliveARestart(t *testing.T) {
	dir, raft := t.TempDir(), "127.0.0.1:"+freePort(t)
	args := []string{"--resp-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--raft-addr", raft, "--data-dir", dir}
	p := start(t, args...)
	c := client(t, p.Resp)
	waitReady(t, c)

	// Inline: 3 a year beside a rate; a budget node: 2 a year per user in
	// New York. (Years, so that no period ends during the test.)
	for i := 0; i < 3; i++ {
		r := do(t, c, "RL.ACQUIRE", "api:acme", "RATE", 100, "QUOTA", 3, "PER", "year").([]any)
		if r[0].(int64) != 1 || r[5] != "quota:api:acme" {
			t.Fatalf("call %d: %v", i, r)
		}
	}
	do(t, c, "RL.BUDGET", "SET", "plans/free", "RATE", 100, "SCOPE", "user", "QUOTA", 2, "PER", "year", "TZ", "America/New_York")
	for i := 0; i < 2; i++ {
		do(t, c, "RL.ACQUIRE", "plans/free", "KEY", "alice")
	}
	// RL.QUOTA without QUOTA arguments knows an inline key once its count
	// is committed.
	eventually(t, 10*time.Second, "the inline count to be committed", func() bool {
		m, err := quotaPairs(c, "api:acme")
		return err == nil && m["used"] == int64(3) && m["remaining"] == int64(0) && m["period"] == "year"
	})
	m, err := quotaPairs(c, "plans/free", "KEY", "alice")
	if err != nil || m["level"] != "plans/free#alice" || m["used"] != int64(2) || m["limit"] != int64(2) || m["period"] != "year" {
		t.Fatalf("RL.QUOTA plans/free KEY alice: %v %v", m, err)
	}
	now := time.Now()
	ny, _ := time.LoadLocation("America/New_York")
	if want := time.Date(now.In(ny).Year()+1, 1, 1, 0, 0, 0, 0, ny).Unix(); m["resets_at"] != want {
		t.Fatalf("resets_at %v, want %d (next New Year in New York)", m["resets_at"], want)
	}
	eventually(t, 10*time.Second, "alice's count to be committed", func() bool {
		r, err := c.Do(context.Background(), "INFO", "raft").Text()
		return err == nil && strings.Contains(r, "quota_counters:2\r\n")
	})
	if err := p.stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}

	p = start(t, args...)
	c = client(t, p.Resp)
	waitReady(t, c)
	for _, call := range [][]any{
		{"RL.ACQUIRE", "api:acme", "RATE", 100, "QUOTA", 3, "PER", "year"},
		{"RL.ACQUIRE", "plans/free", "KEY", "alice"},
	} {
		r := do(t, c, call...).([]any)
		if r[0].(int64) != 0 || r[1].(int64) != 0 || r[3].(int64) <= 0 {
			t.Fatalf("%v after a restart: %v (the quota is spent)", call, r)
		}
	}
	if r := do(t, c, "RL.ACQUIRE", "plans/free", "KEY", "bob").([]any); r[0].(int64) != 1 || r[5] != "quota:plans/free#bob" {
		t.Fatalf("bob: %v", r)
	}
}
