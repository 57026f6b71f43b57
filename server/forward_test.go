package server

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/raftfsm"
	"github.com/sluice-rl/sluice/testsupport/resptest"
	"github.com/sluice-rl/sluice/testsupport/testkit"
)

// Writes forwarded over one connection reach the leader's log intact: the
// entry Raft keeps (and later sends to lagging followers from its cache)
// must not share memory with the connection's read buffer, which the next
// forwarded write overwrites.
func TestForwardedEntriesStayIntact(t *testing.T) {
	nodes := joinCluster(t, nil)
	leader := leaderOf(t, nodes...)
	follower := followerOf(leader, nodes)
	c := resptest.Dial(t, follower.Server.RespAddr())
	// The writes lie after what the follower has applied now, and up to
	// what it has applied once the last one answered OK (read-your-writes
	// there); entries of other kinds may come between them.
	first := follower.Raft.FSM().Applied() + 1
	const writes = 40
	for i := 1; i <= writes; i++ {
		if got := c.Do("RL.BUDGET", "SET", fmt.Sprintf("fw/n%02d", i), "RATE", strconv.Itoa(i)); got != "+OK" {
			t.Fatalf("write %d: %s", i, got)
		}
	}
	end := follower.Raft.FSM().Applied()
	testkit.WaitFor(t, 10*time.Second, "the writes on the leader", func() bool {
		return leader.Raft.FSM().Applied() >= end
	})
	want := 1
	var last *raftfsm.ReqID
	for idx := first; want <= writes && idx <= end; idx++ {
		e, err := leader.Raft.Entry(idx)
		if err != nil || e.Type != raftfsm.SetBudget || e.Path[:3] != "fw/" {
			continue // a member record, a quota batch
		}
		if last != nil && e.Req != nil && *e.Req == *last {
			continue // the same write sent again (its answer was late): applied once
		}
		last = e.Req
		if e.Path != fmt.Sprintf("fw/n%02d", want) || e.Config.Rate != int64(want) {
			t.Fatalf("log entry %d holds %s rate %d, want fw/n%02d rate %d", idx, e.Path, e.Config.Rate, want, want)
		}
		want++
	}
	if want != writes+1 {
		t.Fatalf("found %d of %d forwarded writes in the leader's log", want-1, writes)
	}
}
