package server

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/testsupport/resptest"
	"github.com/sluice-rl/sluice/testsupport/testkit"
)

// A reservation of 40 settled at 55, on a limit of 1000 a day, through
// each node of three (two of them do not own the bucket, whose extra 15
// then goes to the owner through the node's lease): the settle tells 945
// left, and the cluster then admits 945 more, not 960, for every
// algorithm and in the budget form, whose tightest level (1000 a day,
// under 5000 a day) tells. On real time: a token of 1000 a day takes
// 86 s to refill, and a leaser on a clock that stands still would never
// ask an owner again that once had no tokens. (Once, the extra went
// to the settling node's own copy of the bucket and reached the owner only
// through the consumption sync, a while later or not at all: the owner
// kept granting the 15 and the settle told 960; and a settle on a node
// that had not yet heard from the owner told the lease's count, 294 of
// 1000, credit included.)
func TestSettleAboveTheEstimateReachesTheOwner(t *testing.T) {
	nodes := realTimeCluster(t)
	leader := leaderOf(t, nodes...)
	admin := resptest.Dial(t, leader.Server.RespAddr())
	forms := map[string][]string{}
	for _, algo := range []string{"token_bucket", "gcra", "leaky_bucket", "fixed_window", "sliding_window"} {
		forms[algo] = []string{"RATE", "1000", "PER", "day", "ALGO", algo}
	}
	for i := range nodes {
		for _, c := range [][]string{
			{"RL.BUDGET", "SET", fmt.Sprint("settle", i), "RATE", "5000", "PER", "day"},
			{"RL.BUDGET", "SET", fmt.Sprint("settle", i, "/b"), "RATE", "1000", "PER", "day", "ALGO", "fixed_window"},
		} {
			if r := admin.Do(c...); r != "+OK" {
				t.Fatalf("%q: %s", c, r)
			}
		}
	}
	testkit.WaitForApplied(t, leader.Raft.FSM().Applied(), nodes[0].Raft, nodes[1].Raft, nodes[2].Raft)
	forms["budget"] = nil
	var conns []*resptest.Client
	for _, n := range nodes {
		conns = append(conns, resptest.Dial(t, n.Server.RespAddr()))
	}
	for name, limit := range forms {
		for i, c := range conns {
			key := fmt.Sprint("settle-", name, i)
			if limit == nil {
				key = fmt.Sprint("settle", i, "/b")
			}
			call := func(verb string, more ...string) []string {
				return append(append([]string{verb, key}, limit...), more...)
			}
			var r string
			// A window's lease has no credit: a non-owner's first call
			// is refused while it asks the owner.
			testkit.WaitFor(t, 5*time.Second, name+": the reservation to be admitted", func() bool {
				r = c.Do(call("RL.RESERVE", "COST", "40")...)
				return strings.HasPrefix(r, "[1 ")
			})
			var id string
			if _, err := fmt.Sscanf(r[strings.LastIndex(r, " ")+1:len(r)-1], "%q", &id); err != nil || id == "" {
				t.Fatalf("%s on node %d: reserve: %s", name, i, r)
			}
			r = c.Do("RL.SETTLE", id, "ACTUAL", "55")
			if !strings.HasPrefix(r, "[1 945 1000 ") {
				t.Errorf("%s on node %d: settle at 55 of an estimate of 40 told %s, want 945 of 1000 left", name, i, r)
			}
			// A rate limit's credit lets the cluster run ahead of one
			// bucket for a while (docs/cluster.md): its exactness is the
			// owner's count, so only the owner calls. A window takes no
			// credit: every node calls, leases included.
			callers := conns
			if w := strings.HasSuffix(name, "_window") || limit == nil; !w {
				owner, _ := nodes[0].Server.svc.Store.Owner(engine.SpaceInline, []byte(key))
				for j, n := range nodes {
					if n.Raft.ID() == owner {
						callers = []*resptest.Client{conns[j]}
					}
				}
			}
			admitted := 0
			for refused := 0; refused < 60; {
				if strings.HasPrefix(callers[refused%len(callers)].Do(call("RL.ACQUIRE")...), "[1 ") {
					admitted++
					refused = 0
					continue
				}
				refused++
				time.Sleep(time.Millisecond) // a grant on its way
			}
			if admitted != 945 {
				t.Errorf("%s on node %d: the cluster admitted %d after a reservation of 40 settled at 55, want 945", name, i, admitted)
			}
		}
	}
}
