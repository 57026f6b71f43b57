package limiter_test

import (
	"testing"
	"time"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/limiter"
	"github.com/sluice-rl/sluice/quota"
	"github.com/sluice-rl/sluice/testsupport/testlimiter"
)

// gone is a caller that has already left.
type gone struct{}

func (gone) Watch() (<-chan struct{}, func()) {
	ch := make(chan struct{})
	close(ch)
	return ch, func() {}
}

const t0 = int64(1_790_000_000) * 1e9

func service(t *testing.T, budgets string) (*limiter.Service, *int64) {
	t.Helper()
	now := t0
	return testlimiter.New(t, budgets, 2, func() int64 { return now }), &now
}

// The inline and the budget form run through the same plan: the same
// limit gives the same answers on the same timeline.
func TestInlineAndBudgetFormsAgree(t *testing.T) {
	s, now := service(t, `{"budgets":{"api":{"sustained":{"rate":5,"window":"second"},"burst":{"capacity":5}}}}`)
	lim, _ := engine.NewLimit(engine.TokenBucket, 5, time.Second, 5)
	var sc limiter.Scratch
	for i := 0; i < 7; i++ {
		in, err1 := s.Acquire(&limiter.Call{Path: []byte("key"), Rate: &lim}, &sc, nil)
		bu, err2 := s.Acquire(&limiter.Call{Path: []byte("api")}, &sc, nil)
		if err1 != nil || err2 != nil || in.Allowed != bu.Allowed || in.Result.Remaining != bu.Result.Remaining ||
			in.Result.RetryAfter != bu.Result.RetryAfter {
			t.Fatalf("call %d: inline %+v %v, budget %+v %v", i, in, err1, bu, err2)
		}
		if want := i < 5; (in.Allowed == 1) != want {
			t.Fatalf("call %d: allowed %d", i, in.Allowed)
		}
		*now += int64(10 * time.Millisecond)
	}
}

// A reservation whose caller has gone is refunded and refused, on either
// form; the next call is admitted with the tokens it gave back.
func TestHeldReservationGoesBackWhenTheCallerLeaves(t *testing.T) {
	s, _ := service(t, `{"budgets":{"q":{"sustained":{"rate":1,"window":"second"},"burst":{"capacity":1}}}}`)
	lim, _ := engine.NewLimit(engine.TokenBucket, 1, time.Second, 1)
	var sc limiter.Scratch
	for _, c := range []*limiter.Call{{Path: []byte("k"), Rate: &lim}, {Path: []byte("q")}} {
		if out, _ := s.Acquire(c, &sc, nil); out.Allowed != 1 {
			t.Fatalf("first call: %+v", out)
		}
		held := *c
		held.WaitMs, held.HasWait = 2000, true
		out, err := s.Acquire(&held, &sc, gone{})
		if err != nil || out.Allowed != 0 || out.Result.RetryAfter != int64(time.Second) || out.Result.Remaining != 0 {
			t.Fatalf("held call: %+v %v", out, err)
		}
		// What the refused reservation took is back: the bucket refills
		// in one second, as before it.
		if p, _ := s.Peek(c, &sc); p.Allowed != 0 || p.Result.RetryAfter != int64(time.Second) {
			t.Fatalf("after the refund: %+v", p)
		}
	}
}

// Refund and peek of an inline key without RATE use the bucket's own
// limit; a key with no bucket is refused with NOBUDGET.
func TestPeekAndRefundFallBackToTheBucketsLimit(t *testing.T) {
	s, _ := service(t, `{"budgets":{}}`)
	lim, _ := engine.NewLimit(engine.TokenBucket, 10, time.Second, 10)
	var sc limiter.Scratch
	for i := 0; i < 4; i++ {
		s.Acquire(&limiter.Call{Path: []byte("k"), Rate: &lim}, &sc, nil)
	}
	if p, err := s.Peek(&limiter.Call{Path: []byte("k")}, &sc); err != nil || p.Result.Remaining != 5 {
		t.Fatalf("peek: %+v %v", p, err)
	}
	if r, err := s.Refund(&limiter.Call{Path: []byte("k")}, 3, &sc); err != nil || r.Result.Remaining != 9 {
		t.Fatalf("refund: %+v %v", r, err)
	}
	if _, err := s.Peek(&limiter.Call{Path: []byte("nothing")}, &sc); err == nil || err.Error()[:8] != "NOBUDGET" {
		t.Fatalf("a key with no bucket: %v", err)
	}
	// An inline quota: the status names the key, counts what was admitted.
	spec := quota.Spec{N: 3}
	spec.Period, _ = quota.ParsePeriod("day", "")
	for i := 0; i < 4; i++ {
		s.Acquire(&limiter.Call{Path: []byte("u"), Quota: &spec}, &sc, nil)
	}
	st, err := s.Quota(&limiter.Call{Path: []byte("u"), Quota: &spec}, &sc)
	if err != nil || string(st.Level) != "u" || st.Used != 3 || st.Remaining() != 0 {
		t.Fatalf("quota status: %+v %v", st, err)
	}
}
