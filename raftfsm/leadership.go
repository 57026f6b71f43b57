package raftfsm

import (
	"fmt"
	"time"

	"github.com/hashicorp/raft"
)

// watch turns Raft's leader and role observations into events, and on
// becoming leader applies a barrier: once it returns, the new leader has
// applied everything earlier leaders committed, and may serve reads.
func (n *Node) watch(obs chan raft.Observation) {
	defer n.wg.Done()
	for {
		select {
		case <-n.stop:
			return
		case o := <-obs:
			switch d := o.Data.(type) {
			case raft.ResumedHeartbeatObservation:
				n.peers.resumed(n.addrOf(string(d.PeerID)))
				n.beats.resumed(string(d.PeerID), time.Now())
				continue
			case raft.FailedHeartbeatObservation:
				n.beats.failed(string(d.PeerID), d.LastContact, time.Now())
				continue
			case raft.LeaderObservation:
				n.logLeader(d)
			}
			n.events.fire()
			if st, ok := o.Data.(raft.RaftState); ok && st == raft.Leader {
				n.wg.Add(1)
				go n.catchUp(n.raft.CurrentTerm())
			}
		}
	}
}

// logLeader says, once per leader and term, that this node became leader
// or follows another: one INFO line on each node for a leadership change.
func (n *Node) logLeader(o raft.LeaderObservation) {
	if o.LeaderID == "" {
		n.log.Debug("no leader", "term", n.raft.CurrentTerm())
		return
	}
	term := n.raft.CurrentTerm()
	key := fmt.Sprintf("%s@%d", o.LeaderID, term)
	if key == n.seen {
		return
	}
	n.seen = key
	if o.LeaderAddr != "" {
		n.peers.resumed(string(o.LeaderAddr)) // a peer that leads is up
	}
	if string(o.LeaderID) == n.opts.ID {
		n.log.Info("became leader", "term", term, "leader_id", string(o.LeaderID))
		return
	}
	n.log.Info("following leader", "term", term, "leader_id", string(o.LeaderID), "leader_raft", string(o.LeaderAddr))
}

func (n *Node) catchUp(term uint64) {
	defer n.wg.Done()
	for n.raft.State() == raft.Leader && n.raft.CurrentTerm() == term {
		if err := n.raft.Barrier(n.opts.ApplyTimeout).Error(); err == nil {
			if n.raft.CurrentTerm() == term {
				n.readTerm.Store(term)
				n.events.fire()
			}
			return
		}
		select {
		case <-n.stop:
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
}
