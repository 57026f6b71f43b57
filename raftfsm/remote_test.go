package raftfsm

import (
	"context"
	"errors"
	"sync"
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

func (r memRemote) Relay(ctx context.Context, addr string, args [][]byte) ([]byte, error) {
	return nil, errors.New("relay is not used by these tests")
}

func (r memRemote) Join(ctx context.Context, addr string, m Member) error {
	n, err := r.node(addr)
	if err != nil {
		return err
	}
	return n.Join(m.ID, m.RaftAddr, m.RespAddr, true)
}

func (memRemote) Close() {}
