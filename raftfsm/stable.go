package raftfsm

import (
	"sync"

	"github.com/hashicorp/raft"
)

// stableStore is the node's raft.StableStore (the current term and vote),
// closed before the database under it. hashicorp/raft handles a heartbeat
// on the transport's goroutine, and one that began just before Shutdown
// may save a term after it returned; it panics on any error of the store.
// Once closed, a write is dropped (the node's life has ended: it is as if
// the heartbeat had come after it) instead of failing on a closed file.
type stableStore struct {
	mu     sync.RWMutex
	closed bool
	s      raft.StableStore
}

func (s *stableStore) Set(k, v []byte) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil
	}
	return s.s.Set(k, v)
}

func (s *stableStore) Get(k []byte) ([]byte, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.s.Get(k)
}

func (s *stableStore) SetUint64(k []byte, v uint64) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil
	}
	return s.s.SetUint64(k, v)
}

func (s *stableStore) GetUint64(k []byte) (uint64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.s.GetUint64(k)
}

// close makes later writes no-ops; it returns once none is under way.
func (s *stableStore) close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
}
