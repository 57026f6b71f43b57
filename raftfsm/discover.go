package raftfsm

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
)

// PeerStatus is what a node tells one that is looking for its cluster
// (Options.Discover).
type PeerStatus struct {
	ID string
	// InCluster: the node has a Raft configuration (it bootstrapped a
	// cluster or was added to one), so a new node joins through it.
	InCluster bool
	// Leader: the node says it leads; CommitIndex is the commit index it
	// reports (RL.CLUSTER INFO's role and commit_index).
	Leader      bool
	CommitIndex uint64
}

// Discovery's pace: the first look is at once, later ones back off to
// discoverMaxWait, so that a pod waiting for its peers does not hammer the
// resolver or them.
const (
	discoverFirstWait = 250 * time.Millisecond
	discoverMaxWait   = 5 * time.Second
)

// discover runs while a node that started with no Raft state and
// Options.Discover set has no configuration: it looks for its cluster
// until it is in one, logging each change of what it found.
func (n *Node) discover() {
	defer n.wg.Done()
	if n.inCluster() {
		return // restarted on its data: Raft knows the members
	}
	wait, last := discoverFirstWait, ""
	for !n.inCluster() {
		msg := n.discoverOnce()
		if msg != last {
			n.log.Info("discovery: "+msg, "id", n.opts.ID)
			last = msg
		}
		select {
		case <-n.stop:
			return
		case <-time.After(wait):
		}
		wait = min(wait*2, discoverMaxWait)
	}
	n.log.Info("discovery: in the cluster", "id", n.opts.ID)
}

// inCluster reports whether this node has a Raft configuration.
func (n *Node) inCluster() bool {
	servers, err := n.Servers()
	return err == nil && len(servers) > 0
}

// discoverOnce is one look: resolve the addresses, ask each node whether
// it is in a cluster, and join the first that is; failing that, when at
// least BootstrapExpect nodes (this one included) answered and this one
// has the lowest id, bootstrap. Every node of a new cluster sees the same
// set once all have started, so exactly one bootstraps, and the others
// join it. It returns what it found, for the log.
func (n *Node) discoverOnce() string {
	ctx, cancel := context.WithTimeout(context.Background(), n.opts.ApplyTimeout)
	defer cancel()
	addrs, err := n.opts.Discover(ctx)
	if err != nil {
		return "resolving peers: " + err.Error()
	}
	ids, failed := []string{n.opts.ID}, 0
	for _, a := range addrs {
		st, err := n.remote.Status(ctx, a)
		switch {
		case err != nil:
			failed++
		case st.InCluster:
			return n.joinVia(ctx, a)
		case st.ID != n.opts.ID && !slices.Contains(ids, st.ID):
			ids = append(ids, st.ID)
		}
	}
	slices.Sort(ids)
	found := fmt.Sprintf("%d address(es) resolved, %d unreachable, nodes without a cluster: %s",
		len(addrs), failed, strings.Join(ids, ","))
	if len(ids) < n.opts.BootstrapExpect || failed > 0 {
		// An address that does not answer may be a member of a cluster
		// already (its node restarting): never bootstrap past it.
		return fmt.Sprintf("waiting for %d nodes (--bootstrap-expect) to bootstrap a new cluster; %s", n.opts.BootstrapExpect, found)
	}
	if ids[0] != n.opts.ID {
		return fmt.Sprintf("waiting for %s (the lowest id) to bootstrap the cluster; %s", ids[0], found)
	}
	if err := n.bootstrap(); err != nil {
		return "bootstrapping: " + err.Error()
	}
	return "bootstrapped a new cluster as the lowest id of " + strings.Join(ids, ",")
}

// joinVia asks the member at addr to add this node.
func (n *Node) joinVia(ctx context.Context, addr string) string {
	me := Member{ID: n.opts.ID, RespAddr: n.opts.RespAddr, RaftAddr: n.opts.RaftAddr}
	if err := n.remote.Join(ctx, addr, me, n.fresh.Load()); err != nil {
		if strings.Contains(err.Error(), RemovedText) {
			n.setRemoved(true)
		}
		return "joining via " + addr + ": " + err.Error()
	}
	return "joined via " + addr
}
