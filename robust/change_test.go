package robust

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// changeLoad is the traffic of a membership nemesis: callers on every node
// sending one call in a loop, each call's outcome counted, and an error
// counted against the node unless the node is under a fault (marked by the
// nemesis from just before the fault until the node decides again).
type changeLoad struct {
	admitted atomic.Int64
	refused  atomic.Int64
	loading  atomic.Int64
	faulted  []atomic.Bool // per node: under a fault now
	mu       sync.Mutex
	errs     []string // errors on nodes under no fault
	stop     chan struct{}
	wg       sync.WaitGroup
	pace     time.Duration // between a caller's calls
}

// run starts per callers on every node of c, each sending call in a loop.
func (l *changeLoad) run(c *cluster, per int, call []any) {
	l.faulted = make([]atomic.Bool, len(c.nodes))
	l.stop = make(chan struct{})
	for _, n := range c.nodes {
		for i := 0; i < per; i++ {
			l.wg.Add(1)
			go func() {
				defer l.wg.Done()
				for {
					select {
					case <-l.stop:
						return
					default:
					}
					faulted := l.faulted[n.idx].Load()
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					v, err := n.client.Do(ctx, call...).Slice()
					cancel()
					switch {
					case err == nil && len(v) > 0 && v[0] == int64(1):
						l.admitted.Add(1)
					case err == nil:
						l.refused.Add(1)
					case strings.HasPrefix(err.Error(), "LOADING "):
						l.loading.Add(1)
						if !faulted && !l.faulted[n.idx].Load() {
							l.fail(fmt.Sprintf("%s: %v (under no fault)", n.id, err))
						}
					default:
						if !faulted && !l.faulted[n.idx].Load() {
							l.fail(fmt.Sprintf("%s: %v", n.id, err))
						}
						time.Sleep(20 * time.Millisecond) // a node that is down
					}
					time.Sleep(l.pace)
				}
			}()
		}
	}
}

func (l *changeLoad) fail(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.errs) < 20 {
		l.errs = append(l.errs, s)
	}
}

func (l *changeLoad) end() {
	close(l.stop)
	l.wg.Wait()
}

// deciding waits until n decides a limiting call again (it answers
// without LOADING): it has caught up with the cluster.
func deciding(n *node) error {
	return eventually(60*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		return n.client.Do(ctx, "RL.ACQUIRE", "change/probe", "RATE", 1000000).Err()
	})
}

// decidingCluster starts three nodes and waits until each decides.
func decidingCluster(t *testing.T) *cluster {
	t.Helper()
	c := newCluster(t, nil)
	c.startAll()
	for _, n := range c.nodes {
		if err := deciding(n); err != nil {
			t.Fatalf("%s: %v", n.id, err)
		}
	}
	return c
}

// TestRollingRestartUnderLoad drives a calendar quota of 600 a day from
// every node while the cluster goes through what a deployment does to it: a
// rolling restart (SIGTERM, restart on the data directory, wait until the
// node decides again, next node), then a crash loop (one node killed with
// kill -9 and restarted at once, three times), then the leader killed. The
// quota is driven until every node refuses it. Checked: the cluster never
// admits more than 600; it admits at least 600 less one step of the spend
// marks (max(1, 600/600) = 1) per restart (docs/cluster.md, "Calendar
// quotas in a cluster"); no call errs on a node under no fault, and a node
// answers LOADING only while it restarts.
func TestRollingRestartUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-process cluster and restarts every node; skipped under -short")
	}
	c := decidingCluster(t)
	const quota = 600
	call := []any{"RL.ACQUIRE", "change/quota", "RATE", 1000000, "QUOTA", quota, "PER", "day"}
	// Six callers, each a call every 200 ms: the quota lasts through the
	// restarts.
	l := changeLoad{pace: 200 * time.Millisecond}
	l.run(c, 2, call)
	defer func() {
		select {
		case <-l.stop:
		default:
			l.end()
		}
	}()
	// A sixth of the quota before the first restart.
	if err := eventually(60*time.Second, func() error {
		if a := l.admitted.Load(); a < quota/6 {
			return fmt.Errorf("%d admitted", a)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	restarts := 0
	restart := func(n *node, how syscall.Signal, wait bool) {
		t.Helper()
		l.faulted[n.idx].Store(true)
		if how == syscall.SIGKILL {
			n.kill()
		} else {
			if err := n.signal(how); err != nil {
				t.Fatal(err)
			}
			n.mu.Lock()
			exited := n.exited
			n.mu.Unlock()
			select {
			case <-exited:
			case <-time.After(60 * time.Second):
				t.Fatalf("%s did not stop within 60 s of %v", n.id, how)
			}
		}
		restarts++
		if err := n.start(t, c.bin); err != nil {
			t.Fatal(err)
		}
		if wait {
			if err := deciding(n); err != nil {
				t.Fatalf("%s after restart: %v", n.id, err)
			}
			l.faulted[n.idx].Store(false)
		}
	}
	for _, n := range c.nodes {
		restart(n, syscall.SIGTERM, true)
		t.Logf("%s restarted (SIGTERM): %d admitted so far", n.id, l.admitted.Load())
	}
	x := c.nodes[1]
	for i := 0; i < 3; i++ {
		restart(x, syscall.SIGKILL, i == 2)
	}
	t.Logf("%s crash-looped three times: %d admitted so far", x.id, l.admitted.Load())
	ld, err := c.leader(60 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	restart(ld, syscall.SIGKILL, true)
	t.Logf("the leader %s killed and restarted: %d admitted so far", ld.id, l.admitted.Load())
	// Drive on until the quota is spent: every node refuses 50 calls in a
	// row, or 90 s pass. A node that admits is asked again at once.
	done := eventually(90*time.Second, func() error {
		var last error
		for _, n := range c.nodes {
			for refused := 0; refused < 50; {
				ok, err := acquireQuota(n.client, "change/quota", quota)
				if err != nil {
					return fmt.Errorf("%s: %v", n.id, err)
				}
				if ok {
					if l.admitted.Add(1) > int64(quota) {
						return nil // over the quota: failed below
					}
					last = fmt.Errorf("%s still admits", n.id)
					refused = 0
				} else {
					refused++
				}
			}
		}
		return last
	})
	l.end()
	admitted := l.admitted.Load()
	t.Logf("%d restarts; %d admitted, %d refused, %d answered LOADING while a node restarted", restarts, admitted, l.refused.Load(), l.loading.Load())
	for _, e := range l.errs {
		t.Errorf("error on a node under no fault: %s", e)
	}
	if admitted > quota {
		t.Fatalf("the cluster admitted %d against a quota of %d", admitted, quota)
	}
	if done != nil {
		t.Fatalf("the quota was not spent within 90 s: %v (%d admitted)", done, admitted)
	}
	if admitted < int64(quota-restarts) {
		t.Fatalf("the cluster admitted %d of %d after %d restarts: more than one unit stranded per restart", admitted, quota, restarts)
	}
}

// TestLLMBudgetThroughACrash runs the plan of docs/llm.md — tokens per
// minute, requests per minute, a monthly quota of 550,000 tokens and 5
// calls in flight, per tenant — with 20 workers reserving an estimate of
// 2000 tokens and settling what they used (500–2000), spread over three
// nodes; halfway, one node is killed (kill -9) and restarted. The workers
// then spend the month with smaller calls until every node refuses. The
// tokens the cluster admitted (each settled call's actual use, and the
// estimate of a call whose node died before it settled: it stays charged)
// are never more than the month, and the crash strands at most 1 % of it;
// the calls in flight, counted by the workers, never pass 5.
func TestLLMBudgetThroughACrash(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-process cluster and kills a node; skipped under -short")
	}
	c := decidingCluster(t)
	const month, limit = 550000, 5
	ctx := context.Background()
	plan := fmt.Sprintf(`{"scope":"user","sustained":{"rate":100000000,"window":"minute"},"requests":{"rate":1000000,"window":"minute"},"quota":{"limit":%d,"period":"month"},"concurrency":%d}`, month, limit)
	if err := c.nodes[0].client.Do(ctx, "RL.BUDGET", "SET", "llm", plan).Err(); err != nil {
		t.Fatal(err)
	}
	for _, n := range c.nodes {
		n := n
		if err := eventually(30*time.Second, func() error {
			_, err := n.client.Do(ctx, "RL.BUDGET", "GET", "llm").Result()
			return err
		}); err != nil {
			t.Fatalf("%s: %v", n.id, err)
		}
	}
	var (
		used, inFlight, maxInFlight atomic.Int64
		faulted                     []atomic.Bool = make([]atomic.Bool, len(c.nodes))
		mu                          sync.Mutex
		errs                        []string
	)
	fail := func(s string) {
		mu.Lock()
		defer mu.Unlock()
		if len(errs) < 20 {
			errs = append(errs, s)
		}
	}
	// one reserves cost on n, holds it for hold and settles a use of at
	// most cost. It answers whether the call was admitted, and the error
	// of a call that got none (an error on a node under no fault is
	// recorded as a failure).
	one := func(n *node, cost, use int64, hold time.Duration) (bool, error) {
		faultedBefore := faulted[n.idx].Load()
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		v, err := n.client.Do(cctx, "RL.RESERVE", "llm", "KEY", "acme", "COST", cost, "TTL", 5000).Slice()
		if err != nil {
			if !faultedBefore && !faulted[n.idx].Load() && !strings.HasPrefix(err.Error(), "TRYAGAIN ") {
				fail(fmt.Sprintf("%s RL.RESERVE: %v", n.id, err))
			}
			return false, err
		}
		if v[0] != int64(1) {
			return false, nil
		}
		if f := inFlight.Add(1); f > maxInFlight.Load() {
			maxInFlight.Store(f)
		}
		time.Sleep(hold)
		inFlight.Add(-1)
		id := v[len(v)-1]
		if err := n.client.Do(cctx, "RL.SETTLE", id, "ACTUAL", use).Err(); err != nil {
			// The node died with the reservation: its estimate stays
			// charged.
			used.Add(cost)
			return true, nil
		}
		used.Add(use)
		return true, nil
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < 20; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			n := c.nodes[w%3]
			for i := int64(0); ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				// A call runs 80–120 ms: with 5 in flight the month lasts
				// about ten seconds, so the crash comes with half of it
				// left.
				use := 500 + (i*137+int64(w)*71)%1501
				if ok, err := one(n, 2000, use, time.Duration(80+use%40)*time.Millisecond); err != nil {
					time.Sleep(20 * time.Millisecond)
				} else if !ok {
					time.Sleep(2 * time.Millisecond)
				}
			}
		}(w)
	}
	if err := eventually(120*time.Second, func() error {
		if u := used.Load(); u < month/2 {
			return fmt.Errorf("%d tokens used", u)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	x := c.nodes[2]
	faulted[x.idx].Store(true)
	x.kill()
	t.Logf("%s killed at %d tokens used", x.id, used.Load())
	if err := x.start(t, c.bin); err != nil {
		t.Fatal(err)
	}
	if err := deciding(x); err != nil {
		t.Fatal(err)
	}
	faulted[x.idx].Store(false)
	t.Logf("%s back at %d tokens used", x.id, used.Load())
	// The large calls go on until every node refuses them, then smaller
	// ones spend what is left, each settled at once.
	// A node that admits is asked again at once, so the rest is spent as
	// fast as the nodes grant it; the month is spent when every node
	// refuses ten calls in a row.
	spent := func(cost int64) error {
		deadline := time.Now().Add(120 * time.Second)
		for {
			var last error
			for _, n := range c.nodes {
				for refused := 0; refused < 10 && time.Now().Before(deadline); {
					ok, err := one(n, cost, cost, 0)
					switch {
					case err != nil:
						last = fmt.Errorf("%s: %v", n.id, err)
						refused = 10
					case ok && used.Load() > month:
						return nil // over the month: failed below
					case ok:
						last = fmt.Errorf("%s still admits %d", n.id, cost)
						refused = 0
					default:
						refused++
					}
				}
			}
			if last == nil {
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("after 2m0s: %v", last)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	err := spent(2000)
	close(stop)
	wg.Wait()
	if err == nil {
		for _, cost := range []int64{100, 1} {
			if err = spent(cost); err != nil {
				break
			}
		}
	}
	u := used.Load()
	t.Logf("%d of %d tokens admitted (%.2f %% stranded); at most %d in flight", u, month, 100*float64(month-u)/month, maxInFlight.Load())
	for _, e := range errs {
		t.Errorf("error on a node under no fault: %s", e)
	}
	if u > month {
		t.Fatalf("the cluster admitted %d tokens against a month of %d", u, month)
	}
	if err != nil {
		t.Fatalf("the month was not spent: %v", err)
	}
	if u < month*99/100 {
		t.Fatalf("the crash stranded %d of %d tokens, more than 1 %%", month-u, month)
	}
	if m := maxInFlight.Load(); m > limit {
		t.Fatalf("%d calls in flight against a concurrency of %d", m, limit)
	}
}
