package server

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/access"
	"github.com/sluice-rl/sluice/testsupport/resptest"
	"github.com/sluice-rl/sluice/testsupport/testkit"
)

// committedQuota waits until n's replica holds used tokens in key's
// counter.
func committedQuota(t *testing.T, n *Node, key string, used int64) {
	t.Helper()
	testkit.WaitFor(t, 10*time.Second, fmt.Sprintf("%s to commit %d of %s", n.Raft.ID(), used, key), func() bool {
		it, ok := n.Raft.FSM().Quota(key)
		return ok && it.Used == used
	})
}

func TestInlineQuotaCountsCalendarPeriods(t *testing.T) {
	n := startNode(t, nil)
	clk := fixClock(n.Server)
	clk.Advance(18 * time.Hour) // t0 is a Wednesday, 00:00 UTC
	c := resptest.Dial(t, n.Server.RespAddr())
	sixHours, tomorrow := "21600000", fmt.Sprint((t0+int64(24*time.Hour))/1e9)
	script(t, c, []exchange{
		{cmd("RL.ACQUIRE", "k", "RATE", "100", "QUOTA", "3", "PER", "day"), `[1 2 3 0 ` + sixHours + ` "quota:k"]`},
		{cmd("RL.ACQUIRE", "k", "RATE", "100", "QUOTA", "3", "PER", "day", "COST", "2"), `[1 0 3 0 ` + sixHours + ` "quota:k"]`},
		{cmd("RL.ACQUIRE", "k", "RATE", "100", "QUOTA", "3", "PER", "day"), `[0 0 3 ` + sixHours + ` ` + sixHours + ` "quota:k"]`},
		{cmd("RL.ACQUIRE", "k", "RATE", "100", "QUOTA", "3", "PER", "day", "COST", "4"), `[0 0 3 -1 ` + sixHours + ` "quota:k"]`},
		{cmd("RL.PEEK", "k", "RATE", "100", "QUOTA", "3", "PER", "day", "COST", "0"), `[1 0 3 0 ` + sixHours + ` "quota:k"]`},
		{cmd("RL.QUOTA", "k", "QUOTA", "3", "PER", "day"),
			`["level" "k" "limit" 3 "used" 3 "remaining" 0 "period" "day" "resets_at" ` + tomorrow + ` "reset_after_ms" ` + sixHours + `]`},
	})
	// The counts reach the replicated state once, and the node then counts
	// them from there: still 3 used, not 6.
	committedQuota(t, n, "i|k", 3)
	testkit.WaitFor(t, 5*time.Second, "the node to settle its count", func() bool {
		return n.Server.svc.Store.QuotaCount([]byte("i|k"), t0) == 0
	})
	script(t, c, []exchange{
		{cmd("RL.QUOTA", "k"), `["level" "k" "limit" 3 "used" 3 "remaining" 0 "period" "day" "resets_at" ` + tomorrow + ` "reset_after_ms" ` + sixHours + `]`},
		{cmd("RL.ACQUIRE", "k", "RATE", "100", "QUOTA", "3", "PER", "day"), `[0 0 3 ` + sixHours + ` ` + sixHours + ` "quota:k"]`},
		// A refund gives the quota back, committed tokens included.
		{cmd("RL.REFUND", "k", "RATE", "100", "QUOTA", "3", "PER", "day", "COST", "1"), `[1 1 3 0 ` + sixHours + ` "quota:k"]`},
		{cmd("RL.ACQUIRE", "k", "RATE", "100", "QUOTA", "3", "PER", "day"), `[1 0 3 0 ` + sixHours + ` "quota:k"]`},
	})
	// The next day starts over.
	clk.Advance(6 * time.Hour)
	script(t, c, []exchange{
		{cmd("RL.ACQUIRE", "k", "RATE", "100", "QUOTA", "3", "PER", "day"), `[1 2 3 0 86400000 "quota:k"]`},
		// With the quota far from its end, the rate is the tighter level.
		{cmd("RL.ACQUIRE", "r", "RATE", "2", "QUOTA", "1000", "PER", "month"), `[1 1 2 0 500 "r"]`},
		// A quota alone, in a time zone: Tokyo's day ends at 15:00 UTC.
		{cmd("RL.ACQUIRE", "jp", "QUOTA", "1", "PER", "day", "TZ", "Asia/Tokyo"), `[1 0 1 0 54000000 "quota:jp"]`},
		{cmd("RL.ACQUIRE", "jp", "QUOTA", "1", "TZ", "Asia/Tokyo", "PER", "day"), `[0 0 1 54000000 54000000 "quota:jp"]`},
		{cmd("RL.QUOTA", "nobody"), "-ERR no quota known for 'nobody': not a budget path, and no inline quota committed for that key; give QUOTA n PER period to describe one"},
		{cmd("RL.ACQUIRE", "k", "RATE", "1", "QUOTA", "0", "PER", "day"), "-ERR QUOTA must be an integer between 1 and 1000000000000"},
		{cmd("RL.ACQUIRE", "k", "RATE", "1", "QUOTA", "5", "PER", "fortnight"), "-ERR QUOTA … PER must be one of hour, day, week, month, year"},
		{cmd("RL.ACQUIRE", "k", "QUOTA", "5", "PER", "day", "TZ", "Mars/Olympus"), "-ERR quota time zone 'Mars/Olympus' is not an IANA time zone name such as UTC, Europe/Paris or America/New_York"},
		{cmd("RL.ACQUIRE", "k", "QUOTA", "5", "PER", "day", "TZ", "Local"), "-ERR quota time zone 'Local' is not an IANA time zone name such as UTC, Europe/Paris or America/New_York"},
		{cmd("RL.ACQUIRE", "k", "QUOTA", "5", "PER"), "-ERR syntax error: QUOTA n PER needs a period"},
		{cmd("RL.ACQUIRE", "k", "QUOTA"), "-ERR syntax error: QUOTA needs a value"},
		{cmd("RL.QUOTA", "k", "RATE", "5"), "-ERR syntax error near 'RATE'"},
	})
	if got := scrape(t, n.Server.HTTPAddr())["sluice_quota_batches_committed_total"]; got < 1 {
		t.Fatalf("sluice_quota_batches_committed_total %v", got)
	}
}

func TestBudgetQuotaAndReset(t *testing.T) {
	n := startNode(t, nil)
	clk := fixClock(n.Server)
	c := resptest.Dial(t, n.Server.RespAddr())
	month := fmt.Sprint(int64(16 * 24 * 3600 * 1000)) // 2023-11-15 to 2023-12-01
	script(t, c, []exchange{
		{cmd("RL.BUDGET", "SET", "plans/free", "RATE", "100", "SCOPE", "user", "QUOTA", "2", "PER", "month"), "+OK"},
		{cmd("RL.ACQUIRE", "plans/free", "KEY", "alice"), `[1 1 2 0 ` + month + ` "quota:plans/free#alice"]`},
		{cmd("RL.ACQUIRE", "plans/free", "KEY", "alice"), `[1 0 2 0 ` + month + ` "quota:plans/free#alice"]`},
		{cmd("RL.ACQUIRE", "plans/free", "KEY", "alice"), `[0 0 2 ` + month + ` ` + month + ` "quota:plans/free#alice"]`},
		{cmd("RL.ACQUIRE", "plans/free", "KEY", "bob"), `[1 1 2 0 ` + month + ` "quota:plans/free#bob"]`},
		{cmd("RL.QUOTA", "plans/free", "KEY", "alice"), `["level" "plans/free#alice" "limit" 2 "used" 2 "remaining" 0 "period" "month" "resets_at" 1701388800 "reset_after_ms" ` + month + `]`},
		{cmd("RL.QUOTA", "plans/free"), "-ERR budget 'plans/free' has scope user: KEY required"},
		{cmd("RL.BUDGET", "SET", "norate", "RATE", "5"), "+OK"},
		{cmd("RL.QUOTA", "norate"), "-ERR no quota applies to 'norate': neither the node nor a level it charges has one"},
	})
	committedQuota(t, n, "b|plans/free#alice", 2)
	script(t, c, []exchange{
		{cmd("RL.QUOTA", "RESET", "plans/free", "KEY", "alice"), "1"},
		{cmd("RL.QUOTA", "RESET", "plans/free", "KEY", "carol"), "0"},
		{cmd("RL.QUOTA", "RESET", "norate"), "-ERR no quota applies to 'norate': the node has none"},
		{cmd("RL.ACQUIRE", "plans/free", "KEY", "alice"), `[1 1 2 0 ` + month + ` "quota:plans/free#alice"]`},
		{cmd("RL.QUOTA", "plans/free", "KEY", "bob"), `["level" "plans/free#bob" "limit" 2 "used" 1 "remaining" 1 "period" "month" "resets_at" 1701388800 "reset_after_ms" ` + month + `]`},
		// The quota shows in the config.
		{cmd("RL.BUDGET", "SET", "bad", "RATE", "5", "QUOTA", "10", "PER", "day", "TZ", "Nowhere/Town"), "-ERR quota time zone 'Nowhere/Town' is not an IANA time zone name such as UTC, Europe/Paris or America/New_York"},
	})
	if got := c.Do("RL.BUDGET", "GET", "plans/free"); !strings.Contains(got, `\"quota\":{\"limit\":2,\"period\":\"month\",\"timezone\":\"UTC\"}`) {
		t.Fatalf("GET: %s", got)
	}
	clk.Advance(time.Second)
	if got := c.Do("RL.QUOTA", "RESET", "nobody"); !strings.HasPrefix(got, "-ERR no quota known") {
		t.Fatalf("reset of an unknown key: %s", got)
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func TestQuotaCountsSurviveARestart(t *testing.T) {
	dir, raftAddr := t.TempDir(), freeAddr(t)
	clk := testkit.NewClock(t0)
	conf := func(c *Config) { c.DataDir, c.RaftAddr, c.NodeID = dir, raftAddr, "q1" }
	n := startTestNode(t, testNode{Config: conf, Clock: clk})
	c := resptest.Dial(t, n.Server.RespAddr())
	if got := c.Do("RL.BUDGET", "SET", "org", "QUOTA", "3", "PER", "year"); got != "+OK" {
		t.Fatal(got)
	}
	for i := 0; i < 3; i++ {
		c.Do("RL.ACQUIRE", "org")
	}
	committedQuota(t, n, "b|org", 3)
	n.Close()

	back := startTestNode(t, testNode{Config: conf, Clock: clk})
	committedQuota(t, back, "b|org", 3)
	c = resptest.Dial(t, back.Server.RespAddr())
	if got := c.Do("RL.ACQUIRE", "org"); !strings.HasPrefix(got, `[0 0 3 `) || !strings.HasSuffix(got, ` "quota:org"]`) {
		t.Fatalf("after a restart the year's quota is spent, got %s", got)
	}
}

func TestQuotaIsClusterWide(t *testing.T) {
	nodes := joinCluster(t, nil)
	leader := leaderOf(t, nodes...)
	resptest.Dial(t, leader.Server.RespAddr()).Do("RL.BUDGET", "SET", "shared", "RATE", "1000", "QUOTA", "6", "PER", "year")
	testkit.WaitForApplied(t, leader.Raft.FSM().Applied(), nodes[0].Raft, nodes[1].Raft, nodes[2].Raft)
	var conns []*resptest.Client
	for _, n := range nodes {
		conns = append(conns, resptest.Dial(t, n.Server.RespAddr()))
	}
	// Two calls on each node in turn, each pair committed everywhere before
	// the next: the three nodes share one count. A node with no units
	// reserved waits up to a second for a reservation's commit; on a busy
	// machine the commit may take longer, and the call is refused with
	// units still left (remaining > 0) and a retry_after: it is retried,
	// as a client would.
	for i, c := range conns {
		for j := 0; j < 2; j++ {
			var got string
			testkit.WaitFor(t, 30*time.Second, "a quota call to be decided by the count", func() bool {
				got = c.Do("RL.ACQUIRE", "shared")
				return !strings.HasPrefix(got, "[0 ") || strings.HasPrefix(got, "[0 0 ")
			})
			if !strings.HasPrefix(got, "[1 ") {
				t.Fatalf("node %d call %d: %s", i, j, got)
			}
		}
		for _, n := range nodes {
			committedQuota(t, n, "b|shared", int64(2*i+2))
		}
	}
	for i, c := range conns {
		if got := c.Do("RL.ACQUIRE", "shared"); !strings.HasPrefix(got, "[0 0 6 ") || !strings.HasSuffix(got, `"quota:shared"]`) {
			t.Fatalf("node %d after 6 of 6: %s", i, got)
		}
	}
	// The count outlives the leader.
	var survivors []*Node
	for _, n := range nodes {
		if n == leader {
			n.Close()
		} else {
			survivors = append(survivors, n)
		}
	}
	leaderOf(t, survivors...)
	for _, n := range survivors {
		c := resptest.Dial(t, n.Server.RespAddr())
		if got := c.Do("RL.QUOTA", "shared"); !strings.Contains(got, `"used" 6 "remaining" 0 "period" "year"`) {
			t.Fatalf("%s: %s", n.Raft.ID(), got)
		}
	}
	// A reset through a follower reaches every node.
	if got := resptest.Dial(t, survivors[0].Server.RespAddr()).Do("RL.QUOTA", "RESET", "shared"); got != "1" {
		t.Fatalf("reset: %s", got)
	}
	// Every node applies the reset before any node counts again: a call
	// admitted on one node is committed as a new count, and a node that
	// applies the reset and that count together never shows the gap.
	for _, n := range survivors {
		testkit.WaitFor(t, 10*time.Second, "the reset to apply", func() bool {
			_, ok := n.Raft.FSM().Quota("b|shared")
			return !ok
		})
	}
	for _, n := range survivors {
		if got := resptest.Dial(t, n.Server.RespAddr()).Do("RL.ACQUIRE", "shared"); !strings.HasPrefix(got, "[1 ") {
			t.Fatalf("%s after reset: %s", n.Raft.ID(), got)
		}
	}
}

func TestQuotaBoundAcrossNodes(t *testing.T) {
	nodes := joinCluster(t, nil)
	leader := leaderOf(t, nodes...)
	resptest.Dial(t, leader.Server.RespAddr()).Do("RL.BUDGET", "SET", "spreadq", "RATE", "1000", "QUOTA", "10", "PER", "year")
	testkit.WaitForApplied(t, leader.Raft.FSM().Applied(), nodes[0].Raft, nodes[1].Raft, nodes[2].Raft)
	var conns []*resptest.Client
	for _, n := range nodes {
		conns = append(conns, resptest.Dial(t, n.Server.RespAddr()))
	}
	// A call every 50 ms, round-robin: each node sees one every 150 ms,
	// more than a sync interval (100 ms) plus a commit, so each other node
	// has at most one call the others do not know of yet. Calls go on
	// until the quota is spent (units a node holds idle go back within a
	// second, so on a loaded machine the last ones may take a while), then
	// 40 more (two seconds, past every release) must all be refused.
	for _, form := range [][]string{
		{"RL.ACQUIRE", "spreadq"},
		{"RL.ACQUIRE", "spreadq-inline", "QUOTA", "10", "PER", "year"},
	} {
		admitted, after := 0, 0
		tick := time.NewTicker(50 * time.Millisecond)
		deadline := time.Now().Add(60 * time.Second)
		for i := 0; after < 40 && time.Now().Before(deadline); i++ {
			<-tick.C
			if strings.HasPrefix(conns[i%3].Do(form...), "[1 ") {
				admitted++
			}
			if admitted >= 10 {
				after++
			}
		}
		tick.Stop()
		if admitted != 10 {
			t.Errorf("%s: the cluster admitted %d of a quota of 10 (reservations make it exact)", form[1], admitted)
		}
	}
}

func TestQuotaKeysNeedNotBeText(t *testing.T) {
	n := startNode(t, nil)
	fixClock(n.Server)
	c := resptest.Dial(t, n.Server.RespAddr())
	for _, key := range []string{"\xff\xfe", "\xff", "\xfe"} {
		for i := 0; i < 3; i++ {
			if got := c.Do("RL.ACQUIRE", key, "QUOTA", "3", "PER", "day"); !strings.HasPrefix(got, "[1 ") {
				t.Fatalf("%q call %d: %s", key, i, got)
			}
		}
		committedQuota(t, n, "i|"+key, 3)
		testkit.WaitFor(t, 5*time.Second, "the count to settle", func() bool {
			return n.Server.svc.Store.QuotaCount([]byte("i|"+key), t0) == 0
		})
		if got := c.Do("RL.ACQUIRE", key, "QUOTA", "3", "PER", "day"); !strings.HasPrefix(got, "[0 0 3 ") {
			t.Fatalf("%q after 3 of 3 committed: %s", key, got)
		}
	}
	if got := c.Do("RL.BUDGET", "SET", "a\xff", "RATE", "5"); got != "-ERR budget path 'a\xff' is not valid UTF-8" {
		t.Fatalf("a path that is not UTF-8: %s", got)
	}
}

func TestMaxQuotaCounters(t *testing.T) {
	n := startNode(t, func(c *Config) { c.MaxQuotas = 2 })
	fixClock(n.Server)
	c := resptest.Dial(t, n.Server.RespAddr())
	for _, k := range []string{"a", "b"} {
		if got := c.Do("RL.ACQUIRE", k, "QUOTA", "5", "PER", "day"); !strings.HasPrefix(got, "[1 4 5 ") {
			t.Fatalf("%s: %s", k, got)
		}
		committedQuota(t, n, "i|"+k, 1)
	}
	script(t, c, []exchange{
		{cmd("RL.ACQUIRE", "c", "QUOTA", "5", "PER", "day"), "-ERR quota counters are at their limit (--max-quota-counters): no new quota counter can start until periods end or counters are reset (RL.QUOTA RESET)"},
		{cmd("RL.ACQUIRE", "c", "RATE", "10"), `[1 9 10 0 100 "c"]`},
		{cmd("RL.ACQUIRE", "a", "QUOTA", "5", "PER", "day"), `[1 3 5 0 86400000 "quota:a"]`},
		{cmd("RL.PEEK", "c", "QUOTA", "5", "PER", "day"), `[1 4 5 0 86400000 "quota:c"]`},
		{cmd("RL.QUOTA", "RESET", "b"), "1"},
	})
	testkit.WaitFor(t, 5*time.Second, "room for a counter", func() bool { return n.Raft.FSM().QuotaCounters() < 2 })
	if got := c.Do("RL.ACQUIRE", "c", "QUOTA", "5", "PER", "day"); !strings.HasPrefix(got, "[1 4 5 ") {
		t.Fatalf("after a reset: %s", got)
	}
}

func TestManyQuotaCountersAreCommittedInSeveralBatches(t *testing.T) {
	n := startNode(t, nil)
	fixClock(n.Server)
	env := n.Server.env
	const keys = 25000 // more than one batch holds
	for i := 0; i < keys; i++ {
		if got := string(env.Run("RL.ACQUIRE", fmt.Sprintf("k%05d", i), "QUOTA", "7", "PER", "week")); !strings.HasPrefix(got, "*6\r\n:1\r\n") {
			t.Fatalf("call %d: %q", i, got)
		}
	}
	testkit.WaitFor(t, 20*time.Second, "every counter committed", func() bool { return n.Raft.FSM().QuotaCounters() == keys })
	// A batch's counts are visible a moment before the syncer counts it.
	var got float64
	testkit.WaitFor(t, 10*time.Second, "three batches counted", func() bool {
		got = scrape(t, n.Server.HTTPAddr())["sluice_quota_batches_committed_total"]
		return got >= 3
	})
	it, _ := n.Raft.FSM().Quota("i|k12345")
	if it.Used != 1 || it.Limit != 7 || it.Period != "week UTC" {
		t.Fatalf("a counter: %+v", it)
	}
}

// A quota batch stamped far in the future (a forged or broken sender) is
// refused: accepted, it would make every later batch of that node look
// already counted, and its counts would be lost for ever.
func TestQuotaBatchFromTheFutureIsRefused(t *testing.T) {
	n := startNode(t, nil)
	c := resptest.Dial(t, n.Server.RespAddr())
	if got := c.Do("AUTH", access.PeerUserPrefix+n.Raft.ID(), access.PeerToken("", n.Raft.ID())); got != "+OK" {
		t.Fatal(got) // internal commands come from nodes only
	}
	if got := c.Do("RL.CLUSTER", "APPLY", forgedEntry(n.Raft.ID(), 1<<64-1, nil)); !strings.Contains(got, "more than an hour ahead of this node's clock") {
		t.Fatalf("a batch from the future: %s", got)
	}
	// This node's own counts still reach the committed table.
	for i := 0; i < 2; i++ {
		if got := c.Do("RL.ACQUIRE", "k", "QUOTA", "5", "PER", "day"); !strings.HasPrefix(got, "[1 ") {
			t.Fatalf("call %d: %s", i, got)
		}
	}
	committedQuota(t, n, "i|k", 2)
}

// TestScanAndDBSizeShowQuotaCounters: a quota counter is in the keyspace
// while the cluster holds its usage, after this node's own count of it
// has been committed and settled: SCAN names it once (whatever COUNT),
// DBSIZE counts it once, TYPE and TTL describe it.
func TestScanAndDBSizeShowQuotaCounters(t *testing.T) {
	n := startNode(t, nil)
	fixClock(n.Server).Advance(18 * time.Hour) // 6 h before the day ends
	c := resptest.Dial(t, n.Server.RespAddr())
	script(t, c, []exchange{
		{cmd("RL.ACQUIRE", "k", "RATE", "100", "QUOTA", "3", "PER", "day"), `[1 2 3 0 21600000 "quota:k"]`},
		{cmd("RL.ACQUIRE", "solo", "QUOTA", "5", "PER", "day"), `[1 4 5 0 21600000 "quota:solo"]`},
	})
	committedQuota(t, n, "i|k", 1)
	committedQuota(t, n, "i|solo", 1)
	testkit.WaitFor(t, 5*time.Second, "the node to settle its counts", func() bool {
		return n.Server.svc.Store.QuotaCount([]byte("i|k"), t0) == 0 && n.Server.svc.Store.QuotaCount([]byte("i|solo"), t0) == 0
	})
	want := []string{`"k"`, `"quota:k"`, `"quota:solo"`}
	if got := c.Do("SCAN", "0", "COUNT", "1000"); !strings.HasPrefix(got, `["0" [`) || !containsAll(got, want) || strings.Count(got, `"quota:k"`) != 1 {
		t.Fatalf("SCAN 0 COUNT 1000: %s, want %v", got, want)
	}
	// One name at a time: every name once, and the scan ends.
	seen := map[string]int{}
	cursor := "0"
	for i := 0; ; i++ {
		if i > 10000 {
			t.Fatal("SCAN COUNT 1 does not end")
		}
		got := c.Do("SCAN", cursor, "COUNT", "1")
		var names string
		if _, err := fmt.Sscanf(got, "[%q", &cursor); err != nil {
			t.Fatalf("SCAN reply %s: %v", got, err)
		}
		_, names, _ = strings.Cut(got, " [")
		for _, f := range strings.Fields(strings.TrimSuffix(names, "]]")) {
			seen[f]++
		}
		if cursor == "0" {
			break
		}
	}
	if len(seen) != 3 || seen[`"k"`] != 1 || seen[`"quota:k"`] != 1 || seen[`"quota:solo"`] != 1 {
		t.Fatalf("SCAN COUNT 1 pages named %v", seen)
	}
	if got := c.Do("SCAN", "0", "COUNT", "1000", "TYPE", "quota"); !containsAll(got, want[1:]) || strings.Contains(got, `"k"`) {
		t.Fatalf("SCAN TYPE quota: %s", got)
	}
	script(t, c, []exchange{
		{cmd("DBSIZE"), "3"},
		{cmd("SCAN", "0", "COUNT", "1000", "MATCH", "quota:s*"), `["0" ["quota:solo"]]`},
		{cmd("TYPE", "quota:solo"), "+quota"},
		{cmd("PTTL", "quota:solo"), "21600000"},
	})
}

func containsAll(s string, subs []string) bool {
	for _, x := range subs {
		if !strings.Contains(s, x) {
			return false
		}
	}
	return true
}

// TestScanNamesRequestsAsLimitedByDoes: a node's requests bucket is in the
// keyspace under the name limited_by gives it, and TYPE and PTTL find it.
func TestScanNamesRequestsAsLimitedByDoes(t *testing.T) {
	n := startNode(t, nil)
	c := resptest.Dial(t, n.Server.RespAddr())
	script(t, c, []exchange{
		{cmd("RL.BUDGET", "SET", "chat", "RATE", "1000", "PER", "hour", "REQUESTS", "2", "PER", "minute", "SCOPE", "user"), "+OK"},
		{cmd("RL.ACQUIRE", "chat", "KEY", "u1", "COST", "10"), `[1 990 1000 0 36000 "chat#u1"]`},
		{cmd("RL.ACQUIRE", "chat", "KEY", "u1", "COST", "10"), `[1 980 1000 0 72000 "chat#u1"]`},
		{cmd("RL.ACQUIRE", "chat", "KEY", "u1", "COST", "10"), `[0 0 2 30000 60000 "requests:chat#u1"]`},
		{cmd("SCAN", "0", "COUNT", "1000", "MATCH", "requests:*"), `["0" ["requests:chat#u1"]]`},
		{cmd("TYPE", "requests:chat#u1"), "+token_bucket"},
		{cmd("PTTL", "requests:chat#u1"), "60000"},
		{cmd("DBSIZE"), "2"},
	})
}

// A call larger than any node's share gets the units it lacks from the
// pool and from the other nodes' idle grants: with 2,000 of 3,000 spent
// over three nodes (each holding some of the rest), a reserve of 1,000 on
// any node is admitted at once, then nothing more is.
func TestLargeQuotaCallGetsTheOthersUnits(t *testing.T) {
	nodes := joinCluster(t, nil)
	leaderOf(t, nodes...)
	var conns []*resptest.Client
	for _, n := range nodes {
		conns = append(conns, resptest.Dial(t, n.Server.RespAddr()))
	}
	for x := range nodes {
		key := fmt.Sprintf("big%d", x)
		q := []string{"QUOTA", "3000", "PER", "month"}
		spent := 0
		// Calls of 100 in turn on each node (retried as a client would
		// when a reservation is slow to commit) until 2,000 are spent.
		for i := 0; spent < 2000; i++ {
			c := conns[i%3]
			testkit.WaitFor(t, 30*time.Second, "a call of 100 to be admitted", func() bool {
				return strings.HasPrefix(c.Do(append([]string{"RL.ACQUIRE", key, "COST", "100"}, q...)...), "[1 ")
			})
			spent += 100
		}
		it, _ := nodes[x].Raft.FSM().Quota("i|" + key)
		t.Logf("%s: 2000 admitted; committed used %d, reserved %d, grants %v", key, it.Used, it.Reserved, it.Grants)
		// The reserve needs the others' units, moved through Raft: retried
		// as a client would while they come (a refusal holds nothing).
		var got string
		testkit.WaitFor(t, 30*time.Second, "a reserve of 1000 with 1000 of 3000 left", func() bool {
			got = conns[x].Do(append([]string{"RL.RESERVE", key, "COST", "1000"}, q...)...)
			return strings.HasPrefix(got, "[1 ")
		})
		for _, n := range nodes {
			committedQuota(t, n, "i|"+key, 3000)
		}
		for i, c := range conns {
			if got := c.Do(append([]string{"RL.ACQUIRE", key}, q...)...); !strings.HasPrefix(got, "[0 0 3000 ") || !strings.HasSuffix(got, `"quota:`+key+`"]`) {
				t.Fatalf("%s: node %d after 3000 of 3000: %s", key, i, got)
			}
		}
	}
}

// Units a node held when it stopped come back when it starts again: it
// gives back what its previous life held past the spend mark it had
// written (a step, 1 unit of 600, ahead of its spending; the promise is
// at most 2). QUOTA 600 a day, about 200 spent over three nodes, then
// every node in turn stopped (the first two as a crash would, keeping
// their units and losing their uncommitted counts; the last one giving
// its units back as it stops) and started again on its data: in the end
// at least 594 are admitted, never more than 600.
func TestQuotaUnitsComeBackAfterRestarts(t *testing.T) {
	const quota = 600
	// Each node's Raft address is picked as it first starts (a port
	// picked long before could be taken meanwhile) and kept for its
	// restart, as a node id keeps its address.
	var confs []func(*Config)
	for i := 0; i < 3; i++ {
		dir, addr, id := t.TempDir(), "", fmt.Sprintf("r%d", i+1)
		confs = append(confs, func(c *Config) {
			if addr == "" {
				addr = freeAddr(t)
			}
			c.DataDir, c.RaftAddr, c.NodeID = dir, addr, id
		})
	}
	nodes := []*Node{startTestNode(t, testNode{Config: confs[0]})}
	for i := 1; i < 3; i++ {
		join := nodes[0].Server.RespAddr()
		nodes = append(nodes, startTestNode(t, testNode{Config: func(c *Config) { confs[i](c); c.Join = join }}))
	}
	members := func() bool {
		for _, n := range nodes {
			if n == nil || len(n.Raft.State().Members) != 3 || !n.Raft.Ready() {
				return false
			}
		}
		return true
	}
	testkit.WaitFor(t, 20*time.Second, "three members", members)
	call := func(i int) bool {
		got := resptest.Dial(t, nodes[i].Server.RespAddr()).Do("RL.ACQUIRE", "roll", "QUOTA", fmt.Sprint(quota), "PER", "day")
		return strings.HasPrefix(got, "[1 ")
	}
	admitted := 0
	spread := func(n int) {
		for i := 0; admitted < n; i++ {
			if call(i % 3) {
				admitted++
			}
		}
	}
	spread(200)
	for i := range nodes {
		// Every node holds units: the one stopped loses its grant.
		spread(admitted + 30)
		nodes[i].keepUnits = i < 2 // as a crash would; the last one stops as SIGTERM does
		nodes[i].Close()
		nodes[i] = nil
		nodes[i] = startTestNode(t, testNode{Config: confs[i]})
		testkit.WaitFor(t, 20*time.Second, "the node back among three members", members)
		t.Logf("restarted %s at %d admitted", nodes[i].Raft.ID(), admitted)
	}
	// Calls in turn until the quota is spent, or at least its floor is
	// and every node has refused 10 times in a row with nothing admitted
	// for 3 s, or a minute has passed: units given back by restarts and
	// idle nodes come back through Raft, which a loaded machine slows.
	refused, last, deadline := 0, time.Now(), time.Now().Add(time.Minute)
	for i := 0; admitted < quota && time.Now().Before(deadline) &&
		(admitted < quota-6 || refused < 30 || time.Since(last) < 3*time.Second); i++ {
		if call(i % 3) {
			admitted, refused, last = admitted+1, 0, time.Now()
		} else {
			refused++
			time.Sleep(10 * time.Millisecond)
		}
	}
	// Past the quota, nothing more is admitted.
	for i := 0; i < 30; i++ {
		if call(i % 3) {
			admitted++
		}
	}
	it, _ := nodes[0].Raft.FSM().Quota("i|roll")
	t.Logf("QUOTA %d a day, every node restarted: %d admitted (committed used %d, reserved %d, grants %v)", quota, admitted, it.Used, it.Reserved, it.Grants)
	if admitted > quota || admitted < quota-6 {
		t.Fatalf("admitted %d of a quota of %d through three restarts: want %d to %d", admitted, quota, quota-6, quota)
	}
}
