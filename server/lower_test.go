package server

import (
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/testsupport/resptest"
	"github.com/sluice-rl/sluice/testsupport/testkit"
)

// realTimeCluster is joinCluster with every node on real time: leases
// expire and buckets refill as they do in production.
func realTimeCluster(t *testing.T) []*Node {
	t.Helper()
	first := startTestNode(t, testNode{})
	nodes := []*Node{first}
	for i := 1; i < 3; i++ {
		nodes = append(nodes, startTestNode(t, testNode{Config: func(c *Config) { c.Join = first.Server.RespAddr() }}))
	}
	testkit.WaitFor(t, 15*time.Second, "three members", func() bool {
		for _, n := range nodes {
			if len(n.Raft.State().Members) != 3 || !n.Raft.Ready() {
				return false
			}
		}
		return true
	})
	return nodes
}

// TestLoweredLimitBitesWithinOneLease lowers a limit from 1000 to 10 an
// hour while a caller on each of three nodes keeps calling: the two
// members that do not own the bucket hold leases of it (and credit of the
// old burst's share, 334) when it changes. Calls decided under the new
// limit (an admitted reply names it) admit at most what one bucket of the
// new limit admits, full at the change (10: nothing refills at 10 an hour
// in these seconds), plus the share each other member may keep of what it
// held (2 × ⌈10/3⌉ = 8): 18. Calls sent a second or more after every node
// has the new limit admit nothing beyond its refill (at most one token),
// and none is decided under the old one. The limit is lowered both ways a
// client meets it: a budget changed by RL.BUDGET SET (the nodes apply it
// through Raft), and callers that start sending another inline limit.
// (Once, a holder kept spending the tokens and credit it held under the
// old limit: 244 to 477 admitted after such a change, over 4 to 8 s.)
func TestLoweredLimitBitesWithinOneLease(t *testing.T) {
	nodes := realTimeCluster(t)
	// set sets the budget's rate (through any node, again after an
	// election) and waits until every node has applied it.
	set := func(rate string) {
		testkit.WaitFor(t, 30*time.Second, "RL.BUDGET SET to answer OK", func() bool {
			c := resptest.Dial(t, nodes[0].Server.RespAddr())
			defer c.Conn.Close()
			return c.Do("RL.BUDGET", "SET", "lowered", "RATE", rate, "PER", "hour") == "+OK"
		})
		applied := uint64(0)
		for _, n := range nodes {
			applied = max(applied, n.Raft.FSM().Applied())
		}
		testkit.WaitForApplied(t, applied, nodes[0].Raft, nodes[1].Raft, nodes[2].Raft)
	}
	set("1000")
	for _, tc := range []struct {
		name          string
		before, after []string
		lower         func()
	}{
		{
			name:   "budget",
			before: []string{"RL.ACQUIRE", "lowered"},
			after:  []string{"RL.ACQUIRE", "lowered"},
			lower:  func() { set("10") },
		},
		{
			name:   "inline",
			before: []string{"RL.ACQUIRE", "lowered-inline", "RATE", "1000", "PER", "hour"},
			after:  []string{"RL.ACQUIRE", "lowered-inline", "RATE", "10", "PER", "hour"},
			lower:  func() {},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var (
				changed   atomic.Bool
				changeAt  atomic.Int64 // unix ns: the SET sent, or the callers' switch
				settledAt atomic.Int64 // unix ns: every node has the new limit
				stop      atomic.Bool
				wg        sync.WaitGroup
				mu        sync.Mutex
				before    [3]int
				after     []int64 // when each call admitted under the new limit was sent (unix ns)
				stale     []string
				failed    []string
			)
			for i, n := range nodes {
				c := resptest.Dial(t, n.Server.RespAddr())
				wg.Add(1)
				go func() {
					defer wg.Done()
					for !stop.Load() {
						now, form := changed.Load(), tc.before
						if now {
							form = tc.after
						}
						sent := time.Now().UnixNano()
						c.Conn.SetWriteDeadline(time.Now().Add(30 * time.Second))
						_, err := c.Conn.Write(resptest.Encode(form...))
						r := ""
						if err == nil {
							r, err = c.TryRead(30 * time.Second)
						}
						mu.Lock()
						// An admitted reply names the limit it was decided
						// under: [1 remaining limit …].
						switch f := strings.Fields(strings.Trim(r, "[]")); {
						case err != nil:
							failed = append(failed, err.Error())
						case len(f) < 3 || f[0] != "1":
						case f[2] == "10":
							after = append(after, sent)
						case settledAt.Load() != 0 && sent >= settledAt.Load():
							stale = append(stale, r)
						default:
							before[i]++
						}
						mu.Unlock()
						if err != nil {
							return
						}
						if settledAt.Load() == 0 {
							// Until every node has the new limit the callers
							// go slowly, so that it finds tokens held
							// everywhere.
							time.Sleep(10 * time.Millisecond)
						}
					}
				}()
			}
			defer func() { stop.Store(true); wg.Wait() }()
			// Every node admits some calls, so the members that do not
			// own the bucket hold leases when the limit changes.
			testkit.WaitFor(t, 20*time.Second, "every node admitting 40 calls", func() bool {
				mu.Lock()
				defer mu.Unlock()
				return before[0] >= 40 && before[1] >= 40 && before[2] >= 40
			})
			changeAt.Store(time.Now().UnixNano())
			changed.Store(true)
			tc.lower()
			settledAt.Store(time.Now().UnixNano())
			testkit.WaitFor(t, 20*time.Second, "three seconds of calls once every node has the new limit", func() bool {
				return time.Now().UnixNano()-settledAt.Load() >= int64(3*time.Second)
			})
			stop.Store(true)
			wg.Wait()
			if len(failed) > 0 {
				t.Fatalf("calls failed: %q", failed)
			}
			late := 0
			for _, at := range after {
				if at >= settledAt.Load()+int64(time.Second) {
					late++
				}
			}
			t.Logf("admitted under 1000 an hour %v; under 10 an hour %d, of which %d sent 1 s or more after every node had it (%v after the change)",
				before, len(after), late, time.Duration(settledAt.Load()-changeAt.Load()).Round(time.Millisecond))
			if len(stale) > 0 {
				t.Errorf("calls sent once every node had the new limit were admitted under the old one: %q", stale)
			}
			if len(after) > 18 {
				t.Errorf("the cluster admitted %d calls after 1000 an hour was lowered to 10 (bound 10 + 2 × ⌈10/3⌉ = 18)", len(after))
			}
			if late > 1 {
				t.Errorf("%d calls sent 1 s or more after every node had the new limit were admitted (at most 1: 10 an hour refills less than a token in 3 s)", late)
			}
		})
	}
}
