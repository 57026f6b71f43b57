package raftfsm

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
)

// memRemote is Remote for in-process test clusters: it finds nodes by
// their RESP address in one registry and calls them directly.
type memRemote struct{}

var memNodes sync.Map // RESP address → *Node

func (memRemote) node(addr string) (*Node, error) {
	v, ok := memNodes.Load(addr)
	if !ok {
		return nil, errors.New("connection refused")
	}
	return v.(*Node), nil
}

func (r memRemote) Forward(ctx context.Context, addr string, entry []byte) (Response, error) {
	n, err := r.node(addr)
	if err != nil {
		return Response{}, &Error{Code: "TRYAGAIN", Msg: err.Error(), Retry: true}
	}
	return n.Apply(entry)
}

// Relay answers as a node does a relayed read: the leader serves it
// (+<its id>), another node refuses it. refuseRelays makes that many of
// the next relays meet a node that no longer leads.
func (r memRemote) Relay(ctx context.Context, addr string, args [][]byte) ([]byte, error) {
	n, err := r.node(addr)
	if err != nil {
		return nil, err
	}
	if !n.IsLeader() || refuseRelays.Add(-1) >= 0 {
		return []byte("-" + NotLeaderReply + " (the read was relayed here by a node with an older view)\r\n"), nil
	}
	return []byte("+" + n.ID() + "\r\n"), nil
}

var refuseRelays atomic.Int64

// Join asks the node at addr, which relays the request to its leader as
// a server does.
func (r memRemote) Join(ctx context.Context, addr string, m Member, fresh bool) error {
	n, err := r.node(addr)
	if err != nil {
		return err
	}
	by := JoinBySelf
	if fresh {
		by = JoinAfresh
	}
	err = n.Join(m.ID, m.RaftAddr, m.RespAddr, by)
	if _, leader, ok := n.Leader(); err == ErrNotLeader && ok && leader != addr {
		return r.Join(ctx, leader, m, fresh)
	}
	return err
}

// Ping answers for a node registered (running) at addr.
func (r memRemote) Ping(ctx context.Context, addr string) error {
	_, err := r.node(addr)
	return err
}

func (r memRemote) Status(ctx context.Context, addr string) (PeerStatus, error) {
	n, err := r.node(addr)
	if err != nil {
		return PeerStatus{}, err
	}
	return PeerStatus{ID: n.ID(), InCluster: n.inCluster()}, nil
}

func (memRemote) Close() {}
