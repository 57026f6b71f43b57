package server

import (
	"context"
	"time"
)

// loadingPoll is how often a loading node looks whether it has caught up.
const loadingPoll = 10 * time.Millisecond

// watchLoading ends the service's loading (limiter.Service.StartLoading)
// once this node has caught up with the cluster — it knows a leader, has
// applied everything that leader had committed when it first asked
// (raftfsm.Node.LeaderCommit) and, on a leader, an entry of its own term,
// and every member of the Raft configuration is in its member list
// (raftfsm.Node.CaughtUp) — so that no limiting call is decided from
// an older tree, an empty one or a partial member list. A node that has
// not caught up within timeout (a cluster without quorum) decides from the
// last tree it applied, and says so; timeout 0 waits for as long as it
// takes.
func (n *Node) watchLoading(timeout time.Duration) {
	start := time.Now()
	t := time.NewTicker(loadingPoll)
	defer t.Stop()
	var target uint64 // the leader's commit index, once it answered
	for {
		if target == 0 && n.Raft.Ready() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			target, _ = n.Raft.LeaderCommit(ctx)
			cancel()
		}
		switch {
		case target > 0 && n.Raft.AppliedIndex() >= target && n.Raft.CaughtUp():
			n.log.Info("caught up with the cluster: deciding limits", "after", time.Since(start).Round(time.Millisecond),
				"applied_index", n.Raft.AppliedIndex())
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
