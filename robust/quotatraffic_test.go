package robust

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"time"
)

// chaosQuota is the quota (per day) of TestRobustness's quota traffic; each
// key lives for quotaEpoch, so that many quotas are spent in a run, each
// across faults.
const (
	chaosQuota = 200
	quotaEpoch = 15 * time.Second
)

// acqCall is one RL.ACQUIRE of the quota or lease traffic.
type acqCall struct {
	node         int
	call, ret    int64
	err          string
	notSent      bool
	quota, lease bool
}

// quotaTraffic sends RL.ACQUIRE against quotas (chaos/q<epoch> RATE 1000000
// QUOTA 200 PER day: the quota is the limit) and against a rate limit held
// through leases (chaos/lease RATE 100 BURST 100), to random nodes, and
// counts the calls each quota admitted.
type quotaTraffic struct {
	h        *history
	mu       sync.Mutex
	admitted map[string]int
	calls    []acqCall
}

func newQuotaTraffic(h *history) *quotaTraffic {
	return &quotaTraffic{h: h, admitted: map[string]int{}}
}

// drive sends calls to random nodes until ctx ends; lease picks the lease
// traffic.
func (q *quotaTraffic) drive(ctx context.Context, c *cluster, r *rand.Rand, lease bool) {
	for ctx.Err() == nil {
		if !q.call(c.nodes[r.IntN(len(c.nodes))], lease) {
			pause(ctx, 20*time.Millisecond)
		}
		pause(ctx, time.Duration(2+r.IntN(4))*time.Millisecond)
	}
}

// call sends one RL.ACQUIRE to n and records it; it reports whether the
// call was answered.
func (q *quotaTraffic) call(n *node, lease bool) bool {
	key := fmt.Sprintf("chaos/q%d", time.Duration(q.h.now())/quotaEpoch)
	args := []any{"RL.ACQUIRE", key, "RATE", 1000000, "QUOTA", chaosQuota, "PER", "day"}
	if lease {
		args = []any{"RL.ACQUIRE", "chaos/lease", "RATE", 100, "BURST", 100}
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	call := q.h.now()
	v, err := n.client.Do(ctx, args...).Slice()
	ret := q.h.now()
	cancel()
	a := acqCall{node: n.idx, call: call, ret: ret, quota: !lease, lease: lease}
	if err != nil {
		a.err = err.Error()
		// A call never sent (the dial failed, or go-redis answered with
		// its last dial error while its pool redials) says nothing.
		a.notSent = classify(err) == stNotSent
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.calls = append(q.calls, a)
	if err == nil && !lease && len(v) > 0 && v[0] == int64(1) {
		q.admitted[key]++
	}
	return err == nil
}

// overAdmitted lists the quota keys that admitted more than the quota.
func (q *quotaTraffic) overAdmitted() []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []string
	for k, n := range q.admitted {
		if n > chaosQuota {
			out = append(out, fmt.Sprintf("%s admitted %d calls against a quota of %d", k, n, chaosQuota))
		}
	}
	sort.Strings(out)
	return out
}

// errorsOutsideFaults lists the calls sent that failed on a node under no
// fault for the whole call: RL.ACQUIRE is served by every node, with or without a
// quorum.
func (q *quotaTraffic) errorsOutsideFaults(faults []fault) []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []string
	for _, a := range q.calls {
		if a.err == "" || a.notSent || overlapsFault(op{Node: a.node, Call: a.call, Return: a.ret}, faults, true) {
			continue
		}
		what := "quota"
		if a.lease {
			what = "lease"
		}
		out = append(out, fmt.Sprintf("%s call on n%d [%.3fs, %.3fs]: %s", what, a.node+1, float64(a.call)/1e9, float64(a.ret)/1e9, a.err))
	}
	return out
}

func (q *quotaTraffic) keys() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.admitted)
}

func (q *quotaTraffic) failed() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := 0
	for _, a := range q.calls {
		if a.err != "" {
			n++
		}
	}
	return n
}

// summary counts the calls and the admitted per quota period.
func (q *quotaTraffic) summary() string {
	q.mu.Lock()
	defer q.mu.Unlock()
	var quota, lease, most int
	for _, a := range q.calls {
		if a.quota {
			quota++
		} else {
			lease++
		}
	}
	total := 0
	for _, n := range q.admitted {
		total += n
		most = max(most, n)
	}
	return fmt.Sprintf("%d quota calls over %d periods of %v (%d admitted; at most %d of %d in one), %d lease calls",
		quota, len(q.admitted), quotaEpoch, total, most, chaosQuota, lease)
}
