// Package cooperate is the cooperative half of rate limiting for Go
// programs that call a limited HTTP API: an http.RoundTripper that reads
// the rate-limit headers of the API's responses and holds requests back
// so that the API does not have to refuse them.
//
//	hc := &http.Client{Transport: &cooperate.Transport{MaxWait: 2 * time.Second}}
//	resp, err := hc.Get("https://api.example.com/v1/items")
//	var lim *cooperate.LimitedError
//	if errors.As(err, &lim) {
//		// not sent: it would have had to wait lim.Wait
//	}
//
// # What it reads
//
// From every response, with header names in any case:
//
//   - RateLimit-Policy and RateLimit, the IETF draft's structured fields:
//     `"burst";q=10;w=1` and `"burst";r=9;t=1` (quota q per window w
//     seconds; r remaining, t seconds until reset), one item per policy;
//     the older draft's forms `10;w=1` and `limit=10, remaining=9, reset=1`
//     too, and its RateLimit-Limit, RateLimit-Remaining and RateLimit-Reset;
//   - X-RateLimit-Limit, X-RateLimit-Remaining and X-RateLimit-Reset (the
//     reset in seconds from now, or a Unix time when it is above 10⁹);
//   - Retry-After, in seconds or as an HTTP date, on any response.
//
// sluice's httplimit middleware and HTTP API send exactly these
// (docs/clients.md, "Headers").
//
// # How it paces
//
// State is kept per partition: the request's host and the policy's name
// (empty for X-RateLimit-* and unnamed policies). With a window (w, from
// RateLimit-Policy) a partition is a token bucket of capacity q that
// refills at q/w per second (lowered to q/t when a response says nothing
// remains and all q come back within t seconds); its tokens are set from
// each response's remaining count, less the requests still in flight, so
// that the local count never exceeds the server's. Without a window the
// remaining count lasts until the reset, and when it nears zero (a tenth of
// the limit or less) the requests left are spread evenly over the time to
// the reset. A request is sent once every partition of its host has a
// token; after a 429 or 503 with Retry-After, no request goes to the host
// before that time plus up to a tenth of it (at most one second) of random
// jitter, so that clients refused together do not come back together.
//
// A request that would have to wait waits, when the wait fits within
// MaxWait and the request context's deadline; otherwise RoundTrip returns a
// *LimitedError at once without sending it. MaxWait 0 never waits: fail
// fast. A response is returned as it came, 429s included: the Transport
// does not resend requests.
//
// # Sharing one budget across processes
//
// A Transport knows only the answers its own process got. Processes that
// call one upstream share its limit; Shared makes them share one sluice
// budget for it too: each request reserves its cost (RL.RESERVE … WAIT)
// before it is sent, sluice paces the requests of every process on its own
// clock, and the reservation is settled after the response, the upstream's
// Retry-After folded in. See Shared.
package cooperate

import (
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// DefaultMaxPartitions bounds the hosts a Transport keeps state for.
const DefaultMaxPartitions = 10000

// maxPolicies bounds the policies kept per host.
const maxPolicies = 16

// Transport is an http.RoundTripper that paces requests by the rate-limit
// headers of earlier responses. Its zero value is ready to use (it sends
// through http.DefaultTransport and fails fast); it is safe for concurrent
// use and must not be copied after first use.
type Transport struct {
	// Base sends the requests; nil means http.DefaultTransport.
	Base http.RoundTripper
	// MaxWait is the longest a request may be held before it is sent;
	// a request that would wait longer fails with *LimitedError at once.
	// Zero: never wait.
	MaxWait time.Duration
	// MaxPartitions bounds the hosts kept (0: DefaultMaxPartitions); past
	// it, the state of other hosts is dropped.
	MaxPartitions int
	// Now is the clock (nil: time.Now); for tests.
	Now func() time.Time

	mu    sync.Mutex
	hosts map[string]*host
}

// LimitedError is the error of a request not sent because it would have
// had to wait longer than allowed.
type LimitedError struct {
	// Host is the request's host, Policy the name of the partition that
	// held it ("" for X-RateLimit-* or an unnamed policy, or for a
	// Retry-After).
	Host, Policy string
	// Wait is how long the request would have had to wait.
	Wait time.Duration
}

func (e *LimitedError) Error() string {
	p := ""
	if e.Policy != "" {
		p = " (policy " + strconv.Quote(e.Policy) + ")"
	}
	return fmt.Sprintf("cooperate: %s%s is rate limited for %v more; request not sent", e.Host, p, e.Wait.Round(time.Millisecond))
}

// host is the state of one host.
type host struct {
	blockedUntil time.Time
	inflight     int
	policies     map[string]*bucket
}

// bucket is one partition's local estimate of the server's limit.
type bucket struct {
	limit   float64   // capacity; 0 unknown
	window  float64   // seconds; 0: no window, count until resetAt
	rate    float64   // tokens a second, with a window
	tokens  float64   // may be below 0: reserved by waiting requests
	at      time.Time // when tokens was true
	resetAt time.Time // without a window: when tokens becomes limit
	last    time.Time // without a window: the last send, for spreading
}

func (t *Transport) now() time.Time {
	if t.Now != nil {
		return t.Now()
	}
	return time.Now()
}

// RoundTrip sends req when the partitions of its host allow it, as the
// package documentation describes.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	hostKey := req.URL.Host
	wait, err := t.reserve(req, hostKey)
	if err != nil {
		return nil, err
	}
	if wait > 0 {
		tm := time.NewTimer(wait)
		select {
		case <-tm.C:
		case <-req.Context().Done():
			tm.Stop()
			t.release(hostKey, true)
			return nil, req.Context().Err()
		}
	}
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	resp, err := base.RoundTrip(req)
	if err != nil {
		t.release(hostKey, false)
		return nil, err
	}
	t.observe(hostKey, resp)
	return resp, nil
}

// reserve takes a token from every partition of the host, returning how
// long the request must wait for them, or a *LimitedError (taking nothing)
// when that is longer than allowed.
func (t *Transport) reserve(req *http.Request, hostKey string) (time.Duration, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	h := t.hosts[hostKey]
	if h == nil {
		if t.hosts == nil {
			t.hosts = map[string]*host{}
		}
		bound := t.MaxPartitions
		if bound <= 0 {
			bound = DefaultMaxPartitions
		}
		if len(t.hosts) >= bound {
			for k, o := range t.hosts {
				if o.inflight == 0 {
					delete(t.hosts, k)
					break
				}
			}
		}
		h = &host{policies: map[string]*bucket{}}
		t.hosts[hostKey] = h
	}
	wait, policy := h.blockedUntil.Sub(now), ""
	for name, b := range h.policies {
		if w := b.need(now); w > wait {
			wait, policy = w, name
		}
	}
	if wait > 0 {
		allowed := t.MaxWait
		if dl, ok := req.Context().Deadline(); ok {
			allowed = min(allowed, time.Until(dl)) // a deadline is on the real clock
		}
		if wait > allowed {
			return 0, &LimitedError{Host: hostKey, Policy: policy, Wait: wait}
		}
	} else {
		wait = 0
	}
	for _, b := range h.policies {
		b.take(now.Add(wait))
	}
	h.inflight++
	return wait, nil
}

// release ends a request that got no response; refund gives its tokens
// back (it was not sent).
func (t *Transport) release(hostKey string, refund bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	h := t.hosts[hostKey]
	if h == nil {
		return
	}
	h.inflight = max(h.inflight-1, 0)
	if refund {
		for _, b := range h.policies {
			b.tokens++
		}
	}
}

// need returns how long until a request may take a token.
func (b *bucket) need(now time.Time) time.Duration {
	if b.window > 0 {
		b.refill(now)
		if b.tokens >= 1 {
			return 0
		}
		return seconds((1 - b.tokens) / b.rate)
	}
	if b.resetAt.IsZero() || !now.Before(b.resetAt) {
		return 0
	}
	if b.tokens < 1 {
		return b.resetAt.Sub(now)
	}
	// Near zero: spread what remains over the time to the reset.
	if b.limit > 0 && b.tokens <= b.limit/10 && !b.last.IsZero() {
		gap := time.Duration(float64(b.resetAt.Sub(b.last)) / (b.tokens + 1))
		return b.last.Add(gap).Sub(now)
	}
	return 0
}

// take reserves a token for a request sent at at.
func (b *bucket) take(at time.Time) {
	if b.window > 0 {
		b.tokens--
		return
	}
	if b.resetAt.IsZero() || !at.Before(b.resetAt) {
		return
	}
	b.tokens--
	b.last = at
}

func (b *bucket) refill(now time.Time) {
	if el := now.Sub(b.at).Seconds(); el > 0 {
		b.tokens = math.Min(b.limit, b.tokens+el*b.rate)
		b.at = now
	}
}

func seconds(s float64) time.Duration { return time.Duration(math.Ceil(s * 1e9)) }

// observe updates the host's partitions from a response's headers.
func (t *Transport) observe(hostKey string, resp *http.Response) {
	hd := resp.Header
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	h := t.hosts[hostKey]
	if h == nil {
		return // dropped by the bound meanwhile
	}
	h.inflight = max(h.inflight-1, 0)
	others := float64(h.inflight)
	for _, s := range Parse(hd, now) {
		b := h.policies[s.Policy]
		if b == nil {
			if len(h.policies) >= maxPolicies {
				continue
			}
			b = &bucket{}
			h.policies[s.Policy] = b
		}
		b.update(s, others, now)
	}
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable {
		if ra, ok := RetryAfter(hd, now); ok {
			jitter := time.Duration(rand.Int64N(int64(min(ra/10, time.Second)) + 1))
			if until := now.Add(ra + jitter); until.After(h.blockedUntil) {
				h.blockedUntil = until
			}
		}
	}
}

// update sets the partition from what a response says.
func (b *bucket) update(s State, others float64, now time.Time) {
	if s.Remaining < 0 {
		return
	}
	rem := float64(s.Remaining) - others
	if s.Window > 0 && s.Limit > 0 {
		q, w := float64(s.Limit), s.Window.Seconds()
		rate := q / w
		if q != b.limit || w != b.window {
			b.limit, b.window, b.rate, b.tokens, b.at = q, w, rate, rem, now
		}
		if s.Remaining == 0 && s.Reset > 0 {
			// All q back within t (rounded up): no faster than q/t.
			b.rate = math.Min(b.rate, q/s.Reset.Seconds())
		}
		b.refill(now)
		b.tokens = math.Min(b.tokens, rem)
		return
	}
	b.window, b.rate = 0, 0
	if s.Limit > 0 {
		b.limit = float64(s.Limit)
	}
	b.tokens = rem
	b.resetAt = now.Add(s.Reset)
	if s.Reset <= 0 {
		b.resetAt = time.Time{}
	}
}
