package server

import (
	"context"
	"time"
)

// loadingPoll is how often a loading node looks whether it has caught up;
// askEvery, how often at most it asks the leader for its commit index.
const (
	loadingPoll = 10 * time.Millisecond
	askEvery    = 250 * time.Millisecond
)

// unaskedGrace is how long a node that cannot ask the leader for its commit
// index (the leader refuses its peer login: a cluster whose nodes' passwords
// differ) waits, ready by Raft's own commit index, before it decides.
const unaskedGrace = 2 * time.Second

// watchLoading ends the service's loading (limiter.Service.StartLoading)
// once this node has caught up with the cluster — it knows a leader, has
// applied everything that leader had committed when it first asked
// (raftfsm.Node.LeaderCommit) and, on a leader, an entry of its own term,
// and every member of the Raft configuration is in its member list
// (raftfsm.Node.CaughtUp) — so that no limiting call is decided from
// an older tree, an empty one or a partial member list. A node that cannot
// ask the leader decides once Raft's own view has said it is caught up
// for unaskedGrace. A node that has not caught up within timeout (a
// cluster without quorum) decides from the last tree it applied, and says
// so; timeout 0 waits for as long as it takes.
func (n *Node) watchLoading(timeout time.Duration) {
	start := time.Now()
	t := time.NewTicker(loadingPoll)
	defer t.Stop()
	var (
		target     uint64 // the leader's commit index, once it answered
		askErr     error  // why the leader did not answer the last time
		asked      time.Time
		readySince time.Time // since when Raft's view has said caught up
	)
	for {
		caughtUp := n.Raft.CaughtUp()
		switch {
		case !caughtUp:
			readySince = time.Time{}
		case readySince.IsZero():
			readySince = time.Now()
		}
		if target == 0 && caughtUp && time.Since(asked) >= askEvery {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			target, askErr = n.Raft.LeaderCommit(ctx)
			cancel()
			asked = time.Now()
		}
		switch {
		case target > 0 && n.Raft.AppliedIndex() >= target && caughtUp:
			n.log.Info("caught up with the cluster: deciding limits", "after", time.Since(start).Round(time.Millisecond),
				"applied_index", n.Raft.AppliedIndex())
			n.Server.svc.Loaded()
			return
		case target == 0 && askErr != nil && caughtUp && time.Since(readySince) >= unaskedGrace:
			n.log.Warn("the leader did not say its commit index: deciding limits by this node's own, applied for "+unaskedGrace.String(),
				"err", askErr, "after", time.Since(start).Round(time.Millisecond), "applied_index", n.Raft.AppliedIndex())
			n.Server.svc.Loaded()
			return
		case timeout > 0 && time.Since(start) >= timeout:
			n.log.Warn("not caught up with the cluster after --loading-timeout: deciding limits from the last tree this node applied",
				"loading_timeout", timeout, "applied_index", n.Raft.AppliedIndex())
			n.Server.svc.Loaded()
			return
		}
		select {
		case <-n.stop:
			return
		case <-t.C:
		}
	}
}
