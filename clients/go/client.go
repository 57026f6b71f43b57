// Package client is a typed Go API for sluice over go-redis v9.
//
// sluice speaks the Redis protocol, so any go-redis client reaches it; this
// package turns its replies into Go values. Pass the client you already
// have:
//
//	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6380"})
//	sl := client.New(rdb)
//	d, err := sl.Acquire(ctx, "system/partner-a/tenant-a1", client.Key(userID))
//	if err != nil {
//		// sluice unreachable, or an error reply such as NOBUDGET
//	}
//	if !d.Allowed {
//		// refused: retry after d.RetryAfter
//	}
//
// A cluster: NewNodes gives the client every node (a list, or a DNS name),
// learns the members with RL.CLUSTER NODES, and sends a call that a node
// cannot answer to the next within the call's deadline:
//
//	nodes, err := client.NewNodes(client.NodesConfig{Addrs: []string{"10.0.0.11:6380", "10.0.0.12:6380", "10.0.0.13:6380"}})
//	sl := client.New(nodes, client.OnFailure(client.FailOpen))
//
// Policy reads what the budget tree says about a path (its effective
// limit, response_headers) for gateways that describe limits to their
// callers; package httplimit builds net/http middleware on this client.
//
// Error replies come back as go-redis errors whose text is the server's
// reply line, for example "NOBUDGET no budget node on path 'x'";
// IsNoBudget recognises that one, also when it is wrapped.
package client

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Doer is what the client needs from go-redis: the generic Do. Every
// go-redis client satisfies it — *redis.Client, *redis.ClusterClient,
// *redis.Ring and any redis.UniversalClient — so users pass their existing
// client. (redis.Cmdable alone does not declare Do.)
type Doer interface {
	Do(ctx context.Context, args ...any) *redis.Cmd
}

// Client sends sluice's commands through a go-redis client and caches
// budget policies read by Policy. It is safe for concurrent use.
type Client struct {
	rdb Doer

	ttl        time.Duration
	maxEntries int
	now        func() time.Time

	mu    sync.Mutex
	nodes map[string]cachedNode // RL.BUDGET GET replies by path

	timeout     time.Duration
	ctxTimeouts bool // rdb cuts a call at its context's deadline
	policy      FailurePolicy
	brk         breaker
	denials     denialCache
	fallback    fallbacks
}

// Setting configures a Client; pass settings to New.
type Setting func(*Client)

// Defaults of the policy cache.
const (
	DefaultPolicyTTL       = 30 * time.Second
	DefaultPolicyCacheSize = 10000
)

// PolicyTTL sets how long Policy keeps what RL.BUDGET GET answered for a
// path (default DefaultPolicyTTL). Zero or less turns the cache off: every
// Policy call reads the budget tree.
func PolicyTTL(d time.Duration) Setting { return func(c *Client) { c.ttl = d } }

// PolicyCacheSize bounds the number of paths the policy cache holds
// (default DefaultPolicyCacheSize). When it is full, expired entries are
// dropped first, then arbitrary ones.
func PolicyCacheSize(n int) Setting {
	return func(c *Client) {
		if n > 0 {
			c.maxEntries = n
		}
	}
}

// New returns a Client that sends its commands through rdb.
func New(rdb Doer, settings ...Setting) *Client {
	if rdb == nil {
		panic("client: New needs a go-redis client, got nil")
	}
	c := &Client{rdb: rdb, ttl: DefaultPolicyTTL, maxEntries: DefaultPolicyCacheSize, now: time.Now,
		nodes: map[string]cachedNode{}, timeout: DefaultTimeout,
		brk:     breaker{threshold: DefaultBreakerFailures, cooldown: DefaultBreakerCooldown},
		denials: denialCache{max: DefaultDenialCacheSize}}
	for _, s := range settings {
		s(c)
	}
	switch o := rdb.(type) {
	case interface{ contextTimeouts() bool }:
		c.ctxTimeouts = o.contextTimeouts()
	case interface{ Options() *redis.Options }:
		c.ctxTimeouts = o.Options().ContextTimeoutEnabled
	case interface{ Options() *redis.ClusterOptions }:
		c.ctxTimeouts = o.Options().ContextTimeoutEnabled
	}
	return c
}

// Never is the RetryAfter of a call that can never be admitted: its cost
// exceeds the capacity of a level it charges (the reply's retry_after_ms
// is -1).
const Never time.Duration = -1

// Decision is the six-element reply of RL.ACQUIRE and RL.PEEK.
type Decision struct {
	// Allowed is reply element 1 (allowed) being 1 or 2: the call was
	// admitted, or let through over a limit whose strategy is degrade.
	Allowed bool
	// Degraded is reply element 1 being 2: the call went through over a
	// degrade limit and consumed nothing; serve a degraded response.
	Degraded bool
	// Remaining is reply element 2 (remaining): whole tokens left at the
	// tightest level after this call; -1 when nothing limits the path.
	Remaining int64
	// Limit is reply element 3 (limit): the burst capacity of the tightest
	// level; -1 when nothing limits the path.
	Limit int64
	// RetryAfter is reply element 4 (retry_after_ms): 0 when admitted, else
	// how long until this same call would be admitted; Never (-1) when it
	// never can.
	RetryAfter time.Duration
	// ResetAfter is reply element 5 (reset_after_ms): how long until the
	// tightest level is full again.
	ResetAfter time.Duration
	// LimitedBy is reply element 6 (limited_by): the tightest level — the
	// key (inline form), the node path or path#subject (budget form), or
	// quota:<level>. A failure policy's decision names the key or path.
	LimitedBy string
	// Source says who decided: sluice (SourceServer, the zero value), the
	// denial cache, or the failure policy.
	Source Source
	// Err is why sluice could not decide, for a failure policy's
	// decision; nil otherwise, and nil while the breaker is open.
	Err error
}

// Unlimited reports whether nothing limits the path (Limit is -1).
func (d Decision) Unlimited() bool { return d.Limit < 0 }

// Limit is an inline limit, sent with every call as RATE, PER, BURST and
// ALGO.
type Limit struct {
	// Rate is the sustained rate: Rate tokens per Per.
	Rate int64
	// Per is the window of Rate; 0 means one second. It is sent as
	// FormatWindow writes it.
	Per time.Duration
	// Burst is the capacity; 0 means Rate.
	Burst int64
	// Algo is the algorithm (token_bucket, gcra, sliding_window,
	// fixed_window, leaky_bucket); "" means the server's default,
	// token_bucket.
	Algo string
}

// check refuses a window or burst the server would not take for what the
// zero values mean.
func (l *Limit) check() error {
	if l.Per < 0 {
		return fmt.Errorf("client: Limit.Per must be positive (0 means one second), got %v", l.Per)
	}
	if l.Burst < 0 {
		return fmt.Errorf("client: Limit.Burst must be positive (0 means Rate), got %d", l.Burst)
	}
	return nil
}

// args appends the limit's arguments, checked.
func (l *Limit) args(a []any) []any {
	a = append(a, "RATE", l.Rate)
	if l.Per != 0 {
		a = append(a, "PER", FormatWindow(l.Per))
	}
	if l.Burst != 0 {
		a = append(a, "BURST", l.Burst)
	}
	if l.Algo != "" {
		a = append(a, "ALGO", l.Algo)
	}
	return a
}

// Option is an option of one call: Key, Cost, Wait or DryRun.
type Option func(*callOpts)

type callOpts struct {
	key             string
	hasKey          bool
	cost            int64
	hasCost         bool
	waitMs          int64
	hasWait, dryRun bool
	// Reserve only (TTL, Concurrency).
	ttlMs, concurrency int64
	err                error
}

// Key sets the subject (KEY) for a budget node whose scope is user, ip or
// route.
func Key(subject string) Option {
	return func(o *callOpts) { o.key, o.hasKey = subject, true }
}

// Cost sets the tokens the call takes (COST); without it a budget call
// takes the node's configured cost and an inline call 1. Cost(0) consumes
// nothing and reports the state.
func Cost(n int64) Option {
	return func(o *callOpts) { o.cost, o.hasCost = n, true }
}

// Wait lets the server hold the call up to d (WAIT, d rounded up to whole
// milliseconds) when it can be admitted within that time; the call's
// deadline (Timeout) is lengthened by d.
func Wait(d time.Duration) Option {
	return func(o *callOpts) {
		if d < 0 {
			o.err = fmt.Errorf("client: Wait must not be negative, got %v", d)
			return
		}
		o.waitMs, o.hasWait = int64((d+time.Millisecond-1)/time.Millisecond), true
	}
}

// DryRun computes the reply without consuming anything (DRYRUN).
func DryRun() Option { return func(o *callOpts) { o.dryRun = true } }

// check refuses options the command does not take and a bad limit.
func (o *callOpts) check(cmd string, lim *Limit, peek bool) error {
	if o.err != nil {
		return o.err
	}
	if peek && (o.hasWait || o.dryRun) {
		return fmt.Errorf("client: %s takes no Wait or DryRun option: it never consumes", cmd)
	}
	if cmd != "RL.RESERVE" && (o.ttlMs != 0 || o.concurrency != 0) {
		return fmt.Errorf("client: %s takes no TTL or Concurrency option: they belong to Reserve", cmd)
	}
	if lim != nil {
		return lim.check()
	}
	return nil
}

// callKey appends what identifies a call for the denial cache and the
// fallback buckets: target, limit, subject and cost (not WAIT or DRYRUN).
func (o *callOpts) callKey(b []byte, target string, lim *Limit) []byte {
	b = append(b, target...)
	if lim != nil {
		b = append(b, 0)
		b = strconv.AppendInt(b, lim.Rate, 10)
		b = append(b, '/')
		b = strconv.AppendInt(b, int64(lim.Per), 10)
		b = append(b, '/')
		b = strconv.AppendInt(b, lim.Burst, 10)
		b = append(b, '/')
		b = append(b, lim.Algo...)
	}
	if o.hasKey {
		b = append(b, 0, 'K')
		b = append(b, o.key...)
	}
	if o.hasCost {
		b = append(b, 0, 'C')
		b = strconv.AppendInt(b, o.cost, 10)
	}
	return b
}

// callArgs builds a limiting command: cmd target [limit] [KEY] [COST]
// [WAIT] [DRYRUN], from checked options.
func callArgs(cmd, target string, lim *Limit, o *callOpts) []any {
	a := make([]any, 0, 16)
	a = append(a, cmd, target)
	if lim != nil {
		a = lim.args(a)
	}
	if o.hasKey {
		a = append(a, "KEY", o.key)
	}
	if o.hasCost {
		a = append(a, "COST", o.cost)
	}
	if o.hasWait {
		a = append(a, "WAIT", o.waitMs)
	}
	if o.ttlMs != 0 {
		a = append(a, "TTL", o.ttlMs)
	}
	if o.concurrency != 0 {
		a = append(a, "CONCURRENCY", o.concurrency)
	}
	if o.dryRun {
		a = append(a, "DRYRUN")
	}
	return a
}

// Acquire checks the budget node(s) for path and consumes tokens if the
// call is admitted: RL.ACQUIRE path [KEY subject] [COST n] [WAIT ms]
// [DRYRUN].
func (c *Client) Acquire(ctx context.Context, path string, opts ...Option) (Decision, error) {
	return c.decide(ctx, "RL.ACQUIRE", path, nil, false, opts)
}

// AcquireInline checks the inline limit l for key and consumes tokens if
// the call is admitted: RL.ACQUIRE key RATE n [PER unit] [BURST n] [ALGO a]
// [COST n] [WAIT ms] [DRYRUN].
func (c *Client) AcquireInline(ctx context.Context, key string, l Limit, opts ...Option) (Decision, error) {
	return c.decide(ctx, "RL.ACQUIRE", key, &l, false, opts)
}

// Peek reports what Acquire would answer for path, consuming nothing:
// RL.PEEK path [KEY subject] [COST n]. It takes the Key and Cost options.
func (c *Client) Peek(ctx context.Context, path string, opts ...Option) (Decision, error) {
	return c.decide(ctx, "RL.PEEK", path, nil, true, opts)
}

// PeekInline reports what AcquireInline would answer, consuming nothing:
// RL.PEEK key RATE n [PER unit] [BURST n] [ALGO a] [COST n]. It takes the
// Cost option.
func (c *Client) PeekInline(ctx context.Context, key string, l Limit, opts ...Option) (Decision, error) {
	return c.decide(ctx, "RL.PEEK", key, &l, true, opts)
}

func (c *Client) decide(ctx context.Context, cmd, target string, lim *Limit, peek bool, opts []Option) (Decision, error) {
	var o callOpts
	for _, f := range opts {
		f(&o)
	}
	if err := o.check(cmd, lim, peek); err != nil {
		return Decision{}, err
	}
	now := c.now()
	var kb [128]byte
	key := o.callKey(kb[:0], target, lim)
	acquire := cmd == "RL.ACQUIRE"
	if acquire && !o.hasWait {
		if d, ok := c.denials.get(key, now); ok {
			return d, nil
		}
	}
	ok, probe, retry := c.brk.allow(now)
	if !ok {
		return c.fail(key, target, &o, retry, nil)
	}
	v, err := c.do(ctx, o.held(), callArgs(cmd, target, lim, &o))
	failed := failure(ctx, err)
	c.brk.done(c.now(), probe, failed)
	if failed {
		return c.fail(key, target, &o, 0, err)
	}
	if err != nil {
		return Decision{}, err
	}
	d, err := parseDecision(cmd, v)
	if err == nil && acquire && !o.dryRun && !d.Degraded {
		c.denials.put(key, d, now)
	}
	return d, err
}

// fail decides a call that sluice could not answer because of cause (nil:
// the breaker is open for retry), by the failure policy; without one it
// returns an error wrapping ErrUnavailable.
func (c *Client) fail(key []byte, target string, o *callOpts, retry time.Duration, cause error) (Decision, error) {
	switch c.policy.kind {
	case SourceFailOpen:
		return Decision{Allowed: true, Remaining: -1, Limit: -1, LimitedBy: target, Source: SourceFailOpen, Err: cause}, nil
	case SourceFailClosed:
		if retry == 0 {
			retry = c.brk.cooldown
		}
		return Decision{Remaining: -1, Limit: -1, RetryAfter: retry, LimitedBy: target, Source: SourceFailClosed, Err: cause}, nil
	case SourceFallback:
		cost := int64(1)
		if o.hasCost {
			cost = o.cost
		}
		d := c.fallback.take(c.policy, key, target, cost, c.now())
		d.Err = cause
		return d, nil
	}
	return Decision{}, unavailable(retry, cause)
}

// unavailable is the error of a call sluice could not answer.
func unavailable(retry time.Duration, cause error) error {
	if cause == nil {
		return fmt.Errorf("%w: circuit breaker open for %v", ErrUnavailable, retry)
	}
	return fmt.Errorf("%w: %w", ErrUnavailable, cause)
}

// held is how long the server may hold the call (its Wait).
func (o *callOpts) held() time.Duration {
	if !o.hasWait || o.dryRun {
		return 0
	}
	return time.Duration(o.waitMs) * time.Millisecond
}

// do sends one command under the client's deadline, lengthened by held
// (how long the server may hold it: WAIT), and breaker-free: the caller
// records the outcome.
func (c *Client) do(ctx context.Context, held time.Duration, args []any) (any, error) {
	if c.timeout <= 0 {
		return c.rdb.Do(ctx, args...).Result()
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout+held)
	defer cancel()
	if c.ctxTimeouts {
		return c.rdb.Do(ctx, args...).Result()
	}
	type result struct {
		v   any
		err error
	}
	ch := make(chan result, 1)
	go func() {
		v, err := c.rdb.Do(ctx, args...).Result()
		ch <- result{v, err}
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// call sends a command that is not a decision (CL.THROTTLE, RL.BUDGET
// GET) under the deadline and the breaker; no failure policy applies.
func (c *Client) call(ctx context.Context, args ...any) (any, error) {
	return c.callHeld(ctx, 0, args...)
}

// callHeld is call for a command the server may hold up to held.
func (c *Client) callHeld(ctx context.Context, held time.Duration, args ...any) (any, error) {
	ok, probe, retry := c.brk.allow(c.now())
	if !ok {
		return nil, unavailable(retry, nil)
	}
	v, err := c.do(ctx, held, args)
	failed := failure(ctx, err)
	c.brk.done(c.now(), probe, failed)
	if failed {
		return nil, unavailable(0, err)
	}
	return v, err
}

// parseDecision reads RL.ACQUIRE's six-element reply (docs/commands.md,
// "Reply").
func parseDecision(cmd string, v any) (Decision, error) {
	arr, ok := v.([]any)
	if !ok || len(arr) != 6 {
		return Decision{}, fmt.Errorf("client: %s reply is not an array of 6 elements: %v", cmd, v)
	}
	var n [5]int64
	for i := range n {
		x, ok := arr[i].(int64)
		if !ok {
			return Decision{}, fmt.Errorf("client: %s reply element %d is not an integer: %v", cmd, i+1, arr[i])
		}
		n[i] = x
	}
	limitedBy, ok := arr[5].(string)
	if !ok {
		return Decision{}, fmt.Errorf("client: %s reply element 6 (limited_by) is not a string: %v", cmd, arr[5])
	}
	if n[0] < 0 || n[0] > 2 {
		return Decision{}, fmt.Errorf("client: %s reply element 1 (allowed) must be 0, 1 or 2, got %d", cmd, n[0])
	}
	d := Decision{
		Allowed:    n[0] != 0,
		Degraded:   n[0] == 2,
		Remaining:  n[1],
		Limit:      n[2],
		RetryAfter: time.Duration(n[3]) * time.Millisecond,
		ResetAfter: time.Duration(n[4]) * time.Millisecond,
		LimitedBy:  limitedBy,
	}
	if n[3] < 0 {
		d.RetryAfter = Never
	}
	return d, nil
}

// ThrottleResult is the five-element reply of CL.THROTTLE, as redis-cell
// gives it.
type ThrottleResult struct {
	// Limited is reply element 1: 0 allowed, 1 limited.
	Limited bool
	// Limit is reply element 2: the capacity, max_burst+1.
	Limit int64
	// Remaining is reply element 3: calls left now.
	Remaining int64
	// RetryAfter is reply element 4 in whole seconds (rounded up as
	// redis-cell rounds); Never when the reply is -1, which it is when the
	// call was allowed or can never be.
	RetryAfter time.Duration
	// ResetAfter is reply element 5 in whole seconds: how long until the
	// limit is fully available again.
	ResetAfter time.Duration
}

// Throttle runs the redis-cell compatible CL.THROTTLE key max_burst
// count_per_period period quantity. period must be whole seconds.
func (c *Client) Throttle(ctx context.Context, key string, maxBurst, count int64, period time.Duration, quantity int64) (ThrottleResult, error) {
	if period%time.Second != 0 {
		return ThrottleResult{}, fmt.Errorf("client: CL.THROTTLE period must be whole seconds, got %v", period)
	}
	v, err := c.call(ctx, "CL.THROTTLE", key, maxBurst, count, int64(period/time.Second), quantity)
	if err != nil {
		return ThrottleResult{}, err
	}
	arr, ok := v.([]any)
	if !ok || len(arr) != 5 {
		return ThrottleResult{}, fmt.Errorf("client: CL.THROTTLE reply is not an array of 5 integers: %v", v)
	}
	var n [5]int64
	for i := range n {
		if n[i], ok = arr[i].(int64); !ok {
			return ThrottleResult{}, fmt.Errorf("client: CL.THROTTLE reply element %d is not an integer: %v", i+1, arr[i])
		}
	}
	r := ThrottleResult{Limited: n[0] == 1, Limit: n[1], Remaining: n[2],
		RetryAfter: time.Duration(n[3]) * time.Second, ResetAfter: time.Duration(n[4]) * time.Second}
	if n[3] < 0 {
		r.RetryAfter = Never
	}
	return r, nil
}

// IsNoBudget reports whether err is, or wraps, sluice's NOBUDGET error
// reply: no budget node is configured on the path.
func IsNoBudget(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && strings.HasPrefix(re.Error(), "NOBUDGET ")
}
