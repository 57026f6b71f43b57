package raftfsm

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/testsupport/testkit"
)

func TestPlanVoters(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	p := voterPolicy{Voters: 3, Grace: 3 * time.Second, Stabilize: 3 * time.Second}
	voter := func(id string, down time.Duration) peerState {
		s := peerState{ID: id, Voter: true, Member: true, Since: ago(time.Minute)}
		if down > 0 {
			s.DownSince = ago(down)
		}
		return s
	}
	non := func(id string, since, down time.Duration) peerState {
		s := peerState{ID: id, Member: true, Since: ago(since)}
		if down > 0 {
			s.DownSince = ago(down)
		}
		return s
	}
	leader := voter("a", 0)
	leader.Self = true
	for _, c := range []struct {
		name            string
		peers           []peerState
		policy          voterPolicy
		promote, demote string
	}{
		{name: "three voters, all live", peers: []peerState{leader, voter("b", 0), voter("c", 0), non("d", time.Minute, 0)}},
		{name: "a voter down within the grace", peers: []peerState{leader, voter("b", 0), voter("c", time.Second), non("d", time.Minute, 0)}},
		{name: "a voter lost: the longest-reached non-voter is promoted",
			peers:   []peerState{leader, voter("b", 0), voter("c", 5*time.Second), non("d", 10*time.Second, 0), non("e", time.Minute, 0)},
			promote: "e"},
		{name: "equal standing: the lowest id",
			peers:   []peerState{leader, voter("b", 0), voter("c", 5*time.Second), non("e", time.Minute, 0), non("d", time.Minute, 0)},
			promote: "d"},
		{name: "a failing non-voter is not promoted",
			peers:   []peerState{leader, voter("b", 0), voter("c", 5*time.Second), non("d", time.Hour, time.Millisecond), non("e", 5*time.Second, 0)},
			promote: "e"},
		{name: "a non-voter not yet stable waits",
			peers: []peerState{leader, voter("b", 0), voter("c", 5*time.Second), non("d", time.Second, 0)}},
		{name: "a non-voter without a member record waits",
			peers: []peerState{leader, voter("b", 0), voter("c", 5*time.Second), {ID: "d", Since: ago(time.Minute)}}},
		{name: "a voter removed: promoted", peers: []peerState{leader, voter("b", 0), non("d", time.Minute, 0)}, promote: "d"},
		{name: "replaced: the lost voter is demoted",
			peers:  []peerState{leader, voter("b", 0), voter("c", 5*time.Second), voter("d", 0), non("e", time.Minute, 0)},
			demote: "c"},
		{name: "two lost beyond: the longest lost first",
			peers:  []peerState{leader, voter("b", 0), voter("c", 5*time.Second), voter("d", 0), voter("e", 9*time.Second)},
			demote: "e"},
		{name: "three nodes, one lost, nobody to promote: nothing changes",
			peers: []peerState{leader, voter("b", 0), voter("c", time.Minute)}},
		{name: "five voters of old, all live: none demoted",
			peers: []peerState{leader, voter("b", 0), voter("c", 0), voter("d", 0), voter("e", 0)}},
		{name: "the leader is never lost",
			peers: []peerState{func() peerState { s := leader; s.DownSince = ago(time.Hour); return s }(), voter("b", 0), voter("c", 0), voter("d", 0)}},
		{name: "voters 5: a non-voter promoted while four",
			peers:   []peerState{leader, voter("b", 0), voter("c", 0), voter("d", 0), non("e", time.Minute, 0)},
			policy:  voterPolicy{Voters: 5, Grace: time.Second, Stabilize: time.Second},
			promote: "e"},
	} {
		pol := c.policy
		if pol.Voters == 0 {
			pol = p
		}
		promote, demote := planVoters(now, c.peers, pol)
		if promote != c.promote || demote != c.demote {
			t.Errorf("%s: promote %q demote %q, want %q %q", c.name, promote, demote, c.promote, c.demote)
		}
	}
}

func TestHeartbeatsForgetAStaleFailure(t *testing.T) {
	now := time.Now()
	var h heartbeats
	h.failed("b", now.Add(-time.Second), now)
	h.failed("b", time.Time{}, now.Add(time.Second))
	if down, _ := h.state("b", now.Add(2*time.Second)); !down.Equal(now.Add(-time.Second)) {
		t.Fatalf("down since %v, want the last contact %v", down, now.Add(-time.Second))
	}
	h.resumed("b", now.Add(3*time.Second))
	if down, up := h.state("b", now.Add(4*time.Second)); !down.IsZero() || !up.Equal(now.Add(3*time.Second)) {
		t.Fatalf("after resuming: down %v up %v", down, up)
	}
	h.failed("c", time.Time{}, now)
	if down, up := h.state("c", now.Add(staleFailure+time.Second)); !down.IsZero() || !up.Equal(now) {
		t.Fatalf("a failure not repeated for %v still counts: down %v up %v", staleFailure, down, up)
	}
}

// suffrage returns the voters and non-voters of n's configuration.
func suffrage(t *testing.T, n *Node) (voters, nonvoters []string) {
	t.Helper()
	vs, err := n.Voters()
	if err != nil {
		return nil, nil
	}
	for _, v := range vs {
		if v.Voter {
			voters = append(voters, v.ID)
		} else {
			nonvoters = append(nonvoters, v.ID)
		}
	}
	return voters, nonvoters
}

// TestFiveNodesKeepThreeVoters: with --voters 3, the 4th and 5th nodes
// join as non-voters; a voter shut down is replaced by a promoted
// non-voter and then demoted, so three live voters remain.
func TestFiveNodesKeepThreeVoters(t *testing.T) {
	nodes, _ := cluster(t, 5, func(o *Options) {
		o.Voters = 3
		o.VoterGrace = 500 * time.Millisecond
		o.VoterStabilization = 300 * time.Millisecond
	})
	leader := testkit.WaitForLeader(t, nodes...)
	voters, nonvoters := suffrage(t, leader)
	if len(voters) != 3 || len(nonvoters) != 2 {
		t.Fatalf("voters %v, non-voters %v; want 3 and 2", voters, nonvoters)
	}
	for _, id := range nonvoters {
		if _, ok := leader.State().Members[id]; !ok {
			t.Fatalf("non-voter %s has no member record: members %v", id, leader.State().Members)
		}
	}
	// Shut down a voter that is not the leader (then the leader, below).
	victim := voters[0]
	if victim == leader.ID() {
		victim = voters[1]
	}
	stopNode(t, nodes, victim)
	waitVoters(t, nodes, victim, 10*time.Second)
	// And the leader itself: the others elect one and replace it too.
	leader = testkit.WaitForLeader(t, live(nodes)...)
	stopNode(t, nodes, leader.ID())
	waitVoters(t, nodes, leader.ID(), 15*time.Second)
}

func live(nodes []*Node) []*Node {
	var out []*Node
	for _, n := range nodes {
		select {
		case <-n.stop:
		default:
			out = append(out, n)
		}
	}
	return out
}

func stopNode(t *testing.T, nodes []*Node, id string) {
	t.Helper()
	for _, n := range nodes {
		if n.ID() == id {
			memNodes.CompareAndDelete(n.opts.RespAddr, n)
			if err := n.Shutdown(); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatalf("no node %s", id)
}

// waitVoters waits until the live nodes' leader has three voters, all
// live, and gone (shut down) among the non-voters.
func waitVoters(t *testing.T, nodes []*Node, gone string, within time.Duration) {
	t.Helper()
	var voters, nonvoters []string
	testkit.WaitFor(t, within, "three live voters without "+gone, func() bool {
		leader := leaderAmong(live(nodes))
		if leader == nil {
			return false
		}
		voters, nonvoters = suffrage(t, leader)
		if len(voters) != 3 {
			return false
		}
		for _, v := range voters {
			if v == gone {
				return false
			}
		}
		return true
	})
	t.Logf("voters %v, non-voters %v after %s stopped", voters, nonvoters, gone)
}

// TestLeaveOfAVoterPromotesANonVoter: an operator removes a voter of four
// nodes (3 voters, 1 non-voter); the non-voter is promoted.
func TestLeaveOfAVoterPromotesANonVoter(t *testing.T) {
	nodes, _ := cluster(t, 4, func(o *Options) {
		o.VoterGrace = 500 * time.Millisecond
		o.VoterStabilization = 300 * time.Millisecond
	})
	leader := testkit.WaitForLeader(t, nodes...)
	voters, nonvoters := suffrage(t, leader)
	if len(voters) != 3 || len(nonvoters) != 1 {
		t.Fatalf("voters %v, non-voters %v; want 3 and 1 (the default --voters)", voters, nonvoters)
	}
	victim := voters[0]
	if victim == leader.ID() {
		victim = voters[1]
	}
	var rest []*Node
	for _, n := range nodes {
		if n.ID() != victim {
			rest = append(rest, n)
		}
	}
	// Through whichever node leads (an election may come in between).
	testkit.WaitFor(t, 10*time.Second, victim+" removed", func() bool {
		l := leaderAmong(nodes)
		if l == nil {
			return false
		}
		err := l.Leave(victim)
		return err == nil || strings.Contains(err.Error(), "no node with id")
	})
	testkit.WaitFor(t, 10*time.Second, nonvoters[0]+" promoted", func() bool {
		l := leaderAmong(rest)
		if l == nil {
			return false
		}
		v, n := suffrage(t, l)
		return len(v) == 3 && len(n) == 0 && slices.Contains(v, nonvoters[0])
	})
}

// leaderAmong returns a node of nodes that believes it leads, or nil.
func leaderAmong(nodes []*Node) *Node {
	for _, n := range nodes {
		if n.IsLeader() {
			return n
		}
	}
	return nil
}
