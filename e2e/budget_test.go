package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func client(t *testing.T, addr string) *redis.Client {
	t.Helper()
	// Writes may wait up to --apply-timeout (5s) for a leader: the client
	// waits longer than that.
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ReadTimeout: 10 * time.Second})
	t.Cleanup(func() { c.Close() })
	return c
}

// waitReady waits until the node answers configuration reads with a leader.
func waitReady(t *testing.T, c *redis.Client) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		inf, err := clusterInfo(c)
		if err == nil && inf["leader_addr"] != "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no leader within 20s: %v %v", inf, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func do(t *testing.T, c *redis.Client, args ...any) any {
	t.Helper()
	v, err := c.Do(context.Background(), args...).Result()
	if err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	return v
}

func doErr(t *testing.T, c *redis.Client, args ...any) string {
	t.Helper()
	err := c.Do(context.Background(), args...).Err()
	if err == nil {
		t.Fatalf("%v: no error", args)
	}
	return err.Error()
}

// acquireN sends n acquires in one pipeline and counts the admitted ones;
// it returns the last reply and how long the pipeline took (refill during
// that time may admit a few more than a frozen clock would).
func acquireN(t *testing.T, c *redis.Client, n int, args ...any) (int, []any) {
	t.Helper()
	admitted, last, _ := acquireTimed(t, c, n, args...)
	return admitted, last
}

func acquireTimed(t *testing.T, c *redis.Client, n int, args ...any) (int, []any, time.Duration) {
	t.Helper()
	start := time.Now()
	cmds, err := c.Pipelined(context.Background(), func(p redis.Pipeliner) error {
		for i := 0; i < n; i++ {
			p.Do(context.Background(), append([]any{"RL.ACQUIRE"}, args...)...)
		}
		return nil
	})
	elapsed := time.Since(start)
	if err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	admitted := 0
	var last []any
	for _, cmd := range cmds {
		last = cmd.(*redis.Cmd).Val().([]any)
		if last[0] == int64(1) {
			admitted++
		}
	}
	return admitted, last, elapsed
}

// within checks an admitted count against the frozen-clock figure, allowing
// the tokens a refill of one per interval adds while the calls ran.
func within(t *testing.T, what string, got, want int, elapsed, interval time.Duration) {
	t.Helper()
	extra := int(elapsed / interval)
	if got < want || got > want+extra {
		t.Fatalf("%s: admitted %d, want %d (+%d for %v of refill)", what, got, want, extra, elapsed)
	}
}

const (
	systemJSON  = `{"sharing":"enforce","sustained":{"rate":10000,"window":"minute"},"burst":{"capacity":1000},"budget":{"mode":"allocated","total":10000}}`
	partnerJSON = `{"sharing":"enforce","sustained":{"rate":5000,"window":"minute"},"burst":{"capacity":500},"budget":{"mode":"allocated","total":5000,"overcommit_ratio":1.2}}`
	tenantJSON  = `{"sustained":{"rate":1000,"window":"minute"},"burst":{"capacity":100}}`
)

func TestWorkedExampleEffectiveLimitAndHundredAdmissions(t *testing.T) {
	p := single(t)
	c := client(t, p.Resp)
	waitReady(t, c)
	for _, kv := range [][2]string{{"system", systemJSON}, {"system/p", partnerJSON}, {"system/p/t", tenantJSON}} {
		if got := do(t, c, "RL.BUDGET", "SET", kv[0], kv[1]); got != "OK" {
			t.Fatalf("SET %s: %v", kv[0], got)
		}
	}
	var node struct {
		Effective struct {
			Rate   int64
			Window string
			Burst  int64
		}
		Version int64
	}
	if err := json.Unmarshal([]byte(do(t, c, "RL.BUDGET", "GET", "system/p/t").(string)), &node); err != nil {
		t.Fatal(err)
	}
	if node.Effective.Rate != 1000 || node.Effective.Window != "minute" || node.Effective.Burst != 100 || node.Version == 0 {
		t.Fatalf("GET system/p/t: %+v", node)
	}
	admitted, last, took := acquireTimed(t, c, 101, "system/p/t")
	if took < 60*time.Millisecond && (admitted != 100 || last[0] != int64(0) || last[5] != "system/p/t") {
		t.Fatalf("admitted %d; 101st reply %v", admitted, last)
	}
	within(t, "system/p/t", admitted, 100, took, 60*time.Millisecond) // 1000/minute
}

func TestAllocationCheckAndOvercommit(t *testing.T) {
	p := single(t)
	c := client(t, p.Resp)
	waitReady(t, c)
	for _, ratio := range []string{"1.0", "1.5"} {
		parent := "alloc" + strings.ReplaceAll(ratio, ".", "")
		do(t, c, "RL.BUDGET", "SET", parent, "RATE", "5000", "PER", "minute", "MODE", "allocated", "TOTAL", "5000", "OVERCOMMIT", ratio)
		do(t, c, "RL.BUDGET", "SET", parent+"/a", "RATE", "2000", "PER", "minute")
		do(t, c, "RL.BUDGET", "SET", parent+"/b", "RATE", "1000", "PER", "minute")
		if ratio == "1.0" {
			if e := doErr(t, c, "RL.BUDGET", "SET", parent+"/c", "RATE", "3000", "PER", "minute"); e != "BUDGET children allocate 6000/minute, parent total 5000/minute × overcommit 1.0" {
				t.Fatalf("at 1.0: %s", e)
			}
			if got := c.Do(context.Background(), "RL.BUDGET", "GET", parent+"/c").Err(); got != redis.Nil {
				t.Fatalf("refused child exists: %v", got)
			}
		} else {
			if got := do(t, c, "RL.BUDGET", "SET", parent+"/c", "RATE", "3000", "PER", "minute"); got != "OK WARN overcommitted: children allocate 6000/minute, parent total 5000/minute × overcommit 1.5" {
				t.Fatalf("at 1.5: %v", got)
			}
			if e := doErr(t, c, "RL.BUDGET", "SET", parent, "RATE", "5000", "PER", "minute", "MODE", "allocated", "TOTAL", "3000", "OVERCOMMIT", "1.5"); !strings.HasPrefix(e, "BUDGET children allocate 6000/minute, parent total 3000/minute") {
				t.Fatalf("lowering the total: %s", e)
			}
		}
	}
}

func TestSharedPoolInheritEnforcePrivate(t *testing.T) {
	p := single(t)
	c := client(t, p.Resp)
	waitReady(t, c)
	do(t, c, "RL.BUDGET", "SET", "pool", `{"sustained":{"rate":100,"window":"minute"},"budget":{"mode":"shared","total":100}}`)
	do(t, c, "RL.BUDGET", "SET", "pool/a", `{}`)
	do(t, c, "RL.BUDGET", "SET", "pool/b", `{}`)
	a, _, ta := acquireTimed(t, c, 70, "pool/a")
	b, last, tb := acquireTimed(t, c, 50, "pool/b")
	if a != 70 || last[5] != "pool" {
		t.Fatalf("shared pool: a %d, b %d, last %v", a, b, last)
	}
	within(t, "pool/b", b, 30, ta+tb, 600*time.Millisecond) // 100/minute
	for sharing, want := range map[string][2]int{"inherit": {10, 10}, "enforce": {10, 0}, "private": {20, 20}} {
		do(t, c, "RL.BUDGET", "SET", sharing, "RATE", "10", "PER", "minute", "SHARING", sharing)
		c1, _, t1 := acquireTimed(t, c, 20, sharing+"/one")
		c2, last, t2 := acquireTimed(t, c, 20, sharing+"/two")
		within(t, sharing+"/one", c1, want[0], t1, 6*time.Second) // 10/minute
		within(t, sharing+"/two", c2, want[1], t1+t2, 6*time.Second)
		if sharing == "private" && (last[1] != int64(-1) || last[2] != int64(-1)) {
			t.Fatalf("private parent's child should be unlimited: %v", last)
		}
	}
}

func TestScopeUserDeniedConsumesNothingAndCost(t *testing.T) {
	p := single(t)
	c := client(t, p.Resp)
	waitReady(t, c)
	do(t, c, "RL.BUDGET", "SET", "sys", "RATE", "50", "PER", "minute", "SHARING", "enforce")
	do(t, c, "RL.BUDGET", "SET", "sys/api", "RATE", "5", "PER", "minute", "SCOPE", "user")
	if e := doErr(t, c, "RL.ACQUIRE", "sys/api"); e != "ERR budget 'sys/api' has scope user: KEY required" {
		t.Fatal(e)
	}
	if got, _ := acquireN(t, c, 6, "sys/api", "KEY", "alice"); got != 5 {
		t.Fatalf("alice admitted %d of 6", got)
	}
	r := do(t, c, "RL.ACQUIRE", "sys/api", "KEY", "bob").([]any)
	if r[0] != int64(1) || r[5] != "sys/api#bob" {
		t.Fatalf("bob: %v", r)
	}
	// Denied calls (alice's 6th, and a cost over her capacity) took nothing
	// from sys: 50 − 5 (alice) − 1 (bob) = 44 remain for another path.
	doErr := c.Do(context.Background(), "RL.ACQUIRE", "sys/api", "KEY", "alice", "COST", "40").Val().([]any)
	if doErr[0] != int64(0) {
		t.Fatalf("cost 40: %v", doErr)
	}
	if r := do(t, c, "RL.ACQUIRE", "sys/other", "COST", "44").([]any); r[0] != int64(1) {
		t.Fatalf("the enforce aggregate lost tokens to denied calls: %v", r)
	}
	// 1000 tokens a minute: 100 calls at cost 10, or 50 at 10 plus 500 at 1.
	do(t, c, "RL.BUDGET", "SET", "llm", "RATE", "1000", "PER", "minute")
	got, _, took := acquireTimed(t, c, 101, "llm", "COST", "10")
	within(t, "cost 10", got, 100, took, 600*time.Millisecond) // 10 tokens at 1000/minute
	do(t, c, "RL.BUDGET", "SET", "llm2", "RATE", "1000", "PER", "minute")
	big, _, t1 := acquireTimed(t, c, 50, "llm2", "COST", "10")
	small, _, t2 := acquireTimed(t, c, 501, "llm2")
	if big != 50 {
		t.Fatalf("mixed: %d of 50 at cost 10", big)
	}
	within(t, "mixed, then cost 1", small, 500, t1+t2, 60*time.Millisecond)
}

func TestBudgetsFileSeedsAnEmptyTree(t *testing.T) {
	file := filepath.Join(t.TempDir(), "budgets.json")
	os.WriteFile(file, []byte(`{"budgets":{"system":`+systemJSON+`,"system/p":`+partnerJSON+`,"system/p/t":`+tenantJSON+`}}`), 0o644)
	dir := t.TempDir()
	p := start(t, "--resp-addr", "127.0.0.1:0", "--http-addr", "", "--raft-addr", "127.0.0.1:0", "--data-dir", dir, "--budgets", file)
	c := client(t, p.Resp)
	waitReady(t, c)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if list, _ := c.Do(context.Background(), "RL.BUDGET", "LIST").StringSlice(); len(list) == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("budgets file not imported")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if e := doErr(t, c, "RL.ACQUIRE", "elsewhere"); e != "NOBUDGET no budget node on path 'elsewhere'" {
		t.Fatal(e)
	}
}
