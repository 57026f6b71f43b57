package server

import (
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/access"
	"github.com/sluice-rl/sluice/raftfsm"
	"github.com/sluice-rl/sluice/testsupport/resptest"
)

// forgedEntry is an RL.CLUSTER APPLY argument: a QuotaAdd entry.
func forgedEntry(origin string, seq uint64, req *raftfsm.ReqID) string {
	e := raftfsm.Entry{Type: raftfsm.QuotaAdd, Origin: origin, Seq: seq, Now: t0, Req: req,
		Quotas: []raftfsm.QuotaItem{{Key: raftfsm.QuotaKey("i|k"), Limit: 5, Start: t0, End: t0 + day, Used: 3, Period: "day UTC"}}}
	return string(e.Encode())
}

// day is the period of the quotas these tests forge, from t0 (the nodes'
// clock).
const day = int64(24 * time.Hour)

func committedUsed(n *Node) int64 { return n.Raft.FSM().QuotaUsed([]byte("i|k"), t0, t0+day) }

// Internal commands are refused from every session that has not
// authenticated as a node, admins included, and change nothing.
func TestInternalCommandsOnlyFromNodes(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cfg   func(*Config)
		login []string // how the client authenticates, if it does
	}{
		{"no password, loopback admin", nil, nil},
		{"requirepass admin", func(c *Config) { c.RequirePass = "a-long-enough-password" }, []string{"AUTH", "a-long-enough-password"}},
		{"peer-password user sluice-peer", func(c *Config) { c.RequirePass, c.PeerPassword = "client-pass", "peer-secret" },
			[]string{"AUTH", PeerUser, "peer-secret"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := startNode(t, tc.cfg)
			id := n.Raft.ID()
			c := resptest.Dial(t, n.Server.RespAddr())
			if tc.login != nil {
				if got := c.Do(tc.login...); got != "+OK" {
					t.Fatal(got)
				}
			}
			if got := c.Do("ACL", "WHOAMI"); got == `"`+access.PeerUserPrefix+id+`"` {
				t.Fatalf("an ordinary login is the node: %s", got)
			}
			seqBefore := n.Raft.FSM().QuotaSeq(id)
			for _, args := range [][]string{
				{"RL.TOPSUMMARY", "DENIED"},
				{"RL.SYNC", id, "x"},
				{"RL.LEASE", id, "x"},
				{"RL.SLOT", id, "HOLDS", "1", "k"},
				{"RL.CLUSTER", "APPLY", forgedEntry(id, uint64(time.Now().UnixNano()), nil)},
				{"RL.CLUSTER", "JOIN", "intruder", "127.0.0.1:1", "127.0.0.1:2", "AUTO"},
				{"RL.CLUSTER", "JOIN", "intruder", "127.0.0.1:1", "127.0.0.1:2", "AUTO", "FRESH"},
			} {
				// Node-to-node commands do not exist for a client; the
				// internal subcommands of RL.CLUSTER are refused.
				got := c.Do(args...)
				want := "-ERR unknown command '" + args[0] + "', with args beginning with: "
				if args[0] == "RL.CLUSTER" {
					want = "-NOPERM 'rl.cluster' is internal: only another node of the cluster"
				}
				if !strings.HasPrefix(got, want) {
					t.Errorf("%s from a non-node: %s", args[0], got)
				}
			}
			if used := committedUsed(n); used != 0 {
				t.Errorf("committed quota count %d after refused batches", used)
			}
			if seq := n.Raft.FSM().QuotaSeq(id); seq != seqBefore {
				t.Errorf("the node's last batch number moved from %d to %d", seqBefore, seq)
			}
			if _, ok := n.Raft.State().Members["intruder"]; ok {
				t.Error("a forged join added a member")
			}
		})
	}
}

// A node's credentials name it: a session authenticated as one node
// cannot act for another, batch numbers from the future are refused
// however they come, and a batch sent again is counted once.
func TestForgedInternalEntriesChangeNothing(t *testing.T) {
	n := startNode(t, func(c *Config) { c.RequirePass, c.PeerPassword = "client-pass", "peer-secret" })
	id := n.Raft.ID()
	login := func(node, secret string) *resptest.Client {
		c := resptest.Dial(t, n.Server.RespAddr())
		if got := c.Do("AUTH", access.PeerUserPrefix+node, access.PeerToken(secret, node)); got != "+OK" {
			t.Fatalf("AUTH as node %s: %s", node, got)
		}
		return c
	}
	// Node credentials are proven by the peer password, not by
	// requirepass, and name one node.
	c := resptest.Dial(t, n.Server.RespAddr())
	for _, args := range [][]string{
		{"AUTH", access.PeerUserPrefix + id, access.PeerToken("client-pass", id)},
		{"AUTH", access.PeerUserPrefix + id, access.PeerToken("peer-secret", "other")},
		{"AUTH", access.PeerUserPrefix + id, "peer-secret"},
	} {
		if got := c.Do(args...); got != "-WRONGPASS invalid username-password pair or user is disabled." {
			t.Errorf("%q: %s", args, got)
		}
	}

	other := login("n9", "peer-secret") // a valid node, not this one
	if got := other.Do("ACL", "WHOAMI"); got != `"sluice-peer:n9"` {
		t.Fatalf("ACL WHOAMI of a node: %s", got)
	}
	if got := other.Do("RL.SYNC", id, "x"); !strings.HasPrefix(got, "-NOPERM RL.SYNC for node '"+id+"'") {
		t.Errorf("RL.SYNC for another node: %s", got)
	}
	if got := other.Do("RL.LEASE", id, "x"); !strings.HasPrefix(got, "-NOPERM RL.LEASE for node '"+id+"'") {
		t.Errorf("RL.LEASE for another node: %s", got)
	}
	if got := other.Do("RL.CLUSTER", "APPLY", forgedEntry(id, uint64(time.Now().UnixNano()), nil)); got != "-NOPERM RL.CLUSTER APPLY: quota counts or reservations of node '"+id+"' from node 'n9'" {
		t.Errorf("a forwarded batch for another node: %s", got)
	}
	// Nor may a node give back the units of another node's life.
	ret := raftfsm.Entry{Type: raftfsm.QuotaReturn, Origin: id + "@x", Replace: true}
	if got := other.Do("RL.CLUSTER", "APPLY", string(ret.Encode())); got != "-NOPERM RL.CLUSTER APPLY: quota counts or reservations of node '"+id+"@x' from node 'n9'" {
		t.Errorf("a forwarded return of another node's units: %s", got)
	}
	req := &raftfsm.ReqID{Node: id, Seq: 1}
	if got := other.Do("RL.CLUSTER", "APPLY", forgedEntry("n9", uint64(time.Now().UnixNano()), req)); got != "-NOPERM RL.CLUSTER APPLY: a write numbered by node '"+id+"' from node 'n9'" {
		t.Errorf("a forwarded write numbered as another node's: %s", got)
	}
	if got := other.Do("RL.SYNC", "n9", "x"); got != "-ERR RL.SYNC from 'n9', which is not a member" {
		t.Errorf("consumption from a node that is not a member: %s", got)
	}

	self := login(id, "peer-secret")
	for _, seq := range []uint64{1<<63 + 1, 1<<64 - 1} {
		if got := self.Do("RL.CLUSTER", "APPLY", forgedEntry(id, seq, nil)); !strings.Contains(got, "more than an hour ahead of this node's clock") {
			t.Errorf("a forwarded batch numbered %d, from the future: %s", seq, got)
		}
	}
	if used := committedUsed(n); used != 0 {
		t.Fatalf("committed quota count %d after refused batches", used)
	}

	// A batch forwarded again is counted once.
	seq := uint64(time.Now().Add(-time.Second).UnixNano())
	for i := 0; i < 3; i++ {
		if got := self.Do("RL.CLUSTER", "APPLY", forgedEntry(id, seq, nil)); !strings.HasPrefix(got, `"`) {
			t.Fatalf("the batch forwarded, attempt %d: %s", i, got)
		}
	}
	if used := committedUsed(n); used != 3 {
		t.Fatalf("committed quota count %d after one batch of 3 sent three times, want 3", used)
	}
	// The node's own counts still commit after all this.
	cl := resptest.Dial(t, n.Server.RespAddr())
	cl.Do("AUTH", "client-pass")
	if got := cl.Do("RL.ACQUIRE", "k", "QUOTA", "5", "PER", "day"); !strings.HasPrefix(got, "[1 1 5 ") {
		t.Fatalf("the fourth call of a quota of 5 (3 committed): %s", got)
	}
	committedQuota(t, n, "i|k", 4)
	if got := cl.Do("RL.ACQUIRE", "k", "QUOTA", "5", "PER", "day"); !strings.HasPrefix(got, "[1 0 5 ") {
		t.Fatalf("the fifth call: %s", got)
	}
	if got := cl.Do("RL.ACQUIRE", "k", "QUOTA", "5", "PER", "day"); !strings.HasPrefix(got, "[0 ") {
		t.Fatalf("the sixth call of a quota of 5: %s", got)
	}
}
