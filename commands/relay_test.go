package commands

import (
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/access"
	"github.com/sluice-rl/sluice/raftfsm"
)

// becomesLeader is a node that does not lead when a CONSISTENT read
// arrives and leads by the time its relay looks for the leader.
type becomesLeader struct {
	*raftfsm.Node
	reads, relays int
}

func (b *becomesLeader) ReadState(consistent bool) (*raftfsm.State, error) {
	b.reads++
	if b.reads == 1 {
		return nil, raftfsm.ErrNotLeader
	}
	return b.Node.ReadState(consistent)
}

func (b *becomesLeader) Forward([][]byte) ([]byte, error) {
	b.relays++
	return nil, raftfsm.ErrLeaderHere
}

// A CONSISTENT read whose relay finds that this node became the leader is
// served here; a relayed read that reaches a node which does not lead is
// refused in words about a read.
func TestConsistentReadOnANodeThatBecameLeader(t *testing.T) {
	env := testEnv(t)
	admin := NewSession(1, "127.0.0.1:1", "127.0.0.1:2", access.RoleAdmin, func() {})
	c := NewCapture()
	env.Exec(c, admin, [][]byte{[]byte("RL.BUDGET"), []byte("SET"), []byte("acme"), []byte("RATE"), []byte("7")})
	if r := reply(t, c); r != "+OK" {
		t.Fatalf("SET: %s", r)
	}
	cl := &becomesLeader{Node: env.Cluster.(*raftfsm.Node)}
	env.Cluster, env.Service.Cluster = cl, cl
	c.Reset()
	env.Exec(c, admin, [][]byte{[]byte("RL.BUDGET"), []byte("GET"), []byte("acme"), []byte("CONSISTENT")})
	if r := reply(t, c); !strings.Contains(r, `\"rate\":7`) || cl.relays != 1 || cl.reads != 2 {
		t.Fatalf("read %s after %d relays, %d reads", r, cl.relays, cl.reads)
	}

	// A relay that reaches a node which does not lead (a forwarder's
	// connection): refused, worded as a read.
	cl.reads = 0
	relayed := NewSession(2, "127.0.0.1:3", "127.0.0.1:2", access.RoleAdmin, func() {})
	c.Reset()
	env.Exec(c, relayed, [][]byte{[]byte("CLIENT"), []byte("SETNAME"), []byte(raftfsm.ForwardPrefix + "n2")})
	c.Reset()
	env.Exec(c, relayed, [][]byte{[]byte("RL.BUDGET"), []byte("GET"), []byte("acme"), []byte("CONSISTENT")})
	if r := reply(t, c); !strings.HasPrefix(r, "-"+raftfsm.NotLeaderReply) || !strings.Contains(r, "read") || strings.Contains(r, "write") {
		t.Fatalf("relayed read on a node that does not lead: %s", r)
	}
}
