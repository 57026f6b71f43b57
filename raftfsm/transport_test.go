package raftfsm

import (
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// A heartbeat that reaches a node goes to Raft's main loop (the
// transport's consumer), never to a handler on the transport's goroutine:
// there a heartbeat of a newer term changes a leader's term beside the
// loop that is writing its entries, and the logs of the cluster diverge
// (hashicorp/raft#695; see transport).
func TestHeartbeatsGoThroughRaftsMainLoop(t *testing.T) {
	node, err := newTransport(Options{RaftAddr: "127.0.0.1:0"}, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer node.Close()
	handled := make(chan struct{}, 1)
	// What raft.NewRaft does with every transport it is given.
	var tr raft.Transport = node
	tr.SetHeartbeatHandler(func(rpc raft.RPC) {
		handled <- struct{}{}
		rpc.Respond(&raft.AppendEntriesResponse{Term: 9, Success: true}, nil)
	})
	leader, err := raft.NewTCPTransport("127.0.0.1:0", nil, 1, 10*time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer leader.Close()
	heartbeat := &raft.AppendEntriesRequest{
		RPCHeader: raft.RPCHeader{ID: []byte("leader"), Addr: []byte(leader.LocalAddr())},
		Term:      9,
	}
	done := make(chan error, 1)
	go func() {
		var resp raft.AppendEntriesResponse
		done <- leader.AppendEntries("node", node.LocalAddr(), heartbeat, &resp)
	}()
	select {
	case rpc := <-node.Consumer():
		if _, ok := rpc.Command.(*raft.AppendEntriesRequest); !ok {
			t.Fatalf("consumer got %T, want the heartbeat", rpc.Command)
		}
		rpc.Respond(&raft.AppendEntriesResponse{Term: 9, Success: true}, nil)
	case <-handled:
		t.Fatal("the heartbeat was answered on the transport's goroutine, beside Raft's main loop")
	case <-time.After(30 * time.Second):
		t.Fatal("the heartbeat reached neither the consumer nor a handler")
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
