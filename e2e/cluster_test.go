package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// member is one node of a multi-process test cluster.
type member struct {
	id, resp, raft, dir string
	env                 []string // added to the process's environment (SLUICE_TEST_CLOCK)
	p                   *proc
	c                   *redis.Client
}

func (m *member) start(t *testing.T, peers string) {
	t.Helper()
	m.p = startEnv(t, m.env, "--node-id", m.id, "--resp-addr", m.resp, "--raft-addr", m.raft, "--http-addr", "",
		"--data-dir", m.dir, "--bootstrap-peers", peers)
	if m.c == nil {
		m.c = client(t, m.resp)
	}
}

func (m *member) info(t *testing.T) map[string]string {
	t.Helper()
	out, err := clusterInfo(m.c)
	if err != nil {
		return nil
	}
	return out
}

func budgetVersion(t *testing.T, c *redis.Client, path string) uint64 {
	s, err := c.Do(context.Background(), "RL.BUDGET", "GET", path).Text()
	if err != nil {
		return 0
	}
	var v struct{ Version uint64 }
	json.Unmarshal([]byte(s), &v)
	return v.Version
}

func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// leader returns the member every running member names as leader.
// others returns the members of ms but x, in their order.
func others(ms []*member, x *member) []*member {
	var out []*member
	for _, m := range ms {
		if m != x {
			out = append(out, m)
		}
	}
	return out
}

func leader(t *testing.T, ms []*member) *member {
	t.Helper()
	var l *member
	eventually(t, 20*time.Second, "an agreed leader", func() bool {
		l = nil
		id := ""
		for _, m := range ms {
			inf := m.info(t)
			if inf == nil || inf["leader_id"] == "" || (id != "" && inf["leader_id"] != id) {
				return false
			}
			id = inf["leader_id"]
		}
		for _, m := range ms {
			if m.id == id {
				l = m
			}
		}
		return l != nil
	})
	return l
}

// staticMembers gives n members of a static cluster (n1 … nn) their
// loopback addresses and data folders, and the --peers list naming them.
func staticMembers(t *testing.T, n int) ([]*member, string) {
	var ms []*member
	var peers []string
	for i := 1; i <= n; i++ {
		m := &member{id: fmt.Sprintf("n%d", i), resp: "127.0.0.1:" + freePort(t), raft: "127.0.0.1:" + freePort(t), dir: t.TempDir()}
		ms = append(ms, m)
		peers = append(peers, m.id+"="+m.raft+"="+m.resp)
	}
	return ms, strings.Join(peers, ",")
}

func TestThreeProcessCluster(t *testing.T) {
	ms, peerList := staticMembers(t, 3)
	for _, m := range ms {
		m.start(t, peerList)
	}
	l := leader(t, ms)
	follower := others(ms, l)[0]
	// A write sent to a follower is applied everywhere with one version.
	if got := do(t, follower.c, "RL.BUDGET", "SET", "acme", "RATE", "100", "PER", "minute", "SHARING", "enforce"); got != "OK" {
		t.Fatalf("SET via follower: %v", got)
	}
	v := budgetVersion(t, l.c, "acme")
	eventually(t, 10*time.Second, "the version on every node", func() bool {
		for _, m := range ms {
			if budgetVersion(t, m.c, "acme") != v || v == 0 {
				return false
			}
		}
		return true
	})

	// kill -9 the leader: a new one is elected and writes go through any
	// surviving node.
	l.p.kill9()
	alive := others(ms, l)
	leader(t, alive)
	for i, m := range alive {
		path := fmt.Sprintf("acme/t%d", i)
		eventually(t, 10*time.Second, "a write after failover", func() bool {
			return m.c.Do(context.Background(), "RL.BUDGET", "SET", path, "RATE", "10", "PER", "minute").Err() == nil
		})
	}
	// The killed node restarts from its data dir and catches up.
	l.start(t, peerList)
	eventually(t, 15*time.Second, "the restarted node to catch up", func() bool {
		return budgetVersion(t, l.c, "acme/t0") != 0 && budgetVersion(t, l.c, "acme/t1") != 0
	})

	// Two nodes down: writes fail with TRYAGAIN in bounded time, and the
	// survivor keeps answering RL.ACQUIRE from local state.
	survivor := ms[0]
	for _, m := range ms[1:] {
		m.p.stop()
	}
	start := time.Now()
	var werr error
	eventually(t, 20*time.Second, "writes to fail", func() bool {
		werr = survivor.c.Do(context.Background(), "RL.BUDGET", "SET", "acme/late", "RATE", "1").Err()
		return werr != nil
	})
	if !strings.HasPrefix(werr.Error(), "TRYAGAIN") {
		t.Fatalf("write without quorum: %v", werr)
	}
	start = time.Now()
	err := survivor.c.Do(context.Background(), "RL.BUDGET", "SET", "acme/late", "RATE", "1").Err()
	if err == nil || !strings.HasPrefix(err.Error(), "TRYAGAIN") || time.Since(start) > 7*time.Second {
		t.Fatalf("write without quorum: %v after %v", err, time.Since(start))
	}
	if r := do(t, survivor.c, "RL.ACQUIRE", "acme/t0").([]any); r[0] != int64(1) {
		t.Fatalf("acquire without quorum: %v", r)
	}
	if r := do(t, survivor.c, "RL.ACQUIRE", "inline", "RATE", "5").([]any); r[0] != int64(1) {
		t.Fatalf("inline acquire without quorum: %v", r)
	}

	// All three restart from their data dirs: the tree is intact. (The
	// refused write may surface now: TRYAGAIN said its outcome was unknown,
	// and the survivor may have logged it while it still led.)
	survivor.p.stop()
	for _, m := range ms {
		m.start(t, peerList)
	}
	leader(t, ms)
	for _, m := range ms {
		var list []string
		var err error
		eventually(t, 15*time.Second, "the tree after a full restart", func() bool {
			list, err = m.c.Do(context.Background(), "RL.BUDGET", "LIST").StringSlice()
			have := strings.Join(list, " ") + " "
			return err == nil && strings.Contains(have, "acme ") && strings.Contains(have, "acme/t0 ") && strings.Contains(have, "acme/t1 ")
		})
		if budgetVersion(t, m.c, "acme") != v {
			t.Fatalf("%s: acme version %d after restart, want %d", m.id, budgetVersion(t, m.c, "acme"), v)
		}
	}
}

// clusterInfo returns RL.CLUSTER INFO as a map of strings.
func clusterInfo(c *redis.Client) (map[string]string, error) {
	v, err := c.Do(context.Background(), "RL.CLUSTER", "INFO").Result()
	if err != nil {
		return nil, err
	}
	m, err := asMap(v)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for k, v := range m {
		out[k] = fmt.Sprint(v)
	}
	return out, nil
}
