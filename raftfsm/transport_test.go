package raftfsm

import (
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

type fakeRaft struct {
	state raft.RaftState
	term  uint64
}

func (f fakeRaft) State() raft.RaftState { return f.state }
func (f fakeRaft) CurrentTerm() uint64   { return f.term }

// A heartbeat takes hashicorp/raft's fast path (the transport's
// goroutine) only when it cannot change the node's term or role: the node
// follows and the heartbeat is of its term or older. Any other — a newer
// term, a node that leads or stands — goes to Raft's main loop (the
// transport's consumer), where a newer term cannot meet the leader's own
// writes half way (hashicorp/raft#695; see transport).
func TestHeartbeatsThatChangeTheTermGoThroughRaftsMainLoop(t *testing.T) {
	node, err := newTransport(Options{RaftAddr: "127.0.0.1:0"}, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer node.Close()
	fast := make(chan struct{}, 1)
	// What raft.NewRaft does with every transport it is given.
	var tr raft.Transport = node
	tr.SetHeartbeatHandler(func(rpc raft.RPC) {
		fast <- struct{}{}
		rpc.Respond(&raft.AppendEntriesResponse{Success: true}, nil)
	})
	leader, err := raft.NewTCPTransport("127.0.0.1:0", nil, 1, 10*time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer leader.Close()
	for _, c := range []struct {
		node      *fakeRaft // nil: Raft not started yet
		heartbeat uint64
		fast      bool
	}{
		{nil, 9, false},
		{&fakeRaft{raft.Follower, 9}, 9, true},
		{&fakeRaft{raft.Follower, 9}, 8, true},
		{&fakeRaft{raft.Follower, 9}, 10, false},
		{&fakeRaft{raft.Leader, 9}, 10, false},
		{&fakeRaft{raft.Leader, 9}, 9, false},
		{&fakeRaft{raft.Candidate, 9}, 9, false},
	} {
		name := "before Raft"
		if c.node != nil {
			node.watch(*c.node)
			name = fmt.Sprintf("%v of term %d", c.node.state, c.node.term)
		}
		done := make(chan error, 1)
		go func() {
			var resp raft.AppendEntriesResponse
			done <- leader.AppendEntries("node", node.LocalAddr(), &raft.AppendEntriesRequest{
				RPCHeader: raft.RPCHeader{ID: []byte("leader"), Addr: []byte(leader.LocalAddr())}, Term: c.heartbeat}, &resp)
		}()
		select {
		case rpc := <-node.Consumer():
			if _, ok := rpc.Command.(*raft.AppendEntriesRequest); !ok {
				t.Fatalf("consumer got %T, want the heartbeat", rpc.Command)
			}
			rpc.Respond(&raft.AppendEntriesResponse{Success: true}, nil)
			if c.fast {
				t.Errorf("%s, heartbeat of term %d: went to the main loop, want the fast path", name, c.heartbeat)
			}
		case <-fast:
			if !c.fast {
				t.Errorf("%s, heartbeat of term %d: answered on the transport's goroutine, beside Raft's main loop", name, c.heartbeat)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: the heartbeat reached neither the main loop nor the fast path", name)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}
