package limiter_test

import (
	"testing"
	"time"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/fault"
	"github.com/sluice-rl/sluice/limiter"
)

// While the node loads, every limiting operation is answered LOADING and
// changes nothing; a call that arrives meanwhile and is still waiting when
// loading ends is decided; after it, calls are decided at once.
func TestLoadingAnswersLoadingAndDecidesNothing(t *testing.T) {
	s, _ := service(t, `{"budgets":{"api":{"sustained":{"rate":1,"window":"hour"},"burst":{"capacity":1}}}}`)
	lim, _ := engine.NewLimit(engine.TokenBucket, 1, time.Hour, 1)
	var sc limiter.Scratch
	s.StartLoading()
	if !s.Loading() {
		t.Fatal("not loading after StartLoading")
	}
	calls := []*limiter.Call{{Path: []byte("key"), Rate: &lim}, {Path: []byte("api")}}
	for _, c := range calls {
		if _, err := s.Acquire(c, &sc, nil); err != limiter.ErrLoading {
			t.Fatalf("acquire while loading: %v", err)
		}
		if _, err := s.Peek(c, &sc); err != limiter.ErrLoading {
			t.Fatalf("peek while loading: %v", err)
		}
		if _, err := s.Refund(c, 1, &sc); err != limiter.ErrLoading {
			t.Fatalf("refund while loading: %v", err)
		}
	}
	if fault.Code(limiter.ErrLoading) != "LOADING" || !fault.Retryable(limiter.ErrLoading) {
		t.Fatalf("ErrLoading: %v", limiter.ErrLoading)
	}
	// A call waiting when loading ends is decided, from full buckets: the
	// refused calls above took nothing.
	done := make(chan error, 1)
	var out limiter.Outcome
	go func() {
		var sc limiter.Scratch
		var err error
		out, err = s.Acquire(calls[1], &sc, nil)
		done <- err
	}()
	s.Loaded()
	if err := <-done; err != nil || out.Allowed != 1 {
		t.Fatalf("call waiting as loading ended: %+v %v", out, err)
	}
	s.Loaded() // twice is harmless
	if s.Loading() {
		t.Fatal("loading after Loaded")
	}
	if out, err := s.Acquire(calls[0], &sc, nil); err != nil || out.Allowed != 1 {
		t.Fatalf("inline call after loading: %+v %v", out, err)
	}
	if out, err := s.Acquire(calls[1], &sc, nil); err != nil || out.Allowed != 0 {
		t.Fatalf("second budget call of a burst of 1: %+v %v", out, err)
	}
}
