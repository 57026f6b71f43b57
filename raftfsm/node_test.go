package raftfsm

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/budget"
	"github.com/sluice-rl/sluice/testsupport/testkit"
)

func setEntry(t testing.TB, path, js string) []byte {
	t.Helper()
	c, err := budget.ParseJSON([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	return (&Entry{Type: SetBudget, Path: path, Config: &c}).Encode()
}

func open(t *testing.T, o Options) *Node {
	t.Helper()
	if o.Remote == nil {
		o.Remote = memRemote{}
	}
	n, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	memNodes.Store(o.RespAddr, n)
	t.Cleanup(func() {
		memNodes.CompareAndDelete(o.RespAddr, n)
		n.Shutdown()
	})
	return n
}

// cluster starts node 0 alone and joins nodes 1..size-1 through the leader.
func cluster(t *testing.T, size int, tweak func(*Options)) ([]*Node, []Options) {
	t.Helper()
	var nodes []*Node
	var opts []Options
	for i := 0; i < size; i++ {
		o := testOptions(t, i)
		o.Remote = memRemote{}
		if i > 0 {
			o.Join = "127.0.0.1:1" // unreachable: the test joins them directly
		}
		if tweak != nil {
			tweak(&o)
		}
		n := open(t, o)
		o.RaftAddr = n.opts.RaftAddr
		nodes, opts = append(nodes, n), append(opts, o)
		if i == 0 {
			testkit.WaitForLeader(t, n)
		} else {
			joinNode(t, nodes[:i], o)
		}
	}
	testkit.WaitForLeader(t, nodes...)
	return nodes, opts
}

// joinNode joins o through whichever of nodes leads, again after an
// election (a loaded machine's pauses start some) until it is in.
func joinNode(t *testing.T, nodes []*Node, o Options) {
	t.Helper()
	var err error
	testkit.WaitFor(t, 30*time.Second, "node "+o.ID+" joined", func() bool {
		err = testkit.WaitForLeader(t, nodes...).Join(o.ID, o.RaftAddr, o.RespAddr, JoinByOperator)
		var e *Error
		if errors.As(err, &e) && e.Code == "TRYAGAIN" {
			return false
		}
		if err != nil {
			t.Fatal(err)
		}
		return true
	})
}

func TestSingleNodeBootstrapsItself(t *testing.T) {
	n := open(t, testOptions(t, 0))
	testkit.WaitForLeader(t, n)
	resp, err := n.Apply(setEntry(t, "api", `{"sustained":{"rate":10}}`))
	if err != nil || resp.Err != nil {
		t.Fatal(err, resp.Err)
	}
	// The node's version is its write's log index (the node registering
	// itself may be applied just after it).
	node := n.State().Tree.Get("api")
	if node == nil || node.Version == 0 || node.Version != resp.Index || n.FSM().Applied() < resp.Index {
		t.Fatalf("node %+v, written at %d, applied %d", node, resp.Index, n.FSM().Applied())
	}
	testkit.WaitFor(t, 5*time.Second, "self registered", func() bool { return n.State().Members["n0"].RespAddr == "127.0.0.1:1" })
	// Raft counts an entry applied just after the state machine has it.
	testkit.WaitFor(t, 5*time.Second, "the single node to be ready", n.Ready)
	// A refused change answers with the reason and changes nothing.
	before := n.State()
	resp, err = n.Apply(setEntry(t, "api/x", `{"sustained":{"rate":10},"budget":{"mode":"allocated","total":5}}`))
	if err != nil || resp.Err != nil {
		t.Fatal(err, resp.Err)
	}
	c, _ := budget.ParseJSON([]byte(`{"budget":{"mode":"allocated","total":5}}`))
	n.Apply((&Entry{Type: SetBudget, Path: "p", Config: &c}).Encode())
	resp, _ = n.Apply(setEntry(t, "p/a", `{"sustained":{"rate":6}}`))
	if resp.Err == nil || resp.Err.Error() != "BUDGET children allocate 6/second, parent total 5/second × overcommit 1.0" {
		t.Fatalf("allocation refusal: %v", resp.Err)
	}
	if n.State().Tree.Get("p/a") != nil || before.Tree.Get("api") == nil {
		t.Fatal("refused change reached the tree")
	}
}

func TestThreeNodesReplicateFailOverAndRestart(t *testing.T) {
	nodes, opts := cluster(t, 3, nil)
	leader := testkit.WaitForLeader(t, nodes...)
	resp, err := leader.Apply(setEntry(t, "system", `{"sharing":"enforce","sustained":{"rate":100,"window":"minute"}}`))
	if err != nil || resp.Err != nil {
		t.Fatal(err, resp.Err)
	}
	idx := leader.FSM().Applied()
	testkit.WaitForApplied(t, idx, nodes...)
	for _, n := range nodes {
		if v := n.State().Tree.Get("system"); v == nil || v.Version != idx {
			t.Fatalf("%s: %+v, want version %d", n.ID(), v, idx)
		}
		if len(n.State().Members) != 3 {
			t.Fatalf("%s knows %d members", n.ID(), len(n.State().Members))
		}
	}
	// A follower refuses to apply: it must forward.
	for _, n := range nodes {
		if n != leader {
			if _, err := n.Apply(setEntry(t, "x", `{}`)); !errors.Is(err, ErrNotLeader) {
				t.Fatalf("follower apply: %v", err)
			}
		}
	}

	// Kill the leader: the other two elect a new one and take writes.
	var survivors []*Node
	var deadOpts Options
	for i, n := range nodes {
		if n == leader {
			deadOpts = opts[i]
			n.Shutdown()
		} else {
			survivors = append(survivors, n)
		}
	}
	second := testkit.WaitForLeader(t, survivors...)
	for i := 0; i < 5; i++ {
		// An election may come between finding the leader and writing
		// (a busy machine): a write that met one is repeated at the
		// leader found next (setting the same node twice sets it once).
		for try := 0; ; try++ {
			resp, err := second.Apply(setEntry(t, fmt.Sprintf("system/t%d", i), `{"sustained":{"rate":10,"window":"minute"}}`))
			if err == nil && resp.Err == nil {
				break
			}
			if try == 10 || !(errors.Is(err, ErrNotLeader) || retryable(err)) {
				t.Fatal(err, resp.Err)
			}
			second = testkit.WaitForLeader(t, survivors...)
		}
	}
	// The old leader comes back from its data dir and catches up.
	back := open(t, deadOpts)
	testkit.WaitForApplied(t, second.FSM().Applied(), back)
	if back.State().Tree.Len() != 6 {
		t.Fatalf("restarted node has %d budgets, want 6", back.State().Tree.Len())
	}

	// Two nodes down: the survivor cannot commit, within a bounded time.
	all := append(survivors, back)
	l := testkit.WaitForLeader(t, all...)
	var alone *Node
	for _, n := range all {
		if n != l && alone == nil {
			alone = n
		} else {
			n.Shutdown()
		}
	}
	testkit.WaitFor(t, 10*time.Second, "the survivor to lose its leader", func() bool { _, _, ok := alone.Leader(); return !ok || !alone.IsLeader() })
	start := time.Now()
	_, err = alone.Apply(setEntry(t, "y", `{}`))
	if err == nil || time.Since(start) > 5*time.Second {
		t.Fatalf("write without quorum: %v after %v", err, time.Since(start))
	}
	alone.Shutdown()

	// All three restart from their data dirs: the tree is intact.
	var again []*Node
	for i := range opts {
		again = append(again, open(t, opts[i]))
	}
	l = testkit.WaitForLeader(t, again...)
	l.Barrier(5 * time.Second)
	// The write refused without quorum may surface now: its outcome was
	// unknown, and a node that led for a moment may have logged it (an
	// election between finding the leader and stopping the others).
	for _, n := range again {
		testkit.WaitForApplied(t, l.FSM().Applied(), n)
		want := 6
		if n.State().Tree.Get("y") != nil {
			want = 7
		}
		if n.State().Tree.Len() != want || n.State().Tree.Get("system/t4") == nil {
			t.Fatalf("%s after restart: %d budgets", n.ID(), n.State().Tree.Len())
		}
	}
}

func TestSnapshotsAndJoinAfterThem(t *testing.T) {
	nodes, _ := cluster(t, 1, func(o *Options) {
		o.SnapshotThreshold = 16
		o.TrailingLogs = 4
		o.SnapshotInterval = 50 * time.Millisecond
	})
	leader := nodes[0]
	for i := 0; i < 60; i++ {
		if resp, err := leader.Apply(setEntry(t, fmt.Sprintf("t/%d", i), `{"sustained":{"rate":5}}`)); err != nil || resp.Err != nil {
			t.Fatal(err, resp.Err)
		}
	}
	if err := leader.Snapshot(); err != nil {
		t.Fatal(err)
	}
	versions := leader.State().Tree.Versioned()
	// A node joining now gets the tree by snapshot, the early log is gone.
	o := testOptions(t, 1)
	o.Remote = memRemote{}
	o.Join = "127.0.0.1:1"
	joiner := open(t, o)
	if err := leader.Join(o.ID, joiner.opts.RaftAddr, o.RespAddr, JoinByOperator); err != nil {
		t.Fatal(err)
	}
	testkit.WaitForApplied(t, leader.FSM().Applied(), joiner)
	got := joiner.State().Tree.Versioned()
	if len(got) != 60 {
		t.Fatalf("joiner has %d budgets, want 60", len(got))
	}
	for p, v := range versions {
		if got[p].Version != v.Version {
			t.Fatalf("%s: version %d on the joiner, %d on the leader", p, got[p].Version, v.Version)
		}
	}
}

func TestJoinReplacesStaleMember(t *testing.T) {
	nodes, opts := cluster(t, 3, nil)
	leader := testkit.WaitForLeader(t, nodes...)
	// The same id at a new address replaces the old record.
	if err := leader.Join(opts[1].ID, "127.0.0.1:59999", "127.0.0.1:9", JoinByOperator); err != nil {
		t.Fatal(err)
	}
	servers, _ := leader.Servers()
	for _, s := range servers {
		if string(s.ID) == opts[1].ID && string(s.Address) != "127.0.0.1:59999" {
			t.Fatalf("stale address kept: %v", servers)
		}
	}
	if m := leader.State().Members[opts[1].ID]; m.RespAddr != "127.0.0.1:9" {
		t.Fatalf("member record %+v", m)
	}
	if err := leader.Leave(opts[1].ID); err != nil {
		t.Fatal(err)
	}
	if servers, _ := leader.Servers(); len(servers) != 2 {
		t.Fatalf("after leave: %v", servers)
	}
	if err := leader.Leave("nobody"); err == nil {
		t.Fatal("leaving an unknown id succeeded")
	}
}

// A member that joins again with the addresses on record (a join retried
// while the first answer was on its way) changes nothing and adds no log
// entry; a new RESP address is recorded.
func TestJoinAgainAsRecordedWritesNothing(t *testing.T) {
	nodes, opts := cluster(t, 3, nil)
	leader := testkit.WaitForLeader(t, nodes...)
	m := leader.State().Members[opts[1].ID]
	before := leader.FSM().Applied()
	if err := leader.Join(m.ID, m.RaftAddr, m.RespAddr, JoinBySelf); err != nil {
		t.Fatal(err)
	}
	if got := leader.FSM().Applied(); got != before {
		t.Fatalf("a join as recorded moved the log from %d to %d", before, got)
	}
	if err := leader.Join(m.ID, m.RaftAddr, "127.0.0.1:9", JoinBySelf); err != nil {
		t.Fatal(err)
	}
	if got := leader.State().Members[m.ID].RespAddr; got != "127.0.0.1:9" {
		t.Fatalf("a join with a new RESP address recorded %q", got)
	}
}

func TestRestartWithChangedAddressIsRefused(t *testing.T) {
	o := testOptions(t, 0)
	o.Remote = memRemote{}
	n, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	testkit.WaitForLeader(t, n)
	first := n.opts.RaftAddr
	n.Shutdown()
	o.RaftAddr = "127.0.0.1:0"
	if _, err := Open(o); err == nil || !strings.Contains(err.Error(), "registered with raft address "+first) {
		t.Fatalf("changed address: %v", err)
	}
}

func TestRestartWithAHostName(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(l.Addr().String())
	l.Close()
	o := testOptions(t, 0)
	o.Remote = memRemote{}
	o.RaftAddr = "localhost:" + port
	for i := 0; i < 2; i++ { // the second start must find its own record
		n, err := Open(o)
		if err != nil {
			t.Fatalf("start %d: %v", i, err)
		}
		testkit.WaitForLeader(t, n)
		if servers, _ := n.Servers(); string(servers[0].Address) != o.RaftAddr {
			t.Fatalf("recorded %v", servers)
		}
		n.Shutdown()
	}
}

func TestLeaveKeepsABootstrapPeerOut(t *testing.T) {
	var opts []Options
	var peers []Member
	for i := 0; i < 3; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		o := testOptions(t, i)
		o.Remote = memRemote{}
		o.RaftAddr = l.Addr().String()
		l.Close()
		opts = append(opts, o)
		peers = append(peers, Member{ID: o.ID, RaftAddr: o.RaftAddr, RespAddr: o.RespAddr})
	}
	var nodes []*Node
	for _, o := range opts {
		o.Peers = peers
		nodes = append(nodes, open(t, o))
	}
	leader := testkit.WaitForLeader(t, nodes...)
	testkit.WaitFor(t, 10*time.Second, "three member records", func() bool { return len(leader.State().Members) == 3 })
	var gone *Node
	for _, n := range nodes {
		if n != leader {
			gone = n
			break
		}
	}
	if err := leader.Leave(gone.ID()); err != nil {
		t.Fatal(err)
	}
	gone.Shutdown()
	// A registration pass of the leader must not bring the record back from
	// its bootstrap list.
	leader.registerOnce()
	if _, ok := leader.State().Members[gone.ID()]; ok {
		t.Fatalf("%s is back in the member map after leaving", gone.ID())
	}
}

func TestRestartWithoutQuorumServesTheLastTree(t *testing.T) {
	nodes, opts := cluster(t, 3, nil)
	leader := testkit.WaitForLeader(t, nodes...)
	if _, err := leader.Apply(setEntry(t, "kept", `{"sustained":{"rate":5}}`)); err != nil {
		t.Fatal(err)
	}
	testkit.WaitForApplied(t, leader.FSM().Applied(), nodes...)
	for _, n := range nodes {
		n.Shutdown()
	}
	// One node alone: no leader will tell it the commit index, so Raft does
	// not replay its log; it must still know the tree it had applied.
	alone := open(t, opts[1])
	if alone.State().Tree.Get("kept") == nil {
		t.Fatalf("restarted without quorum: tree %s", alone.State().Tree.Export())
	}
	if alone.Ready() {
		t.Fatal("ready without a leader")
	}
}

// A relayed read that meets a node which no longer leads is relayed again
// once a leader is known, never answered with that node's refusal; a node
// that leads itself is told to serve the command (ErrLeaderHere).
func TestRelayRetriesAStaleLeaderAndStopsAtHome(t *testing.T) {
	nodes, _ := cluster(t, 3, nil)
	var leader, follower *Node
	for _, n := range nodes {
		if n.IsLeader() {
			leader = n
		} else {
			follower = n
		}
	}
	if leader == nil || follower == nil {
		t.Fatal("no leader and follower")
	}
	if _, err := leader.Forward([][]byte{[]byte("RL.BUDGET"), []byte("GET"), []byte("a"), []byte("CONSISTENT")}); err != ErrLeaderHere {
		t.Fatalf("relay on the leader: %v, want ErrLeaderHere", err)
	}
	refuseRelays.Store(2)
	defer refuseRelays.Store(0)
	raw, err := follower.Forward([][]byte{[]byte("RL.BUDGET"), []byte("GET"), []byte("a"), []byte("CONSISTENT")})
	if err == ErrLeaderHere && follower.IsLeader() {
		return // an election made it the leader: it serves the read
	}
	if err != nil {
		t.Fatalf("relay: %v", err)
	}
	if id, _, _ := follower.Leader(); string(raw) != "+"+id+"\r\n" {
		t.Fatalf("relay answered %q", raw)
	}
	if refuseRelays.Load() >= 0 {
		t.Fatal("the refusals were not met")
	}
}

// Moving a node: after RL.CLUSTER LEAVE, the node restarted on its old
// data directory stays out (its own join is refused), while the same id
// started with no Raft state (the data directory deleted) and --join is
// re-admitted by its own request, at a new Raft address.
func TestRemovedNodeRejoinsOnlyAfresh(t *testing.T) {
	nodes, opts := cluster(t, 3, nil)
	leader := testkit.WaitForLeader(t, nodes...)
	gone := -1
	for i, n := range nodes {
		if n != leader {
			gone = i
		}
	}
	if err := leader.Leave(opts[gone].ID); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, "the node to learn it was removed", nodes[gone].Removed)
	nodes[gone].Shutdown()
	memNodes.CompareAndDelete(opts[gone].RespAddr, nodes[gone])
	var live []*Node
	for i, n := range nodes {
		if i != gone {
			live = append(live, n)
		}
	}
	inConfig := func(id string) bool {
		servers, err := testkit.WaitForLeader(t, live...).Servers()
		if err != nil {
			return false
		}
		for _, s := range servers {
			if string(s.ID) == id {
				return true
			}
		}
		return false
	}

	// On its old state, with --join: its own request is refused.
	o := opts[gone]
	o.Join = testkit.WaitForLeader(t, live...).opts.RespAddr
	old := open(t, o)
	if old.fresh.Load() {
		t.Fatal("a node restarted on its data directory counts as fresh")
	}
	testkit.WaitFor(t, 10*time.Second, "the restarted node to know it is removed", old.Removed)
	old.registerOnce()
	if err := testkit.WaitForLeader(t, live...).Join(o.ID, o.RaftAddr, o.RespAddr, JoinBySelf); err == nil || !strings.Contains(err.Error(), RemovedText) {
		t.Fatalf("a removed node's own join with state: %v", err)
	}
	if inConfig(o.ID) {
		t.Fatalf("%s is back in the configuration on its old state", o.ID)
	}
	old.Shutdown()
	memNodes.CompareAndDelete(o.RespAddr, old)

	// Afresh, at a new Raft address: re-admitted by its own request.
	o.DataDir = t.TempDir()
	o.RaftAddr = "127.0.0.1:0"
	moved := open(t, o)
	testkit.WaitFor(t, 30*time.Second, "the moved node back as a voter", func() bool {
		if !inConfig(o.ID) || moved.Removed() {
			return false
		}
		l := testkit.WaitForLeader(t, live...)
		_, removed := l.State().Removed[o.ID]
		return !removed && l.State().Members[o.ID].RaftAddr == moved.opts.RaftAddr
	})
	// Once in a configuration it applied, the node is no longer fresh: a
	// later removal sticks as for any other node.
	testkit.WaitFor(t, 30*time.Second, "the moved node to apply a configuration with itself", func() bool {
		return !moved.fresh.Load() && !moved.Removed()
	})
}

// Under steady writes a node rarely has nothing committed left to apply at
// one instant, so a health check asking that (Ready) would flap; ReadyWithin
// waits for what was committed when asked and holds on every node, while a
// node alone without a leader stays not ready.
func TestReadyWithinHoldsUnderSteadyWrites(t *testing.T) {
	nodes, opts := cluster(t, 3, nil)
	leader := testkit.WaitForLeader(t, nodes...)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				leader.Apply(setEntry(t, fmt.Sprintf("w%d-%d", w, i%50), `{"sustained":{"rate":5}}`))
			}
		}(w)
	}
	testkit.WaitFor(t, 10*time.Second, "the writes to reach every node", func() bool {
		for _, n := range nodes {
			if n.FSM().Applied() < 20 {
				return false
			}
		}
		return true
	})
	for i := 0; i < 100; i++ {
		for _, n := range nodes {
			if !n.ReadyWithin(5 * time.Second) {
				t.Fatalf("check %d: %s not ready under steady writes (applied %d, commit %d)", i, n.ID(), n.AppliedIndex(), n.raft.CommitIndex())
			}
		}
	}
	close(stop)
	wg.Wait()
	for _, n := range nodes {
		n.Shutdown()
	}
	alone := open(t, opts[1])
	if alone.ReadyWithin(200 * time.Millisecond) {
		t.Fatal("ready without a leader")
	}
}
