package client

import (
	"context"
	"errors"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Source says where a Decision came from.
type Source uint8

// Sources of a Decision.
const (
	// SourceServer: sluice answered the call.
	SourceServer Source = iota
	// SourceCache: a refusal of the same call that sluice gave earlier and
	// whose retry_after has not passed yet (DenialCacheSize); nothing was
	// sent.
	SourceCache
	// SourceFallback: sluice could not be asked; the local limit of the
	// Fallback policy decided.
	SourceFallback
	// SourceFailOpen: sluice could not be asked; FailOpen admitted the call.
	SourceFailOpen
	// SourceFailClosed: sluice could not be asked; FailClosed refused it.
	SourceFailClosed
)

// String returns server, cache, fallback, fail_open or fail_closed.
func (s Source) String() string {
	switch s {
	case SourceServer:
		return "server"
	case SourceCache:
		return "cache"
	case SourceFallback:
		return "fallback"
	case SourceFailOpen:
		return "fail_open"
	case SourceFailClosed:
		return "fail_closed"
	}
	return "source(" + strconv.Itoa(int(s)) + ")"
}

// Defaults of the settings below.
const (
	DefaultTimeout         = 50 * time.Millisecond
	DefaultBreakerFailures = 3
	DefaultBreakerCooldown = time.Second
	DefaultDenialCacheSize = 10000
	// DefaultFallbackKeys bounds the local buckets of a Fallback policy;
	// past it, buckets are dropped (and start full again when next used).
	DefaultFallbackKeys = 10000
)

// ErrUnavailable is wrapped by the errors of calls that could not reach a
// decision because sluice failed — a network error, the call's deadline,
// LOADING, TRYAGAIN or CLUSTERDOWN — or because the circuit breaker is
// open, when the client has no failure policy (OnFailure). Test it with
// errors.Is.
var ErrUnavailable = errors.New("client: sluice unavailable")

// FailurePolicy says how Acquire, AcquireInline, Peek and PeekInline decide
// when sluice cannot answer: FailOpen, FailClosed or Fallback. It never
// applies to a refusal or to an error reply about the call itself (ERR …,
// NOBUDGET …): those are returned as they are.
type FailurePolicy struct {
	kind  Source // SourceFailOpen, SourceFailClosed or SourceFallback; 0: none
	rate  float64
	burst int64
}

var (
	// FailOpen admits every call sluice cannot answer (Source
	// SourceFailOpen, Limit -1): availability before the limit.
	FailOpen = FailurePolicy{kind: SourceFailOpen}
	// FailClosed refuses every call sluice cannot answer (Source
	// SourceFailClosed, Limit -1): the limit before availability.
	FailClosed = FailurePolicy{kind: SourceFailClosed}
)

// Fallback decides the calls sluice cannot answer with a local token
// bucket per key (the key or path and its subject): rate tokens per per,
// burst at most. Each process counts alone, so a fleet of n processes
// admits up to n times the limit while sluice is away: set rate to the
// limit divided by the number of processes. It panics unless rate and
// burst are positive and per is positive (0 means one second).
func Fallback(rate int64, per time.Duration, burst int64) FailurePolicy {
	if per == 0 {
		per = time.Second
	}
	if rate <= 0 || burst <= 0 || per < 0 {
		panic("client: Fallback needs a positive rate, per (0 means one second) and burst, got " +
			strconv.FormatInt(rate, 10) + ", " + per.String() + ", " + strconv.FormatInt(burst, 10))
	}
	return FailurePolicy{kind: SourceFallback, rate: float64(rate) / per.Seconds(), burst: burst}
}

// OnFailure sets the failure policy. Without one (the default) a call that
// sluice cannot answer returns an error wrapping ErrUnavailable.
func OnFailure(p FailurePolicy) Setting { return func(c *Client) { c.policy = p } }

// Timeout sets the deadline of each call (default DefaultTimeout), applied
// to its context on top of the caller's own deadline; a call with Wait(d)
// gets Timeout plus d, since the server may hold it that long. Zero or
// less: calls have the caller's deadline only.
//
// A refused connection should fail at once, not at the deadline: go-redis
// dials five times 100 ms apart and retries a failed command three times
// unless told otherwise. NewNodes sets its clients up so; for a go-redis
// client of your own, give its Options MaxRetries: -1, DialerRetries: 1
// and DialerRetryTimeout: time.Microsecond.
//
// A go-redis client cuts a call at its context's deadline only when its
// options have ContextTimeoutEnabled; otherwise it waits for its own
// ReadTimeout (3 s by default). Give it ContextTimeoutEnabled: true. A
// client without it (or one whose options New cannot see) is called from
// a goroutine that the deadline abandons, at the cost of that goroutine.
func Timeout(d time.Duration) Setting { return func(c *Client) { c.timeout = d } }

// BreakerFailures sets how many failures in a row open the circuit
// breaker (default DefaultBreakerFailures). While it is open, calls decide
// by the failure policy at once, without touching the network; zero or
// less turns the breaker off.
func BreakerFailures(n int) Setting { return func(c *Client) { c.brk.threshold = int64(n) } }

// BreakerCooldown sets how long the breaker stays open (default
// DefaultBreakerCooldown). After it, one call goes to sluice (half-open):
// its success closes the breaker, its failure opens it again.
func BreakerCooldown(d time.Duration) Setting { return func(c *Client) { c.brk.cooldown = d } }

// DenialCacheSize bounds the denial cache (default
// DefaultDenialCacheSize): a call that sluice refused with a retry_after is
// answered from memory (Source SourceCache) until that retry_after has
// passed, so that a refused key is not asked again before it can succeed.
// Zero or less turns the cache off.
func DenialCacheSize(n int) Setting { return func(c *Client) { c.denials.max = n } }

// Clock sets the clock of the client's caches, breaker and fallback
// buckets (default time.Now); for tests.
func Clock(now func() time.Time) Setting { return func(c *Client) { c.now = now } }

// failure reports whether err means that sluice could not decide (the
// failure policy applies), as opposed to an answer about the call itself.
// parent is the caller's context: its own end is the caller's doing.
func failure(parent context.Context, err error) bool {
	if err == nil || parent.Err() != nil {
		return false
	}
	var re redis.Error
	if errors.As(err, &re) {
		msg := re.Error()
		return strings.HasPrefix(msg, "LOADING ") || strings.HasPrefix(msg, "TRYAGAIN") ||
			strings.HasPrefix(msg, "CLUSTERDOWN")
	}
	// Anything else is about getting the answer, not the answer: a
	// network error, a deadline, a closed client, a reply cut short.
	return true
}

// breaker is the circuit breaker: consecutive failures, and while open
// the instant (UnixNano) it may let one probe through.
type breaker struct {
	threshold int64
	cooldown  time.Duration
	failures  atomic.Int64
	openUntil atomic.Int64 // 0: closed
	probing   atomic.Bool
}

// allow reports whether a call may go to sluice at now, and whether it is
// the half-open probe; when not, retry is how long the breaker stays open.
func (b *breaker) allow(now time.Time) (ok, probe bool, retry time.Duration) {
	until := b.openUntil.Load()
	if until == 0 {
		return true, false, 0
	}
	if n := now.UnixNano(); n < until {
		return false, false, time.Duration(until - n)
	}
	if b.probing.CompareAndSwap(false, true) {
		return true, true, 0
	}
	return false, false, 0
}

// done records a call's outcome.
func (b *breaker) done(now time.Time, probe, failed bool) {
	if b.threshold <= 0 {
		return
	}
	if !failed {
		if b.failures.Load() != 0 {
			b.failures.Store(0)
		}
		if probe || b.openUntil.Load() != 0 {
			b.openUntil.Store(0)
			b.probing.Store(false)
		}
		return
	}
	if n := b.failures.Add(1); probe || n >= b.threshold {
		b.openUntil.Store(now.Add(b.cooldown).UnixNano())
		b.probing.Store(false)
	}
}

// denial is a refusal kept until it may be retried.
type denial struct {
	d     Decision
	until time.Time
	at    time.Time
}

// denialCache holds refusals by call (see callKey), at most max.
type denialCache struct {
	max int
	mu  sync.Mutex
	m   map[string]denial
}

// get returns the cached refusal for key at now, its times reduced by
// what has elapsed.
func (c *denialCache) get(key []byte, now time.Time) (Decision, bool) {
	if c.max <= 0 {
		return Decision{}, false
	}
	c.mu.Lock()
	e, ok := c.m[string(key)]
	if ok && !now.Before(e.until) {
		delete(c.m, string(key))
		ok = false
	}
	c.mu.Unlock()
	if !ok {
		return Decision{}, false
	}
	d := e.d
	d.Source = SourceCache
	d.RetryAfter = e.until.Sub(now)
	d.ResetAfter = max(d.ResetAfter-now.Sub(e.at), d.RetryAfter)
	return d, true
}

// put keeps a refusal d made at now, or forgets key for an admission.
func (c *denialCache) put(key []byte, d Decision, now time.Time) {
	if c.max <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if d.Allowed || d.RetryAfter <= 0 {
		if len(c.m) > 0 {
			delete(c.m, string(key))
		}
		return
	}
	if c.m == nil {
		c.m = map[string]denial{}
	}
	k := string(key)
	if _, ok := c.m[k]; !ok {
		evict(c.m, c.max, func(e denial) bool { return !now.Before(e.until) })
	}
	c.m[k] = denial{d: d, until: now.Add(d.RetryAfter), at: now}
}

// evict makes room for one more entry in m, bound max: among the first
// few entries of a map walk (which starts at random), the stale ones go;
// if none is, the first one seen does.
func evict[V any](m map[string]V, max int, stale func(V) bool) {
	if len(m) < max {
		return
	}
	first, seen := "", 0
	for k, v := range m {
		if seen == 0 {
			first = k
		}
		if stale(v) {
			delete(m, k)
			return
		}
		if seen++; seen == 8 {
			break
		}
	}
	delete(m, first)
}

// bucket is a fallback token bucket.
type bucket struct {
	tokens float64
	at     time.Time
}

// fallbacks holds the Fallback policy's buckets, at most
// DefaultFallbackKeys.
type fallbacks struct {
	mu sync.Mutex
	m  map[string]*bucket
}

// take decides a call of cost tokens for key at now under policy p.
func (f *fallbacks) take(p FailurePolicy, key []byte, target string, cost int64, now time.Time) Decision {
	burst := float64(p.burst)
	f.mu.Lock()
	defer f.mu.Unlock()
	b, ok := f.m[string(key)]
	if !ok {
		if f.m == nil {
			f.m = map[string]*bucket{}
		}
		evict(f.m, DefaultFallbackKeys, func(b *bucket) bool { return b.tokens >= burst })
		b = &bucket{tokens: burst, at: now}
		f.m[string(key)] = b
	}
	if el := now.Sub(b.at).Seconds(); el > 0 {
		b.tokens = math.Min(burst, b.tokens+el*p.rate)
		b.at = now
	}
	d := Decision{Limit: p.burst, LimitedBy: target, Source: SourceFallback}
	c := float64(cost)
	switch {
	case cost > p.burst:
		d.RetryAfter = Never
	case b.tokens >= c:
		b.tokens -= c
		d.Allowed = true
	default:
		d.RetryAfter = seconds((c - b.tokens) / p.rate)
	}
	d.Remaining = int64(b.tokens)
	d.ResetAfter = seconds((burst - b.tokens) / p.rate)
	return d
}

func seconds(s float64) time.Duration { return time.Duration(math.Ceil(s * 1e9)) }
