package raftfsm

import (
	"fmt"
	"testing"
	"time"
)

// testOptions returns options for node i of an in-process test cluster:
// loopback with an OS-chosen Raft port, a fresh data dir, fast timing.
// It is testsupport/testraft.Options, which these tests cannot import (it
// imports raftfsm).
func testOptions(t testing.TB, i int) Options {
	o := Options{ID: fmt.Sprintf("n%d", i), RaftAddr: "127.0.0.1:0", RespAddr: fmt.Sprintf("127.0.0.1:%d", 1+i),
		DataDir: t.TempDir()}
	o.HeartbeatTimeout = 150 * time.Millisecond
	o.ElectionTimeout = 150 * time.Millisecond
	o.LeaderLeaseTimeout = 100 * time.Millisecond
	o.ApplyTimeout = 10 * time.Second
	return o
}
