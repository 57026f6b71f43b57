package raftfsm

import (
	"bytes"
	"context"
	"time"

	"github.com/hashicorp/raft"
)

// Forward relays a client command to the leader, waiting for one (up to
// ApplyTimeout) when none is known, and returns its raw reply. A node
// that relays to a peer which is no longer the leader (its refusal starts
// with NotLeaderReply) waits for a newer view and relays again; if this
// node becomes the leader meanwhile, Forward returns ErrLeaderHere and the
// caller serves the command itself.
func (n *Node) Forward(args [][]byte) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), n.opts.ApplyTimeout)
	defer cancel()
	var last error = ErrNoLeader
	for {
		changed := n.events.wait()
		id, addr, ok := n.Leader()
		switch {
		case n.raft.State() == raft.Leader:
			return nil, ErrLeaderHere
		case ok && addr != "" && id != n.opts.ID:
			raw, err := n.remote.Relay(ctx, addr, args)
			switch {
			case err == nil && !bytes.HasPrefix(raw, notLeaderReply):
				return raw, nil
			case err == nil:
				last = ErrNoLeader // a deposed leader: wait for the next
			case ctx.Err() != nil:
				return nil, &Error{Code: "TRYAGAIN", Msg: "leader " + addr + " unreachable: " + err.Error()}
			default:
				last = &Error{Code: "TRYAGAIN", Msg: "leader " + addr + " unreachable: " + err.Error()}
			}
		}
		if err := n.pause(ctx, changed, 50*time.Millisecond); err == ErrShutdown {
			return nil, err
		} else if err != nil {
			return nil, last
		}
	}
}

// NotLeaderReply starts the refusal of a node that receives a relayed
// command (on a connection named with ForwardPrefix) but does not lead.
const NotLeaderReply = "TRYAGAIN not the leader"

var notLeaderReply = []byte("-" + NotLeaderReply)

// pause waits for ch, for d, for ctx to end or for shutdown, and says why
// it ended early: ctx.Err() or ErrShutdown; nil otherwise.
func (n *Node) pause(ctx context.Context, ch <-chan struct{}, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-n.stop:
		return ErrShutdown
	case <-ch:
	case <-time.After(d):
	}
	return nil
}

// ReadState returns the state for a read. On a leader it first waits (up
// to ApplyTimeout) until the leader has applied an entry of its own term,
// so a new leader never answers with an older state than its predecessor
// acknowledged. With consistent, the node must be the leader: it confirms
// its leadership with a quorum and waits until it has applied everything
// committed before the read (a linearizable read); others get ErrNotLeader.
func (n *Node) ReadState(consistent bool) (*State, error) {
	leader := n.raft.State() == raft.Leader
	if !leader {
		if consistent {
			return nil, ErrNotLeader
		}
		return n.fsm.State(), nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), n.opts.ApplyTimeout)
	defer cancel()
	for n.readTerm.Load() != n.raft.CurrentTerm() {
		changed := n.events.wait()
		if n.raft.State() != raft.Leader {
			return n.ReadState(consistent)
		}
		if err := n.pause(ctx, changed, 20*time.Millisecond); err == ErrShutdown {
			return nil, err
		} else if err != nil {
			return nil, ErrNotCaught
		}
	}
	if consistent {
		commit := n.raft.CommitIndex()
		if err := n.raft.VerifyLeader().Error(); err != nil {
			return nil, ErrNotLeader
		}
		if !n.waitApplied(ctx, commit) {
			return nil, ErrTimeout
		}
	}
	return n.fsm.State(), nil
}

// Ready reports whether the node serves a current view: it has not been
// removed, knows a leader, has applied everything it knows committed, and,
// as leader, has applied an entry of its own term.
//
// A commit index of 0 means the node has not heard one from a leader yet
// (a restarted node whose log is not replayed): not ready.
func (n *Node) Ready() bool { return n.readyFor(n.raft.CommitIndex()) }

// readyFor is Ready with commit as the index the node must have applied.
func (n *Node) readyFor(commit uint64) bool {
	if n.removed.Load() {
		return false
	}
	if addr, _ := n.raft.LeaderWithID(); addr == "" {
		return false
	}
	if n.raft.State() == raft.Leader && n.readTerm.Load() != n.raft.CurrentTerm() {
		return false
	}
	return commit > 0 && n.AppliedIndex() >= commit
}

// ReadyWithin is Ready for a health check: rather than ask that nothing
// committed be left to apply at one instant (never true for long on a node
// under steady writes, so /readyz would flap), it waits up to d for the
// node to apply what was committed when asked. A node that lags further
// than d can apply, knows no leader, or was removed is not ready.
func (n *Node) ReadyWithin(d time.Duration) bool {
	commit := n.raft.CommitIndex()
	if n.readyFor(commit) {
		return true
	}
	if commit == 0 || n.removed.Load() {
		return false
	}
	if addr, _ := n.raft.LeaderWithID(); addr == "" {
		return false // no wait: applying would not make it ready
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return n.waitApplied(ctx, commit) && n.readyFor(commit)
}

// AppliedIndex returns the index up to which the state machine has applied
// the log. Raft's own applied index moves when an entry is handed to the
// state machine, not when it is applied; the state machine's counts only
// the entries it sees (commands and configurations). This is Raft's when
// every command or configuration entry up to it has been applied (what
// lies between is no-ops and barriers), else the state machine's.
func (n *Node) AppliedIndex() uint64 {
	fa, ra := n.fsm.Applied(), n.raft.AppliedIndex()
	if fa >= ra {
		return fa
	}
	if ra-fa > 64 {
		return fa
	}
	var l raft.Log
	for i := ra; i > fa; i-- {
		if err := n.logs.GetLog(i, &l); err != nil {
			return ra // compacted into a snapshot that is restored
		}
		if l.Type == raft.LogCommand || l.Type == raft.LogConfiguration {
			return fa
		}
	}
	return ra
}

// LeaderCommit returns the commit index of the leader this node knows: its
// own when it leads, else what the leader answers (RL.CLUSTER INFO). A
// node that has applied up to it has every write acknowledged before the
// question, which its own commit index does not promise: a follower that
// restarts learns the leader's commit index one batch of entries at a time.
func (n *Node) LeaderCommit(ctx context.Context) (uint64, error) {
	if n.raft.State() == raft.Leader {
		return n.raft.CommitIndex(), nil
	}
	id, addr, ok := n.Leader()
	if !ok || addr == "" || id == n.opts.ID {
		return 0, ErrNoLeader
	}
	st, err := n.remote.Status(ctx, addr)
	if err != nil {
		return 0, err
	}
	if !st.Leader || st.ID != id {
		return 0, ErrNoLeader
	}
	return st.CommitIndex, nil
}
