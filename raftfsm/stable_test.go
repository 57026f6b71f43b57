package raftfsm

import (
	"path/filepath"
	"testing"

	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

// A term saved after the node shut down (a heartbeat handled while it
// stopped) is dropped, not an error on the closed database: hashicorp/raft
// panics on one.
func TestStableStoreDropsWritesOnceClosed(t *testing.T) {
	db, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(t.TempDir(), "raft.db")})
	if err != nil {
		t.Fatal(err)
	}
	s := &stableStore{s: db}
	if err := s.SetUint64([]byte("CurrentTerm"), 2); err != nil {
		t.Fatal(err)
	}
	s.close()
	db.Close()
	if err := s.SetUint64([]byte("CurrentTerm"), 3); err != nil {
		t.Fatalf("a write after close: %v", err)
	}
	if err := s.Set([]byte("LastVoteCand"), []byte("n2")); err != nil {
		t.Fatalf("a write after close: %v", err)
	}
}
