package cooperate

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"sync"
	"time"

	client "github.com/sluice-rl/sluice/clients/go"
)

// settleTimeout bounds the RL.SETTLE or RL.RELEASE sent after a request.
const settleTimeout = 5 * time.Second

// maxDebt bounds what one refusal from the upstream charges the budget.
const maxDebt = 1 << 40

// Shared is an http.RoundTripper that makes every process calling an
// upstream API share one sluice budget, so that together they stay within
// the upstream's limit however many they are and wherever they run:
//
//	nodes, _ := client.NewNodes(client.NodesConfig{Addrs: []string{"10.0.0.11:6380", "10.0.0.12:6380"}})
//	sl := client.New(nodes)
//	hc := &http.Client{Transport: &cooperate.Shared{Client: sl,
//		Limit: client.Limit{Rate: 10, Burst: 5}, MaxWait: 2 * time.Second}}
//
// Before each request it reserves the request's cost on the budget
// (RL.RESERVE key RATE … COST 1 WAIT max_wait, or RL.RESERVE path for a
// budget node of the tree). sluice decides on its own clock: a request
// that can go now goes, one that can go within MaxWait is held by the
// server until its tokens are due (the tokens are reserved at once, so
// the waiting requests of every process queue in one order), and one that
// would wait longer is not sent: RoundTrip returns a *LimitedError. After
// the response it settles the reservation at the cost (RL.SETTLE), or
// releases it (RL.RELEASE) when the request was never sent (its
// connection could not be made).
//
// The upstream stays the judge of its own limit: when it refuses anyway
// (429 or 503) with Retry-After — or, without one, with a RateLimit or
// X-RateLimit header saying nothing remains until a reset — the
// reservation is settled at the cost plus what the budget had left plus
// the tokens the budget earns in that time, so that no process sends
// again through the budget before the upstream said it may.
//
// Choose the budget below the upstream's limit by the jitter it must
// absorb: requests sluice releases at its rate reach the upstream up to
// some latency J later, so a budget of rate r and burst b stays within an
// upstream token bucket of rate r and burst B when b + r·J ≤ B. A budget of
// the upstream's rate and half its burst tolerates J = B/(2r): half a
// second against 10/s with a burst of 10.
//
// Shared is safe for concurrent use; the zero value is not usable (it
// needs Client and Limit or Path).
type Shared struct {
	// Client asks sluice; required. NewNodes gives it every node of a
	// cluster, so that losing one does not stop the requests.
	Client *client.Client
	// Limit is the budget as an inline limit (Rate required), used when
	// Path is empty: every process must give the same one.
	Limit client.Limit
	// Path, when set, reserves from this budget node of sluice's tree
	// instead, with Key as the subject when Key is set.
	Path string
	// Key names the budget for a request; nil means "cooperate:" and the
	// request's host, so that every process calling one upstream shares
	// one budget.
	Key func(*http.Request) string
	// Cost is the tokens a request takes; nil means 1.
	Cost func(*http.Request) int64
	// MaxWait is how long sluice may hold a request before it is sent
	// (at most half the time left before the request context's deadline,
	// the rest being the request's); 0 never holds: a request that
	// cannot go at once fails with *LimitedError.
	MaxWait time.Duration
	// TTL is how long a reservation lives unsettled (0: the server's
	// default, 60 s): after it the server settles it at the cost.
	TTL time.Duration
	// FailOpen sends a request without a reservation when sluice cannot
	// be reached (the error wraps client.ErrUnavailable); without it
	// RoundTrip returns that error. Give Base a *Transport to pace such
	// requests by the upstream's headers meanwhile.
	FailOpen bool
	// Base sends the requests; nil means http.DefaultTransport.
	Base http.RoundTripper
	// Now is the clock for the upstream's headers (nil: time.Now).
	Now func() time.Time

	wg sync.WaitGroup // settles in flight, for tests
}

func (s *Shared) base() http.RoundTripper {
	if s.Base != nil {
		return s.Base
	}
	return http.DefaultTransport
}

func (s *Shared) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// BudgetKey returns the budget name of a request: Key's, or "cooperate:"
// and the request's host.
func (s *Shared) BudgetKey(req *http.Request) string {
	if s.Key != nil {
		return s.Key(req)
	}
	return "cooperate:" + req.URL.Host
}

// RoundTrip reserves the request's cost on the shared budget, sends it
// when sluice lets it, and settles the reservation by the response, as
// the type's documentation describes.
func (s *Shared) RoundTrip(req *http.Request) (*http.Response, error) {
	if s.Client == nil {
		return nil, errors.New("cooperate: Shared needs a Client")
	}
	if s.Path == "" && s.Limit.Rate <= 0 {
		return nil, errors.New("cooperate: Shared needs a Limit with a Rate, or a Path")
	}
	ctx := req.Context()
	key := s.BudgetKey(req)
	cost := int64(1)
	if s.Cost != nil {
		cost = s.Cost(req)
	}
	var opts []client.Option
	wait := s.MaxWait
	if dl, ok := ctx.Deadline(); ok {
		// Half the time left at most: the rest is the request's own.
		wait = min(wait, time.Until(dl)/2) // a deadline is on the real clock
	}
	if wait > 0 {
		opts = append(opts, client.Wait(wait))
	}
	if s.TTL > 0 {
		opts = append(opts, client.TTL(s.TTL))
	}
	var (
		res client.Reservation
		err error
	)
	if s.Path != "" {
		if s.Key != nil {
			opts = append(opts, client.Key(key))
		}
		res, err = s.Client.Reserve(ctx, s.Path, cost, opts...)
	} else {
		res, err = s.Client.ReserveInline(ctx, key, &s.Limit, cost, opts...)
	}
	if err != nil {
		if s.FailOpen && errors.Is(err, client.ErrUnavailable) {
			return s.base().RoundTrip(req)
		}
		return nil, fmt.Errorf("cooperate: reserving %s: %w", key, err)
	}
	if !res.Allowed {
		return nil, &LimitedError{Host: req.URL.Host, Policy: key, Wait: res.RetryAfter}
	}
	resp, err := s.base().RoundTrip(req)
	if err != nil {
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "dial" {
			s.finish(res.ID, -1) // never sent
		} else {
			s.finish(res.ID, cost)
		}
		return nil, err
	}
	actual := cost
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable {
		if back, ok := backoff(resp.Header, s.now()); ok {
			actual = min(cost+s.debt(ctx, back, res.Remaining), maxDebt)
		}
	}
	s.finish(res.ID, actual)
	return resp, nil
}

// finish settles reservation id at actual, or releases it when actual is
// negative, in the background: the response does not wait for it.
func (s *Shared) finish(id string, actual int64) {
	if id == "" {
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
		defer cancel()
		if actual < 0 {
			s.Client.Release(ctx, id)
		} else {
			s.Client.Settle(ctx, id, actual)
		}
	}()
}

// debt is what the budget must be charged so that it gives nothing for
// back: what it had left, and what it earns in that time.
func (s *Shared) debt(ctx context.Context, back time.Duration, remaining int64) int64 {
	var rate float64 // tokens a second
	if s.Path == "" {
		per := s.Limit.Per
		if per == 0 {
			per = time.Second
		}
		rate = float64(s.Limit.Rate) / per.Seconds()
	} else if p, err := s.Client.Policy(ctx, s.Path); err == nil && p.HasLimit && p.Window > 0 {
		rate = float64(p.Rate) / p.Window.Seconds()
	}
	d := max(remaining, 0)
	if earned := math.Ceil(back.Seconds() * rate); earned < maxDebt {
		d += int64(earned)
	} else {
		d = maxDebt
	}
	return d
}

// backoff is how long the upstream said to stay away: its Retry-After,
// or the reset of a policy it says has nothing left.
func backoff(h http.Header, now time.Time) (time.Duration, bool) {
	if d, ok := RetryAfter(h, now); ok {
		return d, true
	}
	var longest time.Duration
	for _, st := range Parse(h, now) {
		if st.Remaining == 0 && st.Reset > longest {
			longest = st.Reset
		}
	}
	return longest, longest > 0
}
