package raftfsm

import (
	"context"
	"strings"
	"time"

	"github.com/hashicorp/raft"
)

// JoinBy says who asks a node to join, which decides whether a node an
// operator removed (RL.CLUSTER LEAVE) is let back in.
type JoinBy int

const (
	// JoinByOperator: an operator's RL.CLUSTER JOIN; it re-admits a
	// removed node.
	JoinByOperator JoinBy = iota
	// JoinBySelf: a node's own request (--join, discovery) from a node
	// that has Raft state; refused for a removed node, which so stays out
	// while it runs, or restarts, on its old state.
	JoinBySelf
	// JoinAfresh: a node's own request from a node that started with no
	// Raft state (its data directory deleted or new): the documented way
	// to move a node (LEAVE, delete the data directory, start with
	// --join), so it re-admits a removed node as an operator's join does.
	JoinAfresh
)

func (b JoinBy) String() string {
	return [...]string{"operator", "self", "self_afresh"}[b]
}

// Join adds a node as a voter, or as a non-voter once the cluster has
// Options.Voters voters (leader only), first removing any stale
// member with the same id or Raft address, and records its RESP address.
// It is idempotent: joining a member again only refreshes its record. A
// node's own request (JoinBySelf) of a node an operator removed is
// refused; an operator's join, or a removed node's own started afresh,
// re-admits it.
func (n *Node) Join(id, raftAddr, respAddr string, by JoinBy) error {
	if n.raft.State() != raft.Leader {
		return ErrNotLeader
	}
	auto := by == JoinBySelf
	if auto && n.fsm.State().Removed[id] {
		return errRemoved(id)
	}
	n.suffrageMu.Lock()
	defer n.suffrageMu.Unlock()
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return &Error{Code: "TRYAGAIN", Msg: err.Error()}
	}
	already := false
	for _, s := range f.Configuration().Servers {
		switch {
		case string(s.ID) == id && string(s.Address) == raftAddr:
			already = true
		case string(s.ID) == id || string(s.Address) == raftAddr:
			if err := n.raft.RemoveServer(s.ID, 0, n.opts.ApplyTimeout).Error(); err != nil {
				return &Error{Code: "TRYAGAIN", Msg: "removing stale member " + string(s.ID) + ": " + err.Error()}
			}
		}
	}
	m := Member{ID: id, RespAddr: respAddr, RaftAddr: raftAddr}
	if st := n.fsm.State(); already && st.Members[id] == m && !st.Removed[id] {
		// A voter asking again with the addresses on record (a join
		// retried while its first answer was on its way): nothing to
		// change, and no entry for it.
		return nil
	}
	resp, err := n.Write(&Entry{Type: AddMember, Member: &m, Auto: auto})
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		return err
	}
	if already {
		return nil
	}
	add, as := n.raft.AddVoter, "voter"
	if n.joinSuffrage(f.Configuration().Servers, id, raftAddr) == raft.Nonvoter {
		// As many voters as --voters already: the autopilot promotes
		// this node if a voter is lost (autopilot.go).
		add, as = n.raft.AddNonvoter, "nonvoter"
	}
	if err := add(raft.ServerID(id), raft.ServerAddress(raftAddr), 0, n.opts.ApplyTimeout).Error(); err != nil {
		return &Error{Code: "TRYAGAIN", Msg: "adding " + as + ": " + err.Error()}
	}
	n.log.Info("node joined", "id", id, "raft", raftAddr, "resp", respAddr, "as", as, "by", by.String())
	return nil
}

// Leave removes a node from the cluster (leader only). The node is marked
// removed in the replicated state, so it does not rejoin on its own (on
// the state it has; see JoinAfresh).
func (n *Node) Leave(id string) error {
	if n.raft.State() != raft.Leader {
		return ErrNotLeader
	}
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return &Error{Code: "TRYAGAIN", Msg: err.Error()}
	}
	found := false
	for _, s := range f.Configuration().Servers {
		found = found || string(s.ID) == id
	}
	st := n.fsm.State()
	_, member := st.Members[id]
	if !found && !member {
		return &Error{Code: "ERR", Msg: "no node with id '" + id + "'"}
	}
	if member || !st.Removed[id] {
		resp, err := n.Write(&Entry{Type: RemoveMember, ID: id})
		if err == nil {
			err = resp.Err
		}
		if err != nil {
			return err
		}
	}
	if found {
		if err := n.raft.RemoveServer(raft.ServerID(id), 0, n.opts.ApplyTimeout).Error(); err != nil {
			return &Error{Code: "TRYAGAIN", Msg: "removing server: " + err.Error()}
		}
	}
	n.log.Info("node left", "id", id)
	return nil
}

// Removed reports whether an operator removed this node from the cluster.
func (n *Node) Removed() bool { return n.removed.Load() }

func (n *Node) setRemoved(removed bool) {
	if n.removed.Swap(removed) != removed {
		if removed {
			n.log.Warn("this node was removed from the cluster; it does not rejoin on its own (an operator re-admits it with RL.CLUSTER JOIN)", "id", n.opts.ID)
		} else {
			n.log.Info("this node was re-admitted to the cluster", "id", n.opts.ID)
		}
		n.events.fire()
	}
}

// configurationApplied follows the Raft configurations this node applies:
// one that drops this node after it was a member means it was removed;
// one that lists it again (an operator's join), that it is back.
func (n *Node) configurationApplied(_ uint64, c raft.Configuration) {
	in := false
	for _, s := range c.Servers {
		in = in || string(s.ID) == n.opts.ID
	}
	switch {
	case in:
		n.wasMember.Store(true)
		n.fresh.Store(false)
		if !n.fsm.State().Removed[n.opts.ID] {
			n.setRemoved(false)
		}
	case n.wasMember.Load() && len(c.Servers) > 0:
		n.setRemoved(true)
	}
}

// register makes sure the replicated member map holds this node (and, on
// the leader, every bootstrap peer) with its current addresses: a new node
// joins through Join or the leader; a restarted node with a new RESP
// address refreshes its record. A removed node does not rejoin.
func (n *Node) register() {
	defer n.wg.Done()
	backoff := 50 * time.Millisecond
	for {
		if n.registerOnce() {
			backoff = 2 * time.Second // settled: look again now and then
		} else {
			backoff = min(backoff*2, time.Second)
		}
		select {
		case <-n.stop:
			return
		case <-n.changed:
		case <-time.After(backoff):
		}
	}
}

// registerOnce is one pass of register; it reports whether the member map
// is settled (this node recorded, and on the leader every voter).
func (n *Node) registerOnce() bool {
	me := Member{ID: n.opts.ID, RespAddr: n.opts.RespAddr, RaftAddr: n.opts.RaftAddr}
	if n.fresh.Load() && n.inConfiguration() {
		// In a configuration (one a snapshot brought too, which
		// configurationApplied does not see): no longer fresh.
		n.fresh.Store(false)
	}
	st := n.fsm.State()
	if st.Removed[me.ID] {
		n.setRemoved(true)
		return true
	}
	if n.removed.Load() {
		return true
	}
	if n.IsLeader() {
		voters := map[string]bool{}
		if servers, err := n.Servers(); err == nil {
			for _, s := range servers {
				voters[string(s.ID)] = true
			}
		}
		for i, p := range append([]Member{me}, n.opts.Peers...) {
			if i > 0 && (p.ID == me.ID || st.Members[p.ID] != (Member{}) || !voters[p.ID] || st.Removed[p.ID]) {
				// A peer's own record wins over the bootstrap list, and
				// a peer that left stays gone.
				continue
			}
			if st.Members[p.ID] != p {
				if _, err := n.Write(&Entry{Type: AddMember, Member: &p, Auto: true}); err != nil {
					n.log.Debug("registering member", "id", p.ID, "err", err)
				}
			}
		}
	} else if st.Members[me.ID] != me {
		target := ""
		if _, addr, ok := n.Leader(); ok && addr != "" {
			target = addr
		} else if n.opts.Join != "" && len(st.Members) == 0 {
			target = n.opts.Join
		}
		if target != "" {
			ctx, cancel := context.WithTimeout(context.Background(), n.opts.ApplyTimeout)
			err := n.remote.Join(ctx, target, me, n.fresh.Load())
			cancel()
			switch {
			case err != nil && strings.Contains(err.Error(), RemovedText):
				n.setRemoved(true)
				return true
			case err != nil:
				n.log.Info("joining", "via", target, "err", err)
			}
		}
	}
	st = n.fsm.State()
	return st.Members[me.ID] == me && (!n.IsLeader() || n.peersRegistered(st))
}

// inConfiguration reports whether this node is in its Raft configuration.
func (n *Node) inConfiguration() bool {
	servers, err := n.Servers()
	for _, s := range servers {
		if err == nil && string(s.ID) == n.opts.ID {
			return true
		}
	}
	return false
}

// RemovedText is in the refusal a removed node meets when it asks to join.
const RemovedText = "was removed from the cluster"

// relayNotify drains Raft's leadership notifications, which Raft blocks on,
// into a one-slot signal that register picks up when it can.
func (n *Node) relayNotify() {
	defer n.wg.Done()
	for {
		select {
		case <-n.stop:
			return
		case <-n.notify:
			select {
			case n.changed <- struct{}{}:
			default:
			}
		}
	}
}

// CaughtUp reports whether the node is Ready and every server of the Raft
// configuration is in the replicated member map: before that, a node
// started with --bootstrap-peers counts fewer members than there are.
func (n *Node) CaughtUp() bool { return n.Ready() && n.peersRegistered(n.fsm.State()) }

func (n *Node) peersRegistered(st *State) bool {
	servers, err := n.Servers()
	if err != nil {
		return false
	}
	for _, s := range servers {
		if _, ok := st.Members[string(s.ID)]; !ok {
			return false
		}
	}
	return true
}
