package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// A fresh node accepts a configuration write as soon as it answers PING:
// the write waits for the node to elect itself instead of bouncing.
func TestFreshNodeAcceptsWritesAtOnce(t *testing.T) {
	for i := 0; i < 20; i++ {
		p := single(t)
		c := redis.NewClient(&redis.Options{Addr: p.Resp, MaxRetries: -1, ReadTimeout: 10 * time.Second})
		for c.Ping(context.Background()).Err() != nil {
			time.Sleep(time.Millisecond)
		}
		if got, err := c.Do(context.Background(), "RL.BUDGET", "SET", "acme", "RATE", "100").Result(); err != nil || got != "OK" {
			t.Fatalf("cold start %d: RL.BUDGET SET right after PING: %v %v\n%s", i, got, err, p.Log())
		}
		c.Close()
		if err := p.stop(); err != nil {
			t.Fatalf("cold start %d: stop: %v", i, err)
		}
	}
}

// threeNodes starts a static three-process cluster and waits for a leader.
func threeNodes(t *testing.T, extra ...string) ([]*member, string) {
	t.Helper()
	ms, peerList := staticMembers(t, 3)
	for _, m := range ms {
		m.startWith(t, peerList, extra...)
	}
	leader(t, ms)
	// Every node knows every member (the replicated member records, with
	// their RESP addresses): what routes leases, reservations and their
	// slots to a member. A busy machine applies them after the election.
	eventually(t, 30*time.Second, "every node to list three members", func() bool {
		for _, m := range ms {
			if m.info(t)["members"] != "3" {
				return false
			}
		}
		return true
	})
	return ms, peerList
}

func (m *member) startWith(t *testing.T, peers string, extra ...string) {
	t.Helper()
	m.p = start(t, append([]string{"--node-id", m.id, "--resp-addr", m.resp, "--raft-addr", m.raft, "--http-addr", "127.0.0.1:0",
		"--data-dir", m.dir, "--bootstrap-peers", peers}, extra...)...)
	if m.c == nil {
		m.c = client(t, m.resp)
	}
}

// Killing the leader and writing to a follower at once: the write waits for
// the new leader and succeeds, within the election time plus one apply
// (bounded by --apply-timeout).
func TestWriteDuringFailoverSucceeds(t *testing.T) {
	ms, peerList := threeNodes(t)
	for round := 0; round < 3; round++ {
		l := leader(t, ms)
		follower := others(ms, l)[0]
		l.p.kill9()
		start := time.Now()
		path := fmt.Sprintf("failover/r%d", round)
		got, err := follower.c.Do(context.Background(), "RL.BUDGET", "SET", path, "RATE", "7").Result()
		if err != nil || got != "OK" {
			t.Fatalf("round %d: write to %s right after killing leader %s: %v %v", round, follower.id, l.id, got, err)
		}
		// The follower applied it before answering: read-your-writes.
		if budgetVersion(t, follower.c, path) == 0 {
			t.Fatalf("round %d: %s answered OK but does not show %s", round, follower.id, path)
		}
		t.Logf("round %d: write during failover took %v", round, time.Since(start))
		l.startWith(t, peerList)
	}
}

// A removed node stays removed: it does not rejoin on its own, reports
// itself removed, is not ready, and comes back only when an operator
// joins it.
func TestLeaveSticks(t *testing.T) {
	ms, _ := threeNodes(t)
	l := leader(t, ms)
	var gone *member
	for _, m := range ms {
		if m != l {
			gone = m
		}
	}
	if got := do(t, ms[0].c, "RL.CLUSTER", "LEAVE", gone.id); got != "OK" {
		t.Fatalf("LEAVE: %v", got)
	}
	eventually(t, 10*time.Second, "the removed node to report itself removed", func() bool {
		return gone.info(t)["role"] == "removed"
	})
	// For 10 s the node must stay out of the configuration.
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for _, m := range ms {
			if m == gone {
				continue
			}
			nodes, err := m.c.Do(context.Background(), "RL.CLUSTER", "NODES").Slice()
			if err != nil {
				continue
			}
			for _, n := range nodes {
				if n.([]any)[0] == gone.id {
					t.Fatalf("%s is back in %s's configuration: %v", gone.id, m.id, nodes)
				}
			}
		}
		if gone.info(t)["role"] != "removed" {
			t.Fatalf("%s no longer reports itself removed: %v", gone.id, gone.info(t))
		}
		time.Sleep(200 * time.Millisecond)
	}
	if code := readyz(t, gone.p.HTTP); code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz of a removed node: %d", code)
	}
	if err := gone.c.Do(context.Background(), "RL.BUDGET", "SET", "x", "RATE", "1").Err(); err == nil || !strings.HasPrefix(err.Error(), "CLUSTERDOWN") {
		t.Fatalf("write on a removed node: %v", err)
	}
	// An operator re-admits it.
	if got := do(t, l.c, "RL.CLUSTER", "JOIN", gone.id, gone.raft, gone.resp); got != "OK" {
		t.Fatalf("JOIN: %v", got)
	}
	eventually(t, 15*time.Second, "the re-admitted node to follow again", func() bool {
		inf := gone.info(t)
		return inf["role"] == "follower" && inf["leader_id"] != ""
	})
	if got := do(t, gone.c, "RL.BUDGET", "SET", "back", "RATE", "1"); got != "OK" {
		t.Fatalf("write through the re-admitted node: %v", got)
	}
}

func readyz(t *testing.T, addr string) int {
	resp, err := http.Get("http://" + addr + "/readyz")
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// A restarted node is not ready, and does not report its log applied,
// until it has replayed it: whenever /readyz says 200, the last write
// before the restart is visible and applied_index has reached
// commit_index.
func TestReadyOnlyAfterReplay(t *testing.T) {
	dir := t.TempDir()
	args := []string{"--resp-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--raft-addr", "127.0.0.1:" + freePort(t), "--data-dir", dir}
	p := start(t, args...)
	c := client(t, p.Resp)
	const n = 3000
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := w; i < n; i += 8 {
				if err := c.Do(context.Background(), "RL.BUDGET", "SET", fmt.Sprintf("t/%d", i), "RATE", "10").Err(); err != nil {
					t.Errorf("SET %d: %v", i, err)
					return
				}
			}
		}(w)
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	last := fmt.Sprintf("t/%d", n-1)
	if err := c.Do(context.Background(), "RL.BUDGET", "SET", "last", "RATE", "1").Err(); err != nil {
		t.Fatal(err)
	}
	if err := p.stop(); err != nil {
		t.Fatal(err)
	}
	p = start(t, args...)
	c2 := client(t, p.Resp)
	sawReady := false
	eventually(t, 60*time.Second, "the restarted node to be ready", func() bool {
		// The commit index read before /readyz answers 200 must be
		// applied by the time it does; one read after may be ahead
		// again (the new leader's own entries arrive at any moment).
		before, err := clusterInfo(c2)
		if err != nil {
			return false
		}
		code := readyz(t, p.HTTP)
		inf, err := clusterInfo(c2)
		if code != http.StatusOK || err != nil {
			return false
		}
		applied, _ := strconv.ParseUint(inf["applied_index"], 10, 64)
		commit, _ := strconv.ParseUint(before["commit_index"], 10, 64)
		if applied < commit {
			t.Fatalf("ready with applied_index %d below the commit_index %d read before /readyz", applied, commit)
		}
		for _, path := range []string{"last", last} {
			if budgetVersion(t, c2, path) == 0 {
				t.Fatalf("/readyz 200 while %s is not replayed yet (applied %d, commit %d)", path, applied, commit)
			}
		}
		sawReady = true
		return true
	})
	if !sawReady {
		t.Fatal("never ready")
	}
}
