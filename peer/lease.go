package peer

import (
	"context"
	"encoding/binary"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice/engine"
)

// leaser runs this node's side of the token leases (engine/lease.go): it
// keeps the store's owners in step with the members, sends the leases'
// requests for tokens to each bucket's owner as RL.LEASE batches (one in
// flight per owner), applies the grants, and gives expired tokens back.
type leaser struct {
	n       *Node
	client  *Client
	store   *engine.Store // the node's buckets, which hold the leases
	clock   func() int64  // the service clock
	wake    chan struct{}
	done    chan ownerReply
	queued  map[string]map[string]*leaseItem // owner id → bucket → request
	busy    map[string]bool
	notTill map[string]int64 // owner id → ns before which not to ask again
	downTil map[string]int64 // owner id → ns until which it counts as down

	asked, granted, returned prometheus.Counter
	failed                   prometheus.Counter
}

type leaseItem struct {
	space  engine.Space
	key    []byte
	lim    engine.Limit
	tokens int64
	owed   int64
}

type ownerReply struct {
	owner string
	items []*leaseItem
	raw   []byte
	err   error
}

// leaseMaxBatch bounds the buckets of one RL.LEASE request.
const leaseMaxBatch = 4096

func newLeaser(n *Node, client *Client) *leaser {
	l := &leaser{n: n, client: client, store: n.Service.Store, clock: n.Service.Clock, wake: make(chan struct{}, 1), done: make(chan ownerReply, 16),
		queued: map[string]map[string]*leaseItem{}, busy: map[string]bool{}, notTill: map[string]int64{}, downTil: map[string]int64{},
		asked:    prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_lease_requests_total", Help: "RL.LEASE requests sent to bucket owners."}),
		granted:  prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_lease_tokens_granted_total", Help: "Tokens owners granted to this node's leases."}),
		returned: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_lease_tokens_returned_total", Help: "Unused leased tokens this node gave back to their owners."}),
		failed:   prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_lease_requests_failed_total", Help: "RL.LEASE requests that failed (owner unreachable or refusing); its buckets are then limited locally for a second."}),
	}
	n.Registry.MustRegister(l.asked, l.granted, l.returned, l.failed)
	l.store.SetWake(l.wake)
	return l
}

func (l *leaser) run() {
	store, clock := l.store, l.clock
	self := l.n.Raft.ID()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	var members []string
	lastExpiry := int64(0)
	for {
		select {
		case <-l.n.Stop:
			l.client.Close()
			return
		case r := <-l.done:
			l.finish(r)
		case <-l.wake:
		case <-tick.C:
		}
		now := clock()
		if ids := l.memberIDs(); !sameIDs(ids, members) {
			members = ids
			store.SetOwners(self, members)
			// A key's backup may have changed: its slots' copies go there.
			go l.n.Service.ReplicateSlots()
		}
		if len(members) < 2 {
			continue // a node alone owns every bucket: no leases to tend
		}
		for id, till := range l.downTil {
			if now >= till {
				store.SetOwnerDown(id, false)
				delete(l.downTil, id)
			}
		}
		store.Wants(now, func(w *engine.Want) {
			owner, mine := store.Owner(w.Space, w.Key)
			if mine {
				return
			}
			q := l.queued[owner]
			if q == nil {
				q = map[string]*leaseItem{}
				l.queued[owner] = q
			}
			k := string(rune(w.Space)) + string(w.Key)
			if it := q[k]; it != nil {
				it.tokens = min(it.tokens+w.Tokens, w.Limit.Burst)
				it.owed += w.Owed
				it.lim = w.Limit
				return
			}
			q[k] = &leaseItem{space: w.Space, key: append([]byte(nil), w.Key...), lim: w.Limit, tokens: w.Tokens, owed: w.Owed}
		})
		for owner, q := range l.queued {
			if len(q) == 0 || l.busy[owner] || now < l.notTill[owner] {
				continue
			}
			items := make([]*leaseItem, 0, min(len(q), leaseMaxBatch))
			for k, it := range q {
				if len(items) == leaseMaxBatch {
					break
				}
				items = append(items, it)
				delete(q, k)
			}
			l.busy[owner] = true
			go l.send(owner, items)
		}
		if now-lastExpiry >= int64(50*time.Millisecond) {
			lastExpiry = now
			l.giveBack(now)
		}
	}
}

func (l *leaser) memberIDs() []string {
	st := l.n.Raft.State()
	ids := make([]string, 0, len(st.Members))
	for id := range st.Members {
		ids = append(ids, id)
	}
	return ids
}

func sameIDs(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	seen := make(map[string]bool, len(a))
	for _, x := range a {
		seen[x] = true
	}
	for _, x := range b {
		if !seen[x] {
			return false
		}
	}
	return true
}

// send asks owner for tokens for items and reports back to run.
func (l *leaser) send(owner string, items []*leaseItem) {
	r := ownerReply{owner: owner, items: items}
	m, ok := l.n.Raft.State().Members[owner]
	if !ok {
		r.err = errors.New("not a member")
	} else {
		buf := []byte{engine.SyncFormat}
		for _, it := range items {
			buf = engine.AppendWant(buf, it.space, it.key, &it.lim, it.tokens, it.owed)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		r.raw, r.err = l.client.DoContext(ctx, m.RespAddr, [][]byte{[]byte("RL.LEASE"), []byte(l.n.Raft.ID()), buf})
		cancel()
		if r.err == nil {
			r.err = replyError(r.raw)
		}
	}
	l.asked.Inc()
	select {
	case l.done <- r:
	case <-l.n.Stop:
	}
}

// finish applies an owner's grants; a failed owner is limited locally for
// a second.
func (l *leaser) finish(r ownerReply) {
	store := l.store
	now := l.clock()
	l.busy[r.owner] = false
	body, ok := bulkBody(r.raw)
	if r.err != nil || !ok {
		l.failed.Inc()
		l.n.Log.Debug("lease", "owner", r.owner, "err", r.err)
		store.SetOwnerDown(r.owner, true)
		l.downTil[r.owner] = now + int64(time.Second)
		return
	}
	least := int64(-1)
	any := false
	for _, it := range r.items {
		got, ttl, retry, left, rest, err := decodeGrant(body)
		if err != nil {
			l.failed.Inc()
			return
		}
		body = rest
		if got > 0 {
			any = true
			l.granted.Add(float64(got))
			store.Grant(now, it.space, it.key, &it.lim, got, now+ttl, left)
			continue
		}
		store.Grant(now, it.space, it.key, &it.lim, 0, now+retry, left) // left: what the owner's bucket keeps
		if retry > 0 && (least < 0 || retry < least) {
			least = retry
		}
	}
	if !any && least > 0 {
		// Nothing to give yet: ask again when the owner expects tokens,
		// within 20 ms.
		l.notTill[r.owner] = now + min(least, int64(20*time.Millisecond))
	}
}

// giveBack returns expired leases' tokens to their owners.
func (l *leaser) giveBack(now int64) {
	store := l.store
	byOwner := map[string][]byte{}
	store.Expired(now, func(space engine.Space, key []byte, lim *engine.Limit, n int64) {
		owner, mine := store.Owner(space, key)
		if mine {
			return
		}
		b := byOwner[owner]
		if b == nil {
			b = []byte{engine.SyncFormat}
		}
		byOwner[owner] = engine.AppendDelta(b, space, key, lim, n)
		l.returned.Add(float64(n))
	})
	for owner, b := range byOwner {
		m, ok := l.n.Raft.State().Members[owner]
		if !ok {
			continue
		}
		go func(addr string, b []byte) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			l.client.DoContext(ctx, addr, [][]byte{[]byte("RL.LEASE"), []byte(l.n.Raft.ID()), []byte("RETURN"), b})
		}(m.RespAddr, b)
	}
}

func decodeGrant(b []byte) (got, ttl, retry, left int64, rest []byte, err error) {
	var v [4]uint64
	for i := range v {
		x, n := binary.Uvarint(b)
		if n <= 0 || x > 1<<62 {
			return 0, 0, 0, 0, nil, errors.New("malformed RL.LEASE reply")
		}
		v[i], b = x, b[n:]
	}
	return int64(v[0]), int64(v[1]), int64(v[2]), int64(v[3]), b, nil
}
