package limiter

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-rl/sluice/fault"
)

// LoadingWait bounds how long a limiting call that arrives while the node
// is loading waits for it to catch up before it is answered with
// ErrLoading: long enough that a lone node, which catches up in
// milliseconds, is never seen loading; short enough that a client retries.
const LoadingWait = time.Second

// ErrLoading answers a limiting call while the node has not yet caught up
// with the cluster since it started (Redis's reply while it loads its
// dataset, which clients retry). It is one value, so that refusing
// allocates nothing.
var ErrLoading = &fault.Error{Code: "LOADING", Msg: "sluice is loading the dataset in memory", Retry: true}

// loadGate holds limiting calls back while the node loads: from
// StartLoading until Loaded. Unused (never started), it costs a call one
// atomic load.
type loadGate struct {
	on   atomic.Bool
	done chan struct{}
	once sync.Once
}

// StartLoading makes the service answer limiting calls with ErrLoading
// (after waiting up to LoadingWait) until Loaded is called. It is called
// once, before the node serves.
func (s *Service) StartLoading() {
	s.gate.done = make(chan struct{})
	s.gate.on.Store(true)
}

// Loaded ends loading: calls waiting are decided, and every later call is
// decided at once. Calling it again, or without StartLoading, does nothing.
func (s *Service) Loaded() {
	s.gate.once.Do(func() {
		if s.gate.done != nil {
			s.gate.on.Store(false)
			close(s.gate.done)
		}
	})
}

// Loading reports whether the service still answers ErrLoading.
func (s *Service) Loading() bool { return s.gate.on.Load() }

// loaded returns nil once the node has caught up, waiting up to
// LoadingWait for it; else ErrLoading.
func (s *Service) loaded() error {
	if !s.gate.on.Load() {
		return nil
	}
	t := time.NewTimer(LoadingWait)
	defer t.Stop()
	select {
	case <-s.gate.done:
		return nil
	case <-t.C:
	case <-s.Shutdown:
	}
	return ErrLoading
}
