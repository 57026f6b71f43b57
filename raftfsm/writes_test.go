package raftfsm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/budget"
	"github.com/sluice-rl/sluice/testsupport/testkit"
)

// A write retried after an unknown outcome is applied once: the repeat is
// answered with the first outcome and changes nothing, also after the
// table has travelled through a snapshot.
func TestRetriedWriteIsAppliedOnce(t *testing.T) {
	f := seeded(t)
	del := (&Entry{Type: DelBudget, Path: "system/p/t", Req: &ReqID{Node: "n1", Seq: 7}}).Encode()
	if r := apply(f, 5, del); r.N != 1 || r.Err != nil || r.Index != 5 {
		t.Fatalf("first delete: %+v", r)
	}
	set := setEntry(t, "system/p/t", `{"sustained":{"rate":10,"window":"minute"}}`)
	if r := apply(f, 6, set); r.Err != nil {
		t.Fatal(r.Err)
	}
	// The retry of the delete comes after the set: it must not undo it.
	if r := apply(f, 7, del); r.N != 1 || r.Err != nil || r.Index != 5 {
		t.Fatalf("retried delete answered %+v, want the first outcome", r)
	}
	if n := f.State().Tree.Get("system/p/t"); n == nil || n.Version != 6 {
		t.Fatalf("the retry changed the tree: %+v", n)
	}
	// A refusal is remembered as a refusal.
	bad := (&Entry{Type: DelBudget, Path: "system", Req: &ReqID{Node: "n2", Seq: 1}}).Encode()
	first := apply(f, 8, bad)
	if first.Err == nil {
		t.Fatal("deleting a node with children succeeded")
	}
	snap, _ := f.Snapshot()
	var s sink
	if err := snap.Persist(&s); err != nil {
		t.Fatal(err)
	}
	g := NewFSM()
	if err := g.Restore(io.NopCloser(bytes.NewReader(s.Bytes()))); err != nil {
		t.Fatal(err)
	}
	if g.Applied() != 8 {
		t.Fatalf("restored applied index %d, want 8", g.Applied())
	}
	if r := apply(g, 9, del); r.N != 1 || r.Index != 5 {
		t.Fatalf("retry after a snapshot: %+v", r)
	}
	var be *budget.Error
	if r := apply(g, 10, bad); !errors.As(r.Err, &be) || r.Err.Error() != first.Err.Error() {
		t.Fatalf("retried refusal answered %v, want %v", r.Err, first.Err)
	}
	if g.State().Tree.Get("system/p/t") == nil {
		t.Fatal("a retry after the snapshot changed the tree")
	}
}

// The table of remembered writes stays bounded per node and in nodes.
func TestWriteTableIsBounded(t *testing.T) {
	var w writeTable
	for i := 0; i < writesPerNode*3; i++ {
		w.put(&ReqID{Node: "a", Seq: uint64(i)}, outcome{Seq: uint64(i), Index: uint64(i)})
	}
	if len(w.nodes["a"].byID) != writesPerNode {
		t.Fatalf("%d outcomes kept for one node", len(w.nodes["a"].byID))
	}
	if _, ok := w.get(&ReqID{Node: "a", Seq: writesPerNode*3 - 1}); !ok {
		t.Fatal("the newest outcome was dropped")
	}
	for i := 0; i < writeNodes*2; i++ {
		w.put(&ReqID{Node: fmt.Sprint("n", i), Seq: 1}, outcome{Seq: 1, Index: uint64(10000 + i)})
	}
	if len(w.nodes) != writeNodes {
		t.Fatalf("%d nodes kept", len(w.nodes))
	}
}

// A lone node takes a write at once after it opens: Write waits for the
// election instead of refusing.
func TestWriteRightAfterOpen(t *testing.T) {
	n := open(t, testOptions(t, 0))
	c, _ := budget.ParseJSON([]byte(`{"sustained":{"rate":10}}`))
	resp, err := n.Write(&Entry{Type: SetBudget, Path: "api", Config: &c})
	if err != nil || resp.Err != nil {
		t.Fatalf("write right after open: %v %v", err, resp.Err)
	}
	if n.State().Tree.Get("api") == nil {
		t.Fatal("the write is not applied on the node that took it")
	}
}

// A follower's write while the leader is gone waits for the next leader
// and succeeds; a consistent read on the new leader sees it.
func TestWriteOnFollowerDuringElection(t *testing.T) {
	nodes, _ := cluster(t, 3, nil)
	leader := testkit.WaitForLeader(t, nodes...)
	var rest []*Node
	for _, n := range nodes {
		if n != leader {
			rest = append(rest, n)
		}
	}
	leader.Shutdown()
	c, _ := budget.ParseJSON([]byte(`{"sustained":{"rate":10}}`))
	resp, err := rest[0].Write(&Entry{Type: SetBudget, Path: "during", Config: &c})
	if err != nil || resp.Err != nil {
		t.Fatalf("write during the election: %v %v", err, resp.Err)
	}
	if rest[0].State().Tree.Get("during") == nil {
		t.Fatal("not applied on the node that took the write")
	}
	nl := testkit.WaitForLeader(t, rest...)
	st, err := nl.ReadState(true)
	if err != nil || st.Tree.Get("during") == nil {
		t.Fatalf("consistent read on the new leader: %v", err)
	}
	for _, n := range rest {
		if n != nl {
			if _, err := n.ReadState(true); !errors.Is(err, ErrNotLeader) {
				t.Fatalf("consistent read on a follower: %v", err)
			}
		}
	}
}

// With no quorum a write fails with TRYAGAIN within the apply timeout.
func TestWriteWithoutQuorumIsBounded(t *testing.T) {
	nodes, _ := cluster(t, 3, func(o *Options) { o.ApplyTimeout = 700 * time.Millisecond })
	leader := testkit.WaitForLeader(t, nodes...)
	var survivor *Node
	for _, n := range nodes {
		if n != leader && survivor == nil {
			survivor = n
		} else {
			n.Shutdown()
		}
	}
	c, _ := budget.ParseJSON([]byte(`{}`))
	_, err := survivor.Write(&Entry{Type: SetBudget, Path: "x", Config: &c})
	var e *Error
	if !errors.As(err, &e) || e.Code != "TRYAGAIN" {
		t.Fatalf("write without quorum: %v", err)
	}
}

// unreachableRemote is memRemote reporting a gone leader as the server's
// remote does: "leader <addr> unreachable: …".
type unreachableRemote struct{ memRemote }

func (r unreachableRemote) Forward(ctx context.Context, addr string, entry []byte) (Response, error) {
	if _, err := r.node(addr); err != nil {
		return Response{}, &Error{Code: "TRYAGAIN", Msg: "leader " + addr + " unreachable: " + err.Error(), Retry: true}
	}
	return r.memRemote.Forward(ctx, addr, entry)
}

// A write sent to a follower right after the leader and the other
// follower died first meets the dead leader, but ends in "no leader": the
// node gave up on that leader at its heartbeat timeout, long before the
// write's time was up, and no majority is left to elect another.
func TestWriteAfterLeaderAndMajorityDiedSaysNoLeader(t *testing.T) {
	nodes, opts := cluster(t, 3, func(o *Options) {
		o.Remote = unreachableRemote{}
		o.ApplyTimeout = time.Second
	})
	// A follower stops first, as nodes stop (it hands nothing on)...
	leader := testkit.WaitForLeader(t, nodes...)
	var rest []*Node
	stopped := false
	for i, n := range nodes {
		if n == leader || stopped {
			rest = append(rest, n)
			continue
		}
		n.Shutdown()
		memNodes.Delete(opts[i].RespAddr)
		stopped = true
	}
	// ...then the leader of the two left crashes: Raft stops where it is,
	// with no leadership handed on. (Only a leader is crashed this way: a
	// follower could win an election while Raft shuts down, and would
	// then wait forever in its cleanup to hand that leadership on.)
	leader = testkit.WaitForLeader(t, rest...)
	var survivor *Node
	for _, n := range rest {
		if n != leader {
			survivor = n
		}
	}
	if err := leader.raft.Shutdown().Error(); err != nil {
		t.Fatal(err)
	}
	memNodes.Delete(leader.opts.RespAddr)
	c, _ := budget.ParseJSON([]byte(`{}`))
	_, err := survivor.Write(&Entry{Type: SetBudget, Path: "late", Config: &c})
	if !errors.Is(err, ErrNoLeader) {
		t.Fatalf("write after the leader and a follower died: %v, want %v", err, ErrNoLeader)
	}
}
