// Package testraft makes raftfsm options for in-process test clusters:
// loopback addresses, a fresh data directory, fast timing. Only tests
// import it. raftfsm's own tests keep a copy of these few lines
// (raftfsm/helpers_test.go), since they cannot import a package that
// imports raftfsm.
package testraft

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/raftfsm"
)

// FastTiming shortens Raft's timeouts for in-process clusters on
// loopback, where elections should take tens of milliseconds.
func FastTiming(o *raftfsm.Options) {
	o.HeartbeatTimeout = 150 * time.Millisecond
	o.ElectionTimeout = 150 * time.Millisecond
	o.LeaderLeaseTimeout = 100 * time.Millisecond
	// Generous: a busy machine under the race detector applies a large
	// IMPORT slowly, and a write must not fail for that.
	o.ApplyTimeout = 10 * time.Second
}

// Options returns options for node i of an in-process cluster: id n<i>,
// loopback with an OS-chosen Raft port, a fresh data dir, fast timing.
func Options(t testing.TB, i int) raftfsm.Options {
	o := raftfsm.Options{ID: fmt.Sprintf("n%d", i), RaftAddr: "127.0.0.1:0", RespAddr: fmt.Sprintf("127.0.0.1:%d", 1+i),
		DataDir: t.TempDir()}
	FastTiming(&o)
	return o
}
