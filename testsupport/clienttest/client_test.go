package clienttest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	client "github.com/sluice-rl/sluice/clients/go"
)

var bg = context.Background()

func wantDecision(t *testing.T, what string, got client.Decision, err error, want client.Decision) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if got != want {
		t.Fatalf("%s:\n got %+v\nwant %+v", what, got, want)
	}
}

func wantErr(t *testing.T, what string, err error, text string) {
	t.Helper()
	if err == nil || err.Error() != text {
		t.Fatalf("%s: error %v, want %q", what, err, text)
	}
}

func TestAcquireBudgetForm(t *testing.T) {
	s := startSluice(t)
	s.set(t, "api", "RATE", 2, "PER", "minute")
	c := s.client()

	d, err := c.Acquire(bg, "api")
	wantDecision(t, "first", d, err, client.Decision{Allowed: true, Remaining: 1, Limit: 2, ResetAfter: 30 * time.Second, LimitedBy: "api"})
	d, err = c.Acquire(bg, "api")
	wantDecision(t, "second", d, err, client.Decision{Allowed: true, Remaining: 0, Limit: 2, ResetAfter: time.Minute, LimitedBy: "api"})
	d, err = c.Acquire(bg, "api")
	wantDecision(t, "third", d, err, client.Decision{Remaining: 0, Limit: 2, RetryAfter: 30 * time.Second, ResetAfter: time.Minute, LimitedBy: "api"})

	s.clock.Advance(10 * time.Second)
	d, err = c.Peek(bg, "api")
	wantDecision(t, "peek after 10s", d, err, client.Decision{Remaining: 0, Limit: 2, RetryAfter: 20 * time.Second, ResetAfter: 50 * time.Second, LimitedBy: "api"})
	d, err = c.Acquire(bg, "api", client.Cost(3))
	wantDecision(t, "cost above capacity", d, err, client.Decision{Remaining: 0, Limit: 2, RetryAfter: client.Never, ResetAfter: 50 * time.Second, LimitedBy: "api"})

	s.clock.Advance(50 * time.Second)
	d, err = c.Acquire(bg, "api", client.DryRun())
	wantDecision(t, "dry run on a full bucket", d, err, client.Decision{Allowed: true, Remaining: 1, Limit: 2, ResetAfter: 30 * time.Second, LimitedBy: "api"})
	d, err = c.Acquire(bg, "api", client.Cost(0), client.Wait(time.Second))
	wantDecision(t, "COST 0 WAIT 1000", d, err, client.Decision{Allowed: true, Remaining: 2, Limit: 2, LimitedBy: "api"})
}

func TestAcquireSubjectDegradeUnlimitedAndErrors(t *testing.T) {
	s := startSluice(t)
	s.set(t, "per-ip", "RATE", 5, "PER", "second", "SCOPE", "ip")
	s.set(t, "deg", "RATE", 1, "PER", "minute", "STRATEGY", "degrade")
	s.set(t, "free", "{}")
	c := s.client()

	_, err := c.Acquire(bg, "per-ip")
	wantErr(t, "no KEY", err, "ERR budget 'per-ip' has scope ip: KEY required")
	d, err := c.Acquire(bg, "per-ip", client.Key("192.0.2.1"))
	wantDecision(t, "KEY", d, err, client.Decision{Allowed: true, Remaining: 4, Limit: 5, ResetAfter: 200 * time.Millisecond, LimitedBy: "per-ip#192.0.2.1"})

	d, err = c.Acquire(bg, "deg")
	wantDecision(t, "degrade, first", d, err, client.Decision{Allowed: true, Remaining: 0, Limit: 1, ResetAfter: time.Minute, LimitedBy: "deg"})
	d, err = c.Acquire(bg, "deg")
	wantDecision(t, "degrade, over the limit", d, err, client.Decision{Allowed: true, Degraded: true, Remaining: 0, Limit: 1,
		RetryAfter: time.Minute, ResetAfter: time.Minute, LimitedBy: "deg"})

	d, err = c.Acquire(bg, "free")
	wantDecision(t, "unlimited", d, err, client.Decision{Allowed: true, Remaining: -1, Limit: -1, LimitedBy: "free"})
	if !d.Unlimited() {
		t.Fatal("Unlimited() is false for limit -1")
	}

	_, err = c.Acquire(bg, "nowhere")
	wantErr(t, "unconfigured path", err, "NOBUDGET no budget node on path 'nowhere'")
	if !client.IsNoBudget(err) || !client.IsNoBudget(fmt.Errorf("gateway: %w", err)) {
		t.Fatalf("IsNoBudget(%v) is false", err)
	}
	if client.IsNoBudget(errors.New("NOBUDGET made up")) || client.IsNoBudget(nil) {
		t.Fatal("IsNoBudget is true for an error that is not a server reply")
	}
	_, err = c.Acquire(bg, "api", client.Cost(-1))
	if err == nil || !strings.HasPrefix(err.Error(), "ERR COST must be an integer between 0 and") {
		t.Fatalf("COST -1: %v", err)
	}
}

func TestAcquireInlineAndPeekInline(t *testing.T) {
	s := startSluice(t)
	c := s.client()
	lim := client.Limit{Rate: 3, Per: time.Minute}
	d, err := c.AcquireInline(bg, "k", lim)
	wantDecision(t, "inline", d, err, client.Decision{Allowed: true, Remaining: 2, Limit: 3, ResetAfter: 20 * time.Second, LimitedBy: "k"})
	d, err = c.PeekInline(bg, "k", lim, client.Cost(2))
	wantDecision(t, "peek inline", d, err, client.Decision{Allowed: true, Remaining: 0, Limit: 3, ResetAfter: time.Minute, LimitedBy: "k"})
	d, err = c.AcquireInline(bg, "k", lim, client.Cost(3))
	wantDecision(t, "inline denied", d, err, client.Decision{Remaining: 2, Limit: 3, RetryAfter: 20 * time.Second, ResetAfter: 20 * time.Second, LimitedBy: "k"})
	d, err = c.Peek(bg, "k")
	wantDecision(t, "peek by key, the bucket's own limit", d, err, client.Decision{Allowed: true, Remaining: 1, Limit: 3, ResetAfter: 40 * time.Second, LimitedBy: "k"})

	// A window that is not one unit, a burst and an algorithm.
	d, err = c.AcquireInline(bg, "odd", client.Limit{Rate: 3, Per: 1500 * time.Millisecond, Burst: 6, Algo: "gcra"})
	wantDecision(t, "1s500ms", d, err, client.Decision{Allowed: true, Remaining: 5, Limit: 6, ResetAfter: 500 * time.Millisecond, LimitedBy: "odd"})

	_, err = c.AcquireInline(bg, "bad", client.Limit{Rate: 1, Per: -time.Second})
	wantErr(t, "negative Per", err, "client: Limit.Per must be positive (0 means one second), got -1s")
	_, err = c.AcquireInline(bg, "bad", client.Limit{Rate: 0})
	wantErr(t, "RATE 0", err, "ERR RATE must be an integer between 1 and 1000000000000")
	_, err = c.Peek(bg, "k", client.DryRun())
	wantErr(t, "peek with DryRun", err, "client: RL.PEEK takes no Wait or DryRun option: it never consumes")
}

func TestThrottle(t *testing.T) {
	s := startSluice(t)
	c := s.client()
	want := []client.ThrottleResult{
		{Limit: 2, Remaining: 1, RetryAfter: client.Never, ResetAfter: time.Minute},
		{Limit: 2, Remaining: 0, RetryAfter: client.Never, ResetAfter: 2 * time.Minute},
		{Limited: true, Limit: 2, Remaining: 0, RetryAfter: time.Minute, ResetAfter: 2 * time.Minute},
	}
	for i, w := range want {
		got, err := c.Throttle(bg, "cell", 1, 1, time.Minute, 1)
		if err != nil || got != w {
			t.Fatalf("call %d: %+v %v, want %+v", i+1, got, err, w)
		}
	}
	_, err := c.Throttle(bg, "cell", 1, 1, 1500*time.Millisecond, 1)
	wantErr(t, "fractional period", err, "client: CL.THROTTLE period must be whole seconds, got 1.5s")
}

// countingDoer records the commands sent through it.
type countingDoer struct {
	client.Doer
	mu   sync.Mutex
	cmds []string
}

func (c *countingDoer) Do(ctx context.Context, args ...any) *redis.Cmd {
	c.mu.Lock()
	c.cmds = append(c.cmds, strings.TrimSuffix(fmt.Sprintln(args...), "\n"))
	c.mu.Unlock()
	return c.Doer.Do(ctx, args...)
}

func (c *countingDoer) take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.cmds
	c.cmds = nil
	return out
}

func TestPolicyWalksUpAndCaches(t *testing.T) {
	s := startSluice(t)
	s.set(t, "org", "RATE", 10, "PER", "minute", "BURST", 5, "SHARING", "inherit", "RESPONSE_HEADERS", "no")
	s.set(t, "priv", "RATE", 5, "PER", "1h30m")
	doer := &countingDoer{Doer: s.rdb}
	now := time.Unix(1e9, 0)
	c := s.clientOn(doer, client.Clock(func() time.Time { return now }))

	p, err := c.Policy(bg, "org/team/alice")
	if err != nil {
		t.Fatal(err)
	}
	want := client.Policy{Path: "org/team/alice", Node: "org", Implicit: true, HasLimit: true, Rate: 10, Window: time.Minute, Burst: 5,
		Mode: "unlimited", TotalWindow: time.Minute, Algorithm: "token_bucket", Sharing: "inherit", Scope: "tenant",
		Strategy: "reject", Cost: 1, ResponseHeaders: false, Version: p.Version}
	if p != want || p.Version == 0 {
		t.Fatalf("policy:\n got %+v\nwant %+v", p, want)
	}
	if got := doer.take(); !reflect.DeepEqual(got, []string{"RL.BUDGET GET org/team/alice", "RL.BUDGET GET org/team", "RL.BUDGET GET org"}) {
		t.Fatalf("walk sent %q", got)
	}
	// Cached: the same path again sends nothing, a sibling reads only its
	// own two paths.
	if _, err := c.Policy(bg, "org/team/alice"); err != nil {
		t.Fatal(err)
	}
	if p, err := c.Policy(bg, "org/team/bob"); err != nil || p.Node != "org" || p.Rate != 10 {
		t.Fatalf("sibling: %+v %v", p, err)
	}
	if got := doer.take(); !reflect.DeepEqual(got, []string{"RL.BUDGET GET org/team/bob"}) {
		t.Fatalf("cached walks sent %q", got)
	}

	// A change is seen once the TTL has passed, not before.
	s.set(t, "org", "RATE", 20, "PER", "minute", "SHARING", "inherit")
	s.set(t, "org/team", "RATE", 1, "PER", "second")
	if p, _ := c.Policy(bg, "org/team/alice"); p.Node != "org" || p.Rate != 10 {
		t.Fatalf("within the TTL: %+v", p)
	}
	now = now.Add(client.DefaultPolicyTTL)
	p, err = c.Policy(bg, "org/team/alice")
	if err != nil || p.Node != "org/team" || !p.Implicit || p.HasLimit || !p.ResponseHeaders || p.Sharing != "private" {
		t.Fatalf("after the TTL: %+v %v", p, err)
	}
	p, err = c.Policy(bg, "org/team")
	if err != nil || p.Implicit || !p.HasLimit || p.Rate != 20 || p.Window != time.Minute || p.Burst != 1 {
		t.Fatalf("configured child: %+v %v", p, err)
	}

	// (org/team inherits min(20/minute, 1/second) = 20/minute, burst 1.)
	// A private node's limit is its own, not its implicit children's.
	p, err = c.Policy(bg, "priv")
	if err != nil || !p.HasLimit || p.Rate != 5 || p.Window != 90*time.Minute || p.Burst != 5 {
		t.Fatalf("priv: %+v %v", p, err)
	}
	p, err = c.Policy(bg, "priv/x")
	if err != nil || p.Node != "priv" || p.HasLimit || p.Rate != 0 || p.Window != 0 {
		t.Fatalf("priv/x: %+v %v", p, err)
	}

	// Nothing configured: the server's NOBUDGET, wrapped.
	doer.take()
	_, err = c.Policy(bg, "none/a")
	wantErr(t, "unconfigured", err, "client: policy for 'none/a': NOBUDGET no budget node on path 'none/a'")
	if !client.IsNoBudget(err) {
		t.Fatalf("IsNoBudget(%v) is false", err)
	}
	if got := doer.take(); !reflect.DeepEqual(got, []string{"RL.BUDGET GET none/a", "RL.BUDGET GET none", "RL.ACQUIRE none/a DRYRUN"}) {
		t.Fatalf("unconfigured walk sent %q", got)
	}
	// A node configured while the walk's cached answers say otherwise is
	// found by the fresh second walk.
	s.set(t, "none", "RATE", 7)
	p, err = c.Policy(bg, "none/a")
	if err != nil || p.Node != "none" || !p.Implicit || p.HasLimit {
		t.Fatalf("after configuring none: %+v %v", p, err)
	}
}

func TestPolicyWithoutCache(t *testing.T) {
	s := startSluice(t)
	s.set(t, "a", "RATE", 1)
	doer := &countingDoer{Doer: s.rdb}
	c := s.clientOn(doer, client.PolicyTTL(0))
	for i := 0; i < 2; i++ {
		if _, err := c.Policy(bg, "a"); err != nil {
			t.Fatal(err)
		}
	}
	if got := doer.take(); len(got) != 2 {
		t.Fatalf("PolicyTTL(0) sent %q, want two reads", got)
	}
}

func TestPolicyCacheIsBounded(t *testing.T) {
	s := startSluice(t)
	s.set(t, "a", "RATE", 1, "SHARING", "inherit")
	doer := &countingDoer{Doer: s.rdb}
	c := s.clientOn(doer, client.PolicyCacheSize(3))
	for i := 0; i < 10; i++ {
		if _, err := c.Policy(bg, fmt.Sprintf("a/%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	doer.take()
	cached := 0
	for i := 0; i < 10; i++ {
		path := fmt.Sprintf("a/%d", i)
		if _, err := c.Policy(bg, path); err != nil {
			t.Fatal(err)
		}
		if got := doer.take(); len(got) == 0 || got[0] != "RL.BUDGET GET "+path {
			cached++
		}
	}
	if cached > 3 {
		t.Fatalf("%d of 10 paths answered from the cache, bound 3", cached)
	}
}
