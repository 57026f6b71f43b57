package raftfsm

import (
	"context"
	"sync"
	"time"
)

// Every node, leader or not, probes the other members of its Raft
// configuration: a PING to each one's RESP address every ProbeInterval,
// each bounded by ProbeInterval. A member whose probes have failed without
// a break for UnreachableAfter is unreachable (RL.CLUSTER NODES,
// /v1/cluster and the console show it so); its first answer clears that.

const (
	defaultProbeInterval    = time.Second
	defaultUnreachableAfter = 2 * time.Second
)

// reach is what the probes found: for each member whose last probe
// failed, since when its probes have failed.
type reach struct {
	mu        sync.Mutex
	failSince map[string]time.Time
}

// record notes the outcome of one round of probes started at now: ok[id]
// for each member probed. Members not probed (no longer in the
// configuration) are forgotten.
func (r *reach) record(now time.Time, ok map[string]bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.failSince == nil {
		r.failSince = map[string]time.Time{}
	}
	for id := range r.failSince {
		if _, probed := ok[id]; !probed {
			delete(r.failSince, id)
		}
	}
	for id, answered := range ok {
		_, failing := r.failSince[id]
		switch {
		case answered:
			delete(r.failSince, id)
		case !failing:
			r.failSince[id] = now
		}
	}
}

// unreachable reports whether id's probes have failed since at least
// after before now.
func (r *reach) unreachable(id string, now time.Time, after time.Duration) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	since, failing := r.failSince[id]
	return failing && now.Sub(since) >= after
}

// probe runs the rounds of probes until the node stops.
func (n *Node) probe() {
	defer n.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-n.stop
		cancel()
	}()
	t := time.NewTicker(n.opts.ProbeInterval)
	defer t.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-t.C:
			n.probeOnce(ctx, time.Now())
		}
	}
}

// probeOnce PINGs every other member of the configuration at once and
// records the outcomes. A member without a RESP address on record yet
// (joining) is not probed, and counts as answering.
func (n *Node) probeOnce(ctx context.Context, now time.Time) {
	servers, err := n.Servers()
	if err != nil {
		return
	}
	members := n.fsm.State().Members
	ok := make(map[string]bool, len(servers))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, s := range servers {
		id := string(s.ID)
		addr := members[id].RespAddr
		if id == n.opts.ID || addr == "" {
			mu.Lock()
			ok[id] = true
			mu.Unlock()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			pctx, cancel := context.WithTimeout(ctx, n.opts.ProbeInterval)
			err := n.remote.Ping(pctx, addr)
			cancel()
			mu.Lock()
			ok[id] = err == nil
			mu.Unlock()
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		return // stopping: a cancelled probe says nothing of the member
	}
	n.reach.record(now, ok)
}

// Unreachable reports whether the member id has not answered this node's
// probes for UnreachableAfter.
func (n *Node) Unreachable(id string) bool {
	return n.reach.unreachable(id, time.Now(), n.opts.UnreachableAfter)
}
