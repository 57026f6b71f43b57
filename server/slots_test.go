package server

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/reserve"
	"github.com/sluice-rl/sluice/testsupport/resptest"
	"github.com/sluice-rl/sluice/testsupport/testkit"
)

// slotCluster is the in-process cluster of TestConcurrencyThroughMembershipChanges:
// nodes on real clocks, each restartable with its id, addresses and data.
type slotCluster struct {
	t     *testing.T
	nodes map[string]*Node
	dirs  map[string]string
	first string
	mu    sync.Mutex
	// held: per key, the reservations granted and not released, as the
	// clients see them (a dead node's count until their TTL).
	held map[string]map[string]bool
}

func (sc *slotCluster) start(id, resp, raft string) *Node {
	sc.t.Helper()
	if sc.dirs[id] == "" {
		sc.dirs[id] = sc.t.TempDir()
	}
	join := ""
	if sc.first != "" && sc.first != id {
		join = sc.nodes[sc.first].Server.RespAddr()
	}
	n := startTestNode(sc.t, testNode{Config: func(c *Config) {
		c.NodeID, c.DataDir, c.Join = id, sc.dirs[id], join
		if resp != "" {
			c.RespAddr, c.RaftAddr = resp, raft
		}
	}})
	if sc.first == "" {
		sc.first = id
	}
	sc.nodes[id] = n
	return n
}

// members waits until every running node lists exactly want.
func (sc *slotCluster) members(want int) {
	sc.t.Helper()
	testkit.WaitFor(sc.t, 30*time.Second, fmt.Sprintf("%d members on every node", want), func() bool {
		for _, n := range sc.nodes {
			if len(n.Raft.State().Members) != want || n.Server.svc.Loading() {
				return false
			}
		}
		return true
	})
}

// copied waits until every hold of every running node is known, as a
// copy, at its key's backup under the current members (the first other
// node of the key's ranking): re-registering them after a change takes a
// moment, and a node that stopped before would take holds with it.
func (sc *slotCluster) copied() {
	sc.t.Helper()
	testkit.WaitFor(sc.t, 30*time.Second, "every hold copied at its backup", func() bool {
		for id, n := range sc.nodes {
			for _, h := range n.Server.svc.Holds.Slotted(true) {
				rank := n.Server.svc.Store.Ranking(engine.SpaceInline, []byte(h.Key), nil)
				issuer, _ := reserve.IssuedBy(h.ID)
				if issuer != id && rank[0] != id {
					continue // a copy, of a key another node decides
				}
				for _, m := range rank {
					if m != id && m == issuer {
						break // the backup issued it
					}
					if m != id {
						if b := sc.nodes[m]; b == nil || !b.Server.svc.Holds.HasCopy(h.ID) {
							return false
						}
						break
					}
				}
			}
		}
		return true
	})
}

// reserve asks node id for a slot of key (CONCURRENCY 2), retrying
// LOADING and TRYAGAIN; it records a grant and returns whether there was.
func (sc *slotCluster) reserve(id, key string) bool {
	sc.t.Helper()
	c := resptest.Dial(sc.t, sc.nodes[id].Server.RespAddr())
	defer c.Conn.Close()
	for try := 0; ; try++ {
		c.Send("RL.RESERVE", key, "CONCURRENCY", "2", "COST", "1", "TTL", "600000")
		got, err := c.TryRead(2 * time.Minute) // a bound for a busy machine, not a timing
		if err != nil {
			sc.t.Errorf("RL.RESERVE %s on %s: %v", key, id, err)
			return false
		}
		switch {
		case strings.HasPrefix(got, "-LOADING") || strings.HasPrefix(got, "-TRYAGAIN"):
			if try == 100 {
				sc.t.Errorf("RL.RESERVE %s on %s: %s", key, id, got)
				return false
			}
			time.Sleep(50 * time.Millisecond)
			continue
		case strings.HasPrefix(got, "[1 "):
			f := strings.Fields(got)
			rid, err := unquote(strings.TrimSuffix(f[len(f)-1], "]"))
			if err != nil {
				sc.t.Errorf("id in %s: %v", got, err)
				return false
			}
			sc.mu.Lock()
			if sc.held[key] == nil {
				sc.held[key] = map[string]bool{}
			}
			sc.held[key][rid] = true
			n := len(sc.held[key])
			sc.mu.Unlock()
			if n > 2 {
				sc.t.Errorf("%s: %d reservations in flight, limit 2 (granted by %s)", key, n, id)
			}
			return true
		case strings.HasPrefix(got, "[0 "):
			return false
		default:
			sc.t.Errorf("RL.RESERVE %s on %s: %s", key, id, got)
			return false
		}
	}
}

// full asks every running node for one more slot of every key, all at
// once, and fails for any granted: every key holds 2 already.
func (sc *slotCluster) full(when string) {
	sc.t.Helper()
	var wg sync.WaitGroup
	for _, k := range slotKeys() {
		for id := range sc.nodes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if sc.reserve(id, k) {
					sc.t.Errorf("%s: %s granted a third slot of %s", when, id, k)
				}
			}()
		}
	}
	wg.Wait()
}

func slotKeys() []string {
	var ks []string
	for i := range 24 {
		ks = append(ks, fmt.Sprintf("job:%d", i))
	}
	return ks
}

// A concurrency limit holds across the cluster while its membership
// changes: 24 keys filled to CONCURRENCY 2, then a fourth node joins, one
// leaves (RL.CLUSTER LEAVE), one stops and one restarts with its data.
// After each change one more reservation of every key is asked of every
// node at once, and none may be granted: the slots' owner hands the count
// over when ownership moves, a stopped owner's slots count as held on its
// backup, and a restarted node learns its keys' holds before granting.
func TestConcurrencyThroughMembershipChanges(t *testing.T) {
	sc := &slotCluster{t: t, nodes: map[string]*Node{}, dirs: map[string]string{}, held: map[string]map[string]bool{}}
	for _, id := range []string{"s1", "s2", "s3"} {
		sc.start(id, "", "")
	}
	sc.members(3)
	ids := []string{"s1", "s2", "s3"}
	for i, k := range slotKeys() {
		for j := range 2 {
			if !sc.reserve(ids[(i+j)%3], k) {
				t.Fatalf("%s: slot %d refused on an empty key", k, j+1)
			}
		}
	}
	sc.full("three nodes")

	sc.start("s4", "", "")
	sc.members(4)
	sc.full("after s4 joined")

	// A member leaves; its reservations count until their TTL (they can
	// no longer be settled through the cluster).
	leader := leaderOf(t, sc.nodes["s1"], sc.nodes["s2"], sc.nodes["s3"], sc.nodes["s4"])
	var lid string
	for _, id := range []string{"s2", "s3", "s4"} {
		if sc.nodes[id] != leader {
			lid = id
			break
		}
	}
	leaver := sc.nodes[lid]
	c := resptest.Dial(t, sc.nodes["s1"].Server.RespAddr())
	testkit.WaitFor(t, 30*time.Second, "LEAVE "+lid, func() bool { // an election may refuse it
		got := c.Do("RL.CLUSTER", "LEAVE", lid)
		gone := got == "+OK" || strings.HasPrefix(got, "-ERR no node with id") // a TRYAGAIN's removal committed after all
		if !gone && !strings.HasPrefix(got, "-TRYAGAIN") {
			t.Fatalf("LEAVE %s: %s", lid, got)
		}
		return gone
	})
	leaver.Close()
	delete(sc.nodes, lid)
	sc.members(3)
	sc.full("after " + lid + " left")
	sc.copied()

	// A member stops hard (its memory is gone), then restarts.
	var victim string
	for id := range sc.nodes {
		if id != "s1" && id != lid {
			victim = id
			break
		}
	}
	vn := sc.nodes[victim]
	resp, raft := vn.Server.RespAddr(), vn.Raft.State().Members[victim].RaftAddr
	vn.Close()
	delete(sc.nodes, victim)
	sc.full("while " + victim + " is down")
	sc.start(victim, resp, raft)
	sc.members(3)
	sc.full("after " + victim + " restarted")

	// The slots come back as their reservations end: every key whose
	// reservations are all released (those of nodes that left or
	// restarted can no longer be, and count until their TTL) grants again.
	freed := 0
	for _, k := range slotKeys() {
		all := true
		for rid := range sc.held[k] {
			got := c.Do("RL.RELEASE", rid)
			if got == "1" {
				delete(sc.held[k], rid)
			} else {
				all = false
			}
		}
		if all {
			freed++
			testkit.WaitFor(t, 10*time.Second, "a slot of "+k+" after its release", func() bool { return sc.reserve("s1", k) })
		}
	}
	if freed == 0 {
		t.Fatal("no key had all its reservations released")
	}
	t.Logf("%d keys released and granted again", freed)
}
