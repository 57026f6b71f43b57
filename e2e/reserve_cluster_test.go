package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Clients spread over all three nodes never have more reservations in
// flight than a concurrency limit allows, inline and on a budget node per
// subject: every reservation of one key is decided by the member that
// keeps its slots (its id names that member), wherever it was sent.
func TestConcurrencyLimitHoldsAcrossNodes(t *testing.T) {
	ms, _ := threeNodes(t)
	ctx := context.Background()
	for _, m := range ms {
		waitReady(t, m.c)
	}
	if err := ms[0].c.Do(ctx, "RL.BUDGET", "SET", "agents", "RATE", 1000000, "PER", "minute", "SCOPE", "user", "CONCURRENCY", 3).Err(); err != nil {
		t.Fatal(err)
	}
	for _, m := range ms { // the budget node is on every node before the clients start
		eventually(t, 30*time.Second, "agents on "+m.id, func() bool { return m.c.Do(ctx, "RL.BUDGET", "GET", "agents").Err() == nil })
	}
	cases := []struct {
		name string
		n    int64
		args []any
	}{
		{"inline", 5, []any{"gpu", "CONCURRENCY", 5}},
		{"budget", 3, []any{"agents", "KEY", "acme"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			const clients, rounds = 30, 5
			var addrs []string
			for _, m := range ms {
				addrs = append(addrs, m.resp)
			}
			l := holdSlots(t, addrs, clients, rounds, 60*time.Second, append(tc.args, "COST", 1, "TTL", 60000, "WAIT", 30000)...)
			issuers := l.issuers
			t.Logf("%d reservations granted through 3 nodes, at most %d in flight (limit %d); issued by %v", l.granted, l.most, tc.n, issuers)
			if l.most > tc.n {
				t.Fatalf("%d in flight, limit %d", l.most, tc.n)
			}
			if l.granted < clients {
				t.Fatalf("only %d of %d reservations granted", l.granted, clients*rounds)
			}
			if len(issuers) != 1 {
				t.Fatalf("the reservations of one key were issued by %d nodes (%v): the slots are not kept in one place", len(issuers), issuers)
			}
		})
	}
}

// Tokens per minute with real costs settled after the call: clients spread
// over three nodes get, counted in settled tokens, within SPEC §5's bound
// of what the same clients get from one node (−2 % … +1 %, plus one
// burst), measured in the same run. The costs are random around the
// estimate (half to one and a half times it), so each settle gives tokens
// back or charges more.
func TestSettledTokensHoldTheLimitAcrossNodes(t *testing.T) {
	const burst = 1000
	one := single(t)
	oc := client(t, one.Resp)
	waitReady(t, oc)
	ms, _ := threeNodes(t)
	var cs []*redis.Client
	for _, m := range ms {
		waitReady(t, m.c)
		cs = append(cs, m.c)
	}
	for _, tc := range []struct {
		name string
		wait []any
	}{
		// Refused calls come back after retry_after_ms: a node admits
		// from its lease of the owner's bucket.
		{"retry", nil},
		// WAIT: a node decides from its own copy of the bucket, which
		// the others' consumption and refunds reach through the sync.
		{"wait", []any{"WAIT", 200}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			budget := "tpm-" + tc.name
			alone := settledLoad(t, []*redis.Client{oc}, budget, burst, tc.wait...)
			three := settledLoad(t, cs, budget, burst, tc.wait...)
			lo, hi := 0.98*float64(alone), 1.01*float64(alone)+burst
			t.Logf("settled tokens: one node %d, three nodes %d (bound %.0f…%.0f)", alone, three, lo, hi)
			if got := float64(three); got < lo || got > hi {
				t.Fatalf("three nodes let %d tokens through, one node %d: want %.0f…%.0f", three, alone, lo, hi)
			}
		})
	}
}

// settledLoad sets budget to 1000 tokens a second with the given burst
// through cs[0], waits until every node has it, then runs 12 clients over
// cs round robin for 10 s, each reserving 10 tokens and settling a random
// 5 to 15, and returns the tokens settled for reservations granted within
// the 10 s.
func settledLoad(t *testing.T, cs []*redis.Client, budget string, burst int64, wait ...any) int64 {
	t.Helper()
	const (
		rate     = 1000 // tokens a second
		estimate = 10
		clients  = 12
	)
	ctx := context.Background()
	if err := cs[0].Do(ctx, "RL.BUDGET", "SET", budget, "RATE", rate*60, "PER", "minute", "BURST", burst).Err(); err != nil {
		t.Fatal(err)
	}
	for i, c := range cs {
		eventually(t, 30*time.Second, fmt.Sprintf("%s on node %d", budget, i+1), func() bool { return c.Do(ctx, "RL.BUDGET", "GET", budget).Err() == nil })
	}
	var settled atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	end := time.Now().Add(10 * time.Second)
	for i := 0; i < clients; i++ {
		addr := cs[i%len(cs)].Options().Addr
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ReadTimeout: 30 * time.Second, PoolSize: 1})
			defer cl.Close()
			rnd := rand.New(rand.NewPCG(uint64(i), 7))
			for time.Now().Before(end) {
				v, err := reserve(ctx, cl, append([]any{budget, "COST", estimate, "TTL", 60000}, wait...)...)
				if err != nil {
					errs <- fmt.Errorf("RL.RESERVE on %s: %v", addr, err)
					return
				}
				id := v[6].(string)
				if id == "" {
					if len(wait) == 0 { // refused: back after retry_after_ms
						time.Sleep(time.Duration(min(v[3].(int64), 50)) * time.Millisecond)
					}
					continue
				}
				if !time.Now().Before(end) {
					cl.Do(ctx, "RL.RELEASE", id) // granted after the end: given back, not counted
					continue
				}
				actual := int64(estimate/2 + rnd.IntN(estimate+1))
				if err := cl.Do(ctx, "RL.SETTLE", id, "ACTUAL", actual).Err(); err != nil {
					errs <- fmt.Errorf("RL.SETTLE %s on %s: %v", id, addr, err)
					return
				}
				settled.Add(actual)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return settled.Load()
}

// Over HTTP too, a reservation's id is valid on every node: a node that
// did not issue it passes /v1/settle, /v1/renew and /v1/release to the
// node that did, and answers with its reply.
func TestReservationOverHTTPOnAnotherNode(t *testing.T) {
	ms, _ := threeNodes(t)
	ctx := context.Background()
	post := func(m *member, path, body string) (int, map[string]any) {
		t.Helper()
		resp, err := http.Post("http://"+m.p.HTTP+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatalf("POST %s on %s: %v", path, m.id, err)
		}
		defer resp.Body.Close()
		var out map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			t.Fatalf("POST %s on %s: %v", path, m.id, err)
		}
		return resp.StatusCode, out
	}
	v, err := reserve(ctx, ms[0].c, "http:acme", "RATE", 3000, "PER", "day", "COST", 40, "TTL", 60000)
	if err != nil || v[0].(int64) != 1 {
		t.Fatalf("RL.RESERVE on %s: %v %v", ms[0].id, v, err)
	}
	left, id := v[1].(int64), v[6].(string)
	if code, out := post(ms[1], "/v1/renew", fmt.Sprintf(`{"id":%q,"ttl_ms":120000}`, id)); code != 200 || out["renewed"] != true {
		t.Fatalf("/v1/renew on %s: %d %v", ms[1].id, code, out)
	}
	code, out := post(ms[2], "/v1/settle", fmt.Sprintf(`{"id":%q,"actual":10}`, id))
	if code != 200 || out["allowed"] != float64(1) || out["remaining"] != float64(left+30) || out["limited_by"] != "http:acme" {
		t.Fatalf("/v1/settle on %s: %d %v (want %d remaining: 40 reserved, 10 used)", ms[2].id, code, out, left+30)
	}
	if code, out := post(ms[1], "/v1/settle", fmt.Sprintf(`{"id":%q,"actual":10}`, id)); code != 404 || out["code"] != "NORESERVATION" {
		t.Fatalf("a second /v1/settle on %s: %d %v", ms[1].id, code, out)
	}
	if code, out := post(ms[2], "/v1/release", fmt.Sprintf(`{"id":%q}`, id)); code != 200 || out["released"] != false {
		t.Fatalf("/v1/release of a settled reservation on %s: %d %v", ms[2].id, code, out)
	}
	if code, out := post(ms[1], "/v1/settle", `{"id":"00000000000000010000000000000000@n9","actual":1}`); code != 404 || !strings.Contains(fmt.Sprint(out["detail"]), "which is not a member of this cluster") {
		t.Fatalf("an id of no member over HTTP: %d %v", code, out)
	}
}
