package server

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/testsupport/resptest"
	"github.com/sluice-rl/sluice/testsupport/testkit"
)

// dataCluster starts an in-process cluster of the ids on real clocks and
// waits until every node places data keys over all of them.
func dataCluster(t *testing.T, ids ...string) *slotCluster {
	t.Helper()
	sc := &slotCluster{t: t, nodes: map[string]*Node{}, dirs: map[string]string{}, held: map[string]map[string]bool{}}
	for _, id := range ids {
		sc.start(id, "", "")
	}
	sc.members(len(ids))
	sc.placedAlike()
	return sc
}

// placedAlike waits until every running node ranks data keys over the
// same member list, its own.
func (sc *slotCluster) placedAlike() {
	sc.t.Helper()
	testkit.WaitFor(sc.t, 30*time.Second, "every node to place data keys over the same members", func() bool {
		var view uint64
		for _, n := range sc.nodes {
			v := n.Server.svc.Store.View()
			if v == 0 || view != 0 && v != view || n.Server.svc.Loading() {
				return false
			}
			view = v
		}
		return true
	})
}

// dataOwner is the owner of key as node id places it.
func (sc *slotCluster) dataOwner(id, key string) string {
	o, self := sc.nodes[id].Server.svc.DataOwner([]byte(key))
	if self {
		return id
	}
	return o
}

// A node that has not yet learnt of a change of the members relays a key's
// commands to the owner of the older list. That node, which has learnt of
// it and dropped the key it no longer keeps, must refuse them (TRYAGAIN:
// the sender retries once it has caught up) rather than run them: a copy
// made there would count the key's window a second time beside its new
// owner's, and would come back as the key's value should the key return
// to that node. The lagging node is played here by a connection named as
// a relay's, sending what it would send.
func TestRelayByAnOlderMemberListIsRefused(t *testing.T) {
	sc := dataCluster(t, "m1", "m2", "m3")
	c := resptest.Dial(t, sc.nodes["m1"].Server.RespAddr())
	was := map[string]string{} // key → its owner among three
	for i := range 48 {
		k := fmt.Sprintf("win:%d", i)
		was[k] = sc.dataOwner("m1", k)
		for j := range 3 {
			if got := c.Do("INCR", k); got != fmt.Sprint(j+1) {
				t.Fatalf("INCR %s: %s", k, got)
			}
		}
	}
	sc.start("m4", "", "")
	sc.members(4)
	sc.placedAlike()
	moved := map[string]string{} // key → its old owner, for the keys m4 took
	for k, o := range was {
		if now := sc.dataOwner("m1", k); now == "m4" {
			moved[k] = o
		} else if now != o {
			t.Fatalf("%s moved from %s to %s, not to the new member", k, o, now)
		}
	}
	if len(moved) == 0 {
		t.Fatal("no key moved to m4")
	}
	holds := func(id, key string) bool {
		svc := sc.nodes[id].Server.svc
		_, ok := svc.Keys.Info(svc.Clock(), []byte(key))
		return ok
	}
	testkit.WaitFor(t, 30*time.Second, "the old owners to drop the keys m4 took", func() bool {
		for k, o := range moved {
			if holds(o, k) {
				return false
			}
		}
		return true
	})
	for k, o := range moved {
		lag := resptest.Dial(t, sc.nodes[o].Server.RespAddr())
		if got := lag.Do("CLIENT", "SETNAME", "sluice-forward:lagging"); got != "+OK" {
			t.Fatalf("CLIENT SETNAME: %s", got)
		}
		if got := lag.Do("INCR", k); !strings.HasPrefix(got, "-TRYAGAIN ") {
			t.Errorf("INCR %s relayed to its old owner %s by an older member list: %s (want TRYAGAIN)", k, o, got)
		}
		if got := lag.Do("EVAL", "return redis.call('INCR', KEYS[1])", "1", k); !strings.HasPrefix(got, "-TRYAGAIN ") {
			t.Errorf("a script on %s relayed to its old owner %s by an older member list: %s (want TRYAGAIN)", k, o, got)
		}
		if holds(o, k) {
			t.Errorf("%s, no longer its owner, holds %s again after a relay by an older member list", o, k)
		}
		// Through the cluster the key starts again from empty, on m4.
		if got := c.Do("INCR", k); got != "1" {
			t.Errorf("INCR %s after it moved to m4: %s (want 1: it starts again from empty)", k, got)
		}
	}
	// A relayed command for a key the node keeps under both lists runs.
	for k, o := range was {
		if moved[k] != "" {
			continue
		}
		lag := resptest.Dial(t, sc.nodes[o].Server.RespAddr())
		lag.Do("CLIENT", "SETNAME", "sluice-forward:lagging")
		if got := lag.Do("INCR", k); got != "4" {
			t.Errorf("INCR %s relayed to its owner %s: %s (want 4)", k, o, got)
		}
		break
	}
}

// Sixty-four connections at once, spread over three nodes, on one hot key:
// a fixed window counted with INCR and EXPIRE (every count from 1 on is
// answered exactly once, whichever node relayed it) and redis_rate's GCRA
// (go-redis/redis_rate v10, unchanged) admit exactly the limit, as one
// Redis would.
func TestHotDataKeyThroughSixtyFourConnections(t *testing.T) {
	sc := dataCluster(t, "h1", "h2", "h3")
	ids := []string{"h1", "h2", "h3"}
	const conns, limit = 64, 400
	// A day's GCRA period: no token comes back during the test.
	gcra := redis_rate.Limit{Rate: limit, Burst: limit, Period: 24 * time.Hour}
	// The window's key on h2, GCRA's on h3: most calls are relayed.
	fwKey, rrKey := "", ""
	for i := 0; fwKey == "" || rrKey == ""; i++ {
		if k := fmt.Sprint("hot:", i); fwKey == "" && sc.dataOwner("h1", k) == "h2" {
			fwKey = k
		} else if rrKey == "" && sc.dataOwner("h1", "rate:"+k) == "h3" {
			rrKey = k
		}
	}
	ctx := context.Background()
	var clients []*redis.Client
	for i := range conns {
		c := redis.NewClient(&redis.Options{Addr: sc.nodes[ids[i%3]].Server.RespAddr(), Protocol: 2,
			MaxRetries: -1, PoolSize: 1, ReadTimeout: time.Minute, WriteTimeout: time.Minute})
		t.Cleanup(func() { c.Close() })
		if err := c.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
	}
	var (
		mu                sync.Mutex
		counts            []int64 // every INCR's answer
		admitted, unknown int
		gcraAdmitted      int
		failures          []string
	)
	fail := func(s string) {
		mu.Lock()
		defer mu.Unlock()
		if len(failures) < 20 {
			failures = append(failures, s)
		}
	}
	// retryable: not decided (TRYAGAIN, LOADING), asked again.
	retryable := func(err error) bool {
		return strings.HasPrefix(err.Error(), "TRYAGAIN ") || strings.HasPrefix(err.Error(), "LOADING ")
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := redis_rate.NewLimiter(c)
			<-start
			// Each connection calls until it has been denied on both keys
			// twice: together they ask well past the limit.
			fwDenied, rrDenied := 0, 0
			for tries := 0; fwDenied < 2 || rrDenied < 2; tries++ {
				if tries > 5000 {
					fail(fmt.Sprintf("connection %d: still not denied after %d calls", i, tries))
					return
				}
				if fwDenied < 2 {
					var incr *redis.IntCmd
					_, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
						incr = p.Incr(ctx, fwKey)
						p.ExpireNX(ctx, fwKey, time.Hour)
						return nil
					})
					switch {
					case incr.Err() == nil:
						n := incr.Val()
						mu.Lock()
						counts = append(counts, n)
						if n <= limit {
							admitted++
						}
						mu.Unlock()
						if n > limit {
							fwDenied++
						}
					case retryable(incr.Err()):
					case strings.Contains(incr.Err().Error(), "may have run there"):
						mu.Lock()
						unknown++
						mu.Unlock()
					default:
						fail(fmt.Sprintf("connection %d (%s): INCR: %v (transaction: %v)", i, ids[i%3], incr.Err(), err))
						return
					}
				}
				if rrDenied < 2 {
					res, err := l.Allow(ctx, rrKey, gcra)
					switch {
					case err == nil && res.Allowed == 1:
						mu.Lock()
						gcraAdmitted++
						mu.Unlock()
					case err == nil:
						rrDenied++
					case retryable(err):
					default:
						var re redis.Error
						if errors.As(err, &re) && strings.Contains(err.Error(), "may have run there") {
							mu.Lock()
							unknown++
							mu.Unlock()
							continue
						}
						fail(fmt.Sprintf("connection %d (%s): redis_rate: %v", i, ids[i%3], err))
						return
					}
				}
			}
		}()
	}
	began := time.Now()
	close(start)
	wg.Wait()
	t.Logf("%d connections over three nodes (the window's key on h2, GCRA's on h3): %d INCRs, %d admitted by the window, %d by GCRA, %d outcomes unknown, in %v",
		conns, len(counts), admitted, gcraAdmitted, unknown, time.Since(began).Round(time.Millisecond))
	for _, f := range failures {
		t.Error(f)
	}
	if unknown == 0 && (admitted != limit || gcraAdmitted != limit) || admitted > limit || gcraAdmitted > limit {
		t.Errorf("admitted %d by the fixed window and %d by GCRA, limit %d (%d outcomes unknown)", admitted, gcraAdmitted, limit, unknown)
	}
	// Every count is answered once: none lost, none twice.
	sort.Slice(counts, func(a, b int) bool { return counts[a] < counts[b] })
	for i, n := range counts {
		if unknown == 0 && n != int64(i+1) || i > 0 && n == counts[i-1] {
			t.Fatalf("INCR answers %v… (sorted) are not 1, 2, 3, … each once: at %d, %d", counts[:min(len(counts), i+3)], i, n)
		}
	}
}
