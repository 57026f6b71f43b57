package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Reservation is RL.RESERVE's reply: the decision, as RL.ACQUIRE's, and
// the id to settle, release or renew it with (empty when refused).
type Reservation struct {
	Decision
	ID string
}

// TTL sets how long a reservation lives before it is settled at its
// estimate (TTL, d rounded up to whole milliseconds; Reserve only).
func TTL(d time.Duration) Option {
	return func(o *callOpts) {
		if d <= 0 {
			o.err = fmt.Errorf("client: TTL must be positive, got %v", d)
			return
		}
		o.ttlMs = int64((d + time.Millisecond - 1) / time.Millisecond)
	}
}

// Concurrency limits the reservations of an inline key in flight at once
// (CONCURRENCY n; ReserveInline only).
func Concurrency(n int64) Option {
	return func(o *callOpts) {
		if n < 1 {
			o.err = fmt.Errorf("client: Concurrency must be at least 1, got %d", n)
			return
		}
		o.concurrency = n
	}
}

// Reserve admits estimate tokens on the budget node(s) for path and holds
// them under the returned id until Settle, Release or the TTL: RL.RESERVE
// path [KEY subject] COST estimate [TTL ms] [WAIT ms]. A refused
// reservation holds nothing and has no id. No failure policy applies:
// when sluice cannot be reached the error wraps ErrUnavailable.
func (c *Client) Reserve(ctx context.Context, path string, estimate int64, opts ...Option) (Reservation, error) {
	return c.reserve(ctx, path, nil, estimate, opts)
}

// ReserveInline is Reserve with an inline limit l for key (nil: the key is
// limited only by the Concurrency option): RL.RESERVE key [RATE n …]
// [CONCURRENCY n] COST estimate [TTL ms] [WAIT ms].
func (c *Client) ReserveInline(ctx context.Context, key string, l *Limit, estimate int64, opts ...Option) (Reservation, error) {
	return c.reserve(ctx, key, l, estimate, opts)
}

func (c *Client) reserve(ctx context.Context, target string, lim *Limit, estimate int64, opts []Option) (Reservation, error) {
	o := callOpts{cost: estimate, hasCost: true}
	for _, f := range opts {
		f(&o)
	}
	if err := o.check("RL.RESERVE", lim, false); err != nil {
		return Reservation{}, err
	}
	if o.dryRun {
		return Reservation{}, errors.New("client: RL.RESERVE takes no DryRun option")
	}
	v, err := c.callHeld(ctx, o.held(), callArgs("RL.RESERVE", target, lim, &o)...)
	if err != nil {
		return Reservation{}, err
	}
	arr, ok := v.([]any)
	if !ok || len(arr) != 7 {
		return Reservation{}, fmt.Errorf("client: RL.RESERVE reply is not an array of 7 elements: %v", v)
	}
	d, err := parseDecision("RL.RESERVE", arr[:6])
	if err != nil {
		return Reservation{}, err
	}
	id, ok := arr[6].(string)
	if !ok {
		return Reservation{}, fmt.Errorf("client: RL.RESERVE reply element 7 (id) is not a string: %v", arr[6])
	}
	return Reservation{Decision: d, ID: id}, nil
}

// Settle charges reservation id at its real cost actual: the difference
// from the estimate is given back or charged, never refused (RL.SETTLE id
// ACTUAL n). It describes the levels afterwards; IsNoReservation tells an
// id that is not open.
func (c *Client) Settle(ctx context.Context, id string, actual int64) (Decision, error) {
	v, err := c.call(ctx, "RL.SETTLE", id, "ACTUAL", actual)
	if err != nil {
		return Decision{}, err
	}
	return parseDecision("RL.SETTLE", v)
}

// Release gives reservation id's whole estimate back (RL.RELEASE) and
// reports whether it was open.
func (c *Client) Release(ctx context.Context, id string) (bool, error) {
	return c.flag(ctx, "RL.RELEASE", id)
}

// Renew makes reservation id expire ttl from now (RL.RENEW id TTL ms, ttl
// rounded up to whole milliseconds) and reports whether it was open.
func (c *Client) Renew(ctx context.Context, id string, ttl time.Duration) (bool, error) {
	if ttl <= 0 {
		return false, fmt.Errorf("client: Renew's ttl must be positive, got %v", ttl)
	}
	return c.flag(ctx, "RL.RENEW", id, "TTL", int64((ttl+time.Millisecond-1)/time.Millisecond))
}

// flag runs a command whose reply is :1 or :0.
func (c *Client) flag(ctx context.Context, args ...any) (bool, error) {
	v, err := c.call(ctx, args...)
	if err != nil {
		return false, err
	}
	n, ok := v.(int64)
	if !ok {
		return false, fmt.Errorf("client: %s reply is not an integer: %v", args[0], v)
	}
	return n == 1, nil
}

// IsNoReservation reports whether err is, or wraps, sluice's
// NORESERVATION error reply: the id is not open here (unknown, settled,
// released, expired, or issued by another node).
func IsNoReservation(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && strings.HasPrefix(re.Error(), "NORESERVATION ")
}
