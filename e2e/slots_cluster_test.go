package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// slotHeld counts, per key, the reservations clients were granted and
// have not ended: what is in flight as the clients see it.
type slotHeld struct {
	mu   sync.Mutex
	held map[string]map[string]bool
}

// reserve asks c for a slot of key (CONCURRENCY 2), retrying LOADING and
// TRYAGAIN, records a grant and fails the test when the key then has more
// than 2 in flight; it reports whether it was granted.
func (h *slotHeld) reserve(t *testing.T, c *redis.Client, node, key string) bool {
	ctx := context.Background()
	for try := 0; ; try++ {
		v, err := c.Do(ctx, "RL.RESERVE", key, "CONCURRENCY", 2, "COST", 1, "TTL", 600000).Slice()
		if err != nil {
			if (strings.HasPrefix(err.Error(), "LOADING") || strings.HasPrefix(err.Error(), "TRYAGAIN")) && try < 200 {
				time.Sleep(50 * time.Millisecond)
				continue
			}
			t.Errorf("RL.RESERVE %s on %s: %v", key, node, err)
			return false
		}
		if v[0].(int64) != 1 {
			return false
		}
		id := v[6].(string)
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.held[key] == nil {
			h.held[key] = map[string]bool{}
		}
		h.held[key][id] = true
		if n := len(h.held[key]); n > 2 {
			t.Errorf("%s: %d reservations in flight, limit 2 (the last granted through %s, id %s)", key, n, node, id)
		}
		return true
	}
}

// full asks every member of ms for one more slot of every key, all at
// once: none may be granted.
func (h *slotHeld) full(t *testing.T, when string, ms []*member, keys []string) {
	t.Helper()
	var wg sync.WaitGroup
	for _, k := range keys {
		for _, m := range ms {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if h.reserve(t, m.c, m.id, k) {
					t.Errorf("%s: %s granted a third slot of %s", when, m.id, k)
				}
			}()
		}
	}
	wg.Wait()
}

// listMembers waits until every member of ms lists n members.
func listMembers(t *testing.T, ms []*member, n int) {
	t.Helper()
	eventually(t, 60*time.Second, fmt.Sprintf("every node to list %d members", n), func() bool {
		for _, m := range ms {
			if m.info(t)["members"] != fmt.Sprint(n) {
				return false
			}
		}
		return true
	})
}

// A concurrency limit holds across real nodes through a join and a kill
// -9 and its restart: 24 keys filled to CONCURRENCY 2, then after each
// change every node is asked for one more slot of every key, and none is
// granted; the clients never see more than 2 in flight on a key.
func TestConcurrencyThroughJoinAndKill(t *testing.T) {
	ms, peers := threeNodes(t)
	for _, m := range ms {
		waitReady(t, m.c)
	}
	h := &slotHeld{held: map[string]map[string]bool{}}
	var keys []string
	for i := range 24 {
		keys = append(keys, fmt.Sprintf("job:%d", i))
	}
	for i, k := range keys {
		for j := range 2 {
			m := ms[(i+j)%3]
			if !h.reserve(t, m.c, m.id, k) {
				t.Fatalf("%s: slot %d refused on an empty key", k, j+1)
			}
		}
	}
	h.full(t, "three nodes", ms, keys)

	n4 := &member{id: "n4", resp: "127.0.0.1:" + freePort(t), raft: "127.0.0.1:" + freePort(t), dir: t.TempDir()}
	n4.p = start(t, "--node-id", n4.id, "--resp-addr", n4.resp, "--raft-addr", n4.raft, "--http-addr", "", "--data-dir", n4.dir, "--join", ms[0].resp)
	n4.c = client(t, n4.resp)
	all := append(append([]*member(nil), ms...), n4)
	listMembers(t, all, 4)
	h.full(t, "after n4 joined", all, keys)

	// kill -9 a node that does not lead; the survivors decide its keys.
	victim := others(ms, leader(t, ms))[0]
	victim.p.kill9()
	h.full(t, "while "+victim.id+" is down", others(all, victim), keys)

	victim.startWith(t, peers)
	waitReady(t, victim.c)
	listMembers(t, all, 4)
	h.full(t, "after "+victim.id+" restarted", all, keys)
	inflight := 0
	for _, ids := range h.held {
		inflight += len(ids)
	}
	if inflight != 48 {
		t.Fatalf("%d reservations granted in all, want the 48 of the fill", inflight)
	}
}

// A fresh cluster's first moments: three nodes started together and asked
// for slots as soon as each listens, from every node at once, before they
// have elected a leader or learnt each other. No key gets more than its 2:
// a node answers LOADING until it knows every member, and no slot is
// granted while members rank keys over different member lists.
func TestConcurrencyInAFreshClustersFirstMoments(t *testing.T) {
	ms, peerList := staticMembers(t, 3)
	for _, m := range ms {
		m.startWith(t, peerList)
	}
	h := &slotHeld{held: map[string]map[string]bool{}}
	var wg sync.WaitGroup
	for i := range 24 {
		k := fmt.Sprintf("fresh:%d", i)
		for _, m := range ms {
			for range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					h.reserve(t, m.c, m.id, k)
				}()
			}
		}
	}
	wg.Wait()
	for i := range 24 {
		if n := len(h.held[fmt.Sprintf("fresh:%d", i)]); n != 2 {
			t.Errorf("fresh:%d: %d granted of 6 asked, want its 2", i, n)
		}
	}
}
