package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// fakeDoer answers every command with the reply or error its answer
// function gives, and counts the commands.
type fakeDoer struct {
	mu     sync.Mutex
	n      int
	answer func(args []any) (any, error)
}

func (f *fakeDoer) Do(ctx context.Context, args ...any) *redis.Cmd {
	f.mu.Lock()
	f.n++
	f.mu.Unlock()
	cmd := redis.NewCmd(ctx, args...)
	v, err := f.answer(args)
	if err != nil {
		cmd.SetErr(err)
	} else {
		cmd.SetVal(v)
	}
	return cmd
}

func (f *fakeDoer) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n
}

// redisErr is an error reply as go-redis gives it.
type redisErr string

func (e redisErr) Error() string { return string(e) }
func (redisErr) RedisError()     {}

var refused = []any{int64(0), int64(0), int64(10), int64(400), int64(1000), "k"}

// testClock is a clock the test moves.
type testClock struct{ t time.Time }

func (c *testClock) now() time.Time { return c.t }

func TestDenialCacheAnswersUntilRetryAfter(t *testing.T) {
	f := &fakeDoer{answer: func([]any) (any, error) { return refused, nil }}
	clk := &testClock{t: time.Unix(1e9, 0)}
	c := New(f, Clock(clk.now))
	lim := Limit{Rate: 10}
	d, err := c.AcquireInline(bg, "k", lim)
	if err != nil || d.Allowed || d.Source != SourceServer || d.RetryAfter != 400*time.Millisecond {
		t.Fatalf("first: %+v %v", d, err)
	}
	clk.t = clk.t.Add(150 * time.Millisecond)
	d, err = c.AcquireInline(bg, "k", lim)
	want := Decision{Limit: 10, RetryAfter: 250 * time.Millisecond, ResetAfter: 850 * time.Millisecond, LimitedBy: "k", Source: SourceCache}
	if err != nil || d != want || f.count() != 1 {
		t.Fatalf("cached: %+v %v (%d sent), want %+v", d, err, f.count(), want)
	}
	// Another cost, subject, limit or a peek is another call.
	c.AcquireInline(bg, "k", lim, Cost(2))
	c.AcquireInline(bg, "k", Limit{Rate: 11})
	c.PeekInline(bg, "k", lim)
	c.AcquireInline(bg, "k", lim, Wait(time.Second))
	if f.count() != 5 {
		t.Fatalf("%d sent, want 5", f.count())
	}
	// The refusal of the call with Wait was kept too, until 400 ms after it.
	clk.t = clk.t.Add(399 * time.Millisecond)
	c.AcquireInline(bg, "k", lim)
	if f.count() != 5 {
		t.Fatal("asked again before the retry_after")
	}
	clk.t = clk.t.Add(time.Millisecond)
	c.AcquireInline(bg, "k", lim)
	if f.count() != 6 {
		t.Fatal("asked again only after the retry_after")
	}
}

func TestDenialCacheIsBoundedAndCanBeOff(t *testing.T) {
	f := &fakeDoer{answer: func([]any) (any, error) { return refused, nil }}
	c := New(f, DenialCacheSize(3))
	for i := 0; i < 20; i++ {
		c.AcquireInline(bg, fmt.Sprint(i), Limit{Rate: 1})
		if n := len(c.denials.m); n > 3 {
			t.Fatalf("%d denials kept, bound 3", n)
		}
	}
	off := New(f, DenialCacheSize(0))
	off.AcquireInline(bg, "k", Limit{Rate: 1})
	off.AcquireInline(bg, "k", Limit{Rate: 1})
	if f.count() != 22 {
		t.Fatalf("%d sent, want 22", f.count())
	}
}

func TestFailurePoliciesAndBreaker(t *testing.T) {
	down := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}
	var fail error = down
	f := &fakeDoer{answer: func([]any) (any, error) {
		if fail != nil {
			return nil, fail
		}
		return []any{int64(1), int64(9), int64(10), int64(0), int64(100), "k"}, nil
	}}
	clk := &testClock{t: time.Unix(1e9, 0)}

	// No policy: the error, wrapping ErrUnavailable and the cause.
	c := New(f, Clock(clk.now))
	_, err := c.AcquireInline(bg, "k", Limit{Rate: 10})
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, down) {
		t.Fatalf("no policy: %v", err)
	}

	c = New(f, Clock(clk.now), OnFailure(FailOpen), BreakerFailures(2), BreakerCooldown(time.Second))
	for i := 0; i < 2; i++ {
		d, err := c.AcquireInline(bg, "k", Limit{Rate: 10})
		if err != nil || d != (Decision{Allowed: true, Remaining: -1, Limit: -1, LimitedBy: "k", Source: SourceFailOpen, Err: down}) {
			t.Fatalf("fail open %d: %+v %v", i, d, err)
		}
	}
	sent := f.count()
	for i := 0; i < 100; i++ {
		if d, _ := c.AcquireInline(bg, "k", Limit{Rate: 10}); d.Source != SourceFailOpen || d.Err != nil {
			t.Fatalf("breaker open: %+v", d)
		}
	}
	if _, err := c.Throttle(bg, "k", 1, 1, time.Second, 1); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("throttle, breaker open: %v", err)
	}
	if f.count() != sent {
		t.Fatalf("the open breaker sent %d commands", f.count()-sent)
	}
	// Half-open: one probe; its failure opens the breaker again.
	clk.t = clk.t.Add(time.Second)
	c.AcquireInline(bg, "k", Limit{Rate: 10})
	c.AcquireInline(bg, "k", Limit{Rate: 10})
	if f.count() != sent+1 {
		t.Fatalf("half-open sent %d, want one probe", f.count()-sent)
	}
	clk.t = clk.t.Add(time.Second)
	fail = nil
	if d, err := c.AcquireInline(bg, "k", Limit{Rate: 10}); err != nil || d.Source != SourceServer || !d.Allowed {
		t.Fatalf("probe: %+v %v", d, err)
	}
	if d, _ := c.AcquireInline(bg, "k", Limit{Rate: 10}); d.Source != SourceServer {
		t.Fatalf("closed again: %+v", d)
	}

	// A refusal or an argument error is never a failure.
	fail = redisErr("ERR RATE must be an integer between 1 and 1000000000000")
	for i := 0; i < 5; i++ {
		if _, err := c.AcquireInline(bg, "k", Limit{Rate: 0}); err == nil || errors.Is(err, ErrUnavailable) {
			t.Fatalf("ERR: %v", err)
		}
	}
	fail = redisErr("TRYAGAIN no leader")
	if d, err := c.AcquireInline(bg, "k", Limit{Rate: 10}); err != nil || d.Source != SourceFailOpen {
		t.Fatalf("TRYAGAIN: %+v %v", d, err)
	}

	// FailClosed refuses with the time the breaker stays open.
	fail = down
	c = New(f, Clock(clk.now), OnFailure(FailClosed), BreakerFailures(1))
	d, _ := c.Acquire(bg, "api")
	if d.Allowed || d.Source != SourceFailClosed || d.RetryAfter != time.Second || d.Err != down {
		t.Fatalf("fail closed: %+v", d)
	}
	clk.t = clk.t.Add(300 * time.Millisecond)
	if d, _ = c.Acquire(bg, "api"); d.RetryAfter != 700*time.Millisecond || d.Err != nil {
		t.Fatalf("fail closed, open: %+v", d)
	}
}

func TestFallbackBucket(t *testing.T) {
	f := &fakeDoer{answer: func([]any) (any, error) { return nil, context.DeadlineExceeded }}
	clk := &testClock{t: time.Unix(1e9, 0)}
	c := New(f, Clock(clk.now), OnFailure(Fallback(2, time.Second, 2)))
	want := []Decision{
		{Allowed: true, Remaining: 1, Limit: 2, ResetAfter: 500 * time.Millisecond},
		{Allowed: true, Remaining: 0, Limit: 2, ResetAfter: time.Second},
		{Remaining: 0, Limit: 2, RetryAfter: 500 * time.Millisecond, ResetAfter: time.Second},
	}
	for i, w := range want {
		d, err := c.Acquire(bg, "api", Key("u1"))
		w.LimitedBy, w.Source = "api", SourceFallback
		d.Err = nil
		if err != nil || d != w {
			t.Fatalf("call %d: %+v %v, want %+v", i, d, err, w)
		}
	}
	if d, _ := c.Acquire(bg, "api", Key("u2")); !d.Allowed {
		t.Fatalf("another subject has its own bucket: %+v", d)
	}
	if d, _ := c.Acquire(bg, "api", Key("u3"), Cost(3)); d.RetryAfter != Never {
		t.Fatalf("cost above the burst: %+v", d)
	}
	clk.t = clk.t.Add(500 * time.Millisecond)
	if d, _ := c.Acquire(bg, "api", Key("u1")); !d.Allowed {
		t.Fatalf("after the refill: %+v", d)
	}
	for _, bad := range []func(){func() { Fallback(0, time.Second, 1) }, func() { Fallback(1, -time.Second, 1) }, func() { Fallback(1, 0, 0) }} {
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.HasPrefix(fmt.Sprint(r), "client: Fallback needs") {
					t.Errorf("panic %v", r)
				}
			}()
			bad()
		}()
	}
}

// A go-redis client whose options lack ContextTimeoutEnabled is cut at the
// deadline all the same.
func TestTimeoutCutsAHungCall(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var conns []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			cn, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, cn) // accepted, never answered
			mu.Unlock()
		}
	}()
	defer func() {
		mu.Lock()
		for _, cn := range conns {
			cn.Close()
		}
		mu.Unlock()
	}()
	for _, ctxTimeouts := range []bool{false, true} {
		rdb := redis.NewClient(&redis.Options{Addr: ln.Addr().String(), Protocol: 2, DisableIdentity: true,
			ContextTimeoutEnabled: ctxTimeouts})
		c := New(rdb, Timeout(20*time.Millisecond))
		start := time.Now()
		_, err := c.AcquireInline(bg, "k", Limit{Rate: 1})
		if !errors.Is(err, ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("ContextTimeoutEnabled %v: %v", ctxTimeouts, err)
		}
		if el := time.Since(start); el > 2*time.Second {
			t.Fatalf("ContextTimeoutEnabled %v: the call took %v", ctxTimeouts, el)
		}
		rdb.Close()
	}
}

func TestSourceString(t *testing.T) {
	got := fmt.Sprint(SourceServer, SourceCache, SourceFallback, SourceFailOpen, SourceFailClosed, Source(9))
	if got != "server cache fallback fail_open fail_closed source(9)" {
		t.Fatal(got)
	}
}

func BenchmarkBreakerOpen(b *testing.B) {
	f := &fakeDoer{answer: func([]any) (any, error) { return nil, context.DeadlineExceeded }}
	for _, p := range []FailurePolicy{FailOpen, Fallback(1e6, time.Second, 1e6)} {
		c := New(f, OnFailure(p), BreakerFailures(1), BreakerCooldown(time.Hour))
		c.AcquireInline(bg, "k", Limit{Rate: 10})
		b.Run(fmt.Sprint(p.kind), func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				c.AcquireInline(bg, "k", Limit{Rate: 10})
			}
		})
	}
}
