package quota

import (
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-rl/sluice/engine"
)

// Reservations (docs/cluster.md, "Calendar quotas in a cluster"): in a
// cluster of two or more members, a node admits calls against a quota only
// from units the cluster reserved for it through Raft. The state machine
// grants at most (limit - max(used, reserved)) / 2N units at a time, so
// chunks are large far from the limit and one unit near it, and the sum of
// what it grants never passes the limit: the cluster cannot over-admit.
// A node asks for more when what it holds runs low (and at once, waiting
// briefly, when a call finds none), and gives back what it holds unused
// once a counter has been idle for releaseAfter.
const (
	releaseAfter  = int64(time.Second)
	releaseSoon   = int64(2 * reserveTick) // when the cluster has none left to grant
	reserveTick   = 50 * time.Millisecond
	failedBackoff = int64(time.Second)
)

// Reserver holds the quota units reserved for this node; it is the
// engine's QuotaGate.
type Reserver struct {
	// Self names this process's reservations: the node's id and a mark of
	// this start (Incarnation), so that grants to the node's previous
	// life, replayed from the log after a crash, are never taken for
	// this one's (those units were that life's to admit, and it may have).
	Self  string
	Store *engine.Store
	// Ready reports whether this replica has caught up with the log and
	// knows every member: until it first has, the members and the
	// committed counts it knows may be those of the past (a restart) or
	// too few (a cluster starting), and no call is admitted against a
	// quota.
	Ready   func() bool
	Clock   func() int64
	Members func() int
	// Propose proposes a QuotaReserve entry of items from Self and
	// returns once this replica applied it (QuotaReserved) or it failed.
	Propose func(items []Item) error
	// Committed returns the cluster's committed counter (its used and
	// reserved units).
	Committed func(key string) (Item, bool)
	Log       *slog.Logger
	// Reserved counts reservation entries committed, Failed those that
	// were not (no leader, the leader unreachable or refusing).
	Reserved, Failed Counter

	caughtUp atomic.Bool

	mu       sync.Mutex
	held     map[string]*held
	wants    map[string]bool
	failedAt int64 // when a proposal last failed
	kick     chan chan struct{}
}

// held is what this node holds of one counter in one period.
type held struct {
	start, end int64
	limit      int64
	period     string
	granted    int64 // units granted to this node this period
	settled    int64 // of this node's counts, those committed since
	releasing  int64 // units being given back
	lastGrant  int64
	lastUse    int64
	uses       uint64 // calls decided against it
	asking     bool
}

// cap is what the node's pending count may reach.
func (h *held) cap() int64 { return h.granted - h.settled - h.releasing }

// QuotaCap implements engine.QuotaGate.
func (r *Reserver) QuotaCap(key []byte, lim *engine.Limit, start, end, pending, cost int64) int64 {
	if !r.isCaughtUp() {
		// Refused for now (Result.Reserve): Reserve waits for the replay.
		return 0
	}
	if r.Members() < 2 {
		return -1
	}
	now := r.Clock()
	r.mu.Lock()
	defer r.mu.Unlock()
	h := r.held[string(key)]
	if h == nil || h.start != start {
		p, ok := PeriodOfCode(lim.Window)
		if !ok {
			return -1
		}
		txt, _ := p.MarshalText()
		h = &held{start: start, end: end, limit: lim.Burst, period: string(txt)}
		r.held[string(key)] = h
	}
	h.lastUse = now
	h.uses++
	c := h.cap()
	// Ask ahead while chunks are large; near the limit (chunks of a
	// unit or two) only when a call does not fit, so that no node holds
	// units it is not using while another needs them.
	if !h.asking && c-pending-cost < h.lastGrant/2 {
		h.asking = true
		r.wants[string(key)] = true
		r.poke(nil)
	}
	return c
}

// poke wakes the loop (done, if not nil, is closed after its next round).
func (r *Reserver) poke(done chan struct{}) {
	select {
	case r.kick <- done:
	default:
		if done != nil {
			close(done)
		}
	}
}

// Reserve runs a round of reservations now and waits up to wait for it:
// a call refused for want of reserved units tries again after it. It
// returns false at once while proposals are failing (no quorum).
func (r *Reserver) Reserve(wait time.Duration) bool {
	if !r.isCaughtUp() && !r.awaitCatchUp(wait) {
		return false
	}
	r.mu.Lock()
	failing := r.failedAt != 0 && r.Clock()-r.failedAt < failedBackoff
	r.mu.Unlock()
	if failing {
		return false
	}
	done := make(chan struct{})
	r.poke(done)
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

// isCaughtUp reports whether this replica has caught up with the log
// since the process started; once it has, it stays so.
func (r *Reserver) isCaughtUp() bool {
	if r.caughtUp.Load() {
		return true
	}
	if r.Ready == nil || r.Ready() {
		r.caughtUp.Store(true)
		return true
	}
	return false
}

// awaitCatchUp waits up to wait for the replica to catch up.
func (r *Reserver) awaitCatchUp(wait time.Duration) bool {
	t := time.NewTimer(wait)
	defer t.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !r.isCaughtUp() {
		select {
		case <-t.C:
			return false
		case <-tick.C:
		}
	}
	return true
}

// Incarnation returns a mark that differs between two starts of a node
// (the start time, in nanoseconds, and random bits): Self is the node's
// id, "@", and it.
func Incarnation() string {
	var b [4]byte
	rand.Read(b[:])
	return strconv.FormatInt(time.Now().UnixNano(), 36) + hex.EncodeToString(b[:])
}

// OriginNode returns the node that proposed a reservation: its origin up
// to the last "@" (what follows is an Incarnation), or all of it.
func OriginNode(origin string) string {
	if i := strings.LastIndexByte(origin, '@'); i >= 0 {
		return origin[:i]
	}
	return origin
}

// Init prepares an empty reserver.
func (r *Reserver) Init() {
	r.held, r.wants, r.kick = map[string]*held{}, map[string]bool{}, make(chan chan struct{}, 64)
}

// Run asks for what is wanted and gives back what is idle, until stop.
func (r *Reserver) Run(stop <-chan struct{}) {
	t := time.NewTicker(reserveTick)
	defer t.Stop()
	for {
		var done chan struct{}
		select {
		case <-stop:
			return
		case done = <-r.kick:
		case <-t.C:
		}
		r.round()
		if done != nil {
			close(done)
		}
		// Callers waiting on the same round are answered together.
		for more := true; more; {
			select {
			case d := <-r.kick:
				if d != nil {
					close(d)
				}
			default:
				more = false
			}
		}
	}
}

// round proposes one entry with every want and every release due.
func (r *Reserver) round() {
	now := r.Clock()
	var items []Item
	r.mu.Lock()
	for k := range r.wants {
		if h := r.held[k]; h != nil {
			items = append(items, Item{Key: Key(k), Start: h.start, End: h.end, Limit: h.limit, Period: h.period, Used: h.limit})
		}
	}
	clear(r.wants)
	r.mu.Unlock()
	// Idle counters give back what they hold unused; ended ones are
	// forgotten (the state machine's count went with the period). The
	// pending counts are read without r.mu (an acquire takes its shard's
	// lock, then r.mu): a counter used in between is left for later.
	type idle struct {
		key   string
		start int64
		uses  uint64
	}
	var idles []idle
	r.mu.Lock()
	for k, h := range r.held {
		switch {
		case h.end <= now:
			delete(r.held, k)
		case !h.asking && (now-h.lastUse >= releaseAfter || now-h.lastUse >= releaseSoon && r.exhausted(k, h)):
			idles = append(idles, idle{k, h.start, h.uses})
		}
	}
	r.mu.Unlock()
	for _, c := range idles {
		pending := r.Store.QuotaCount([]byte(c.key), c.start)
		r.mu.Lock()
		h := r.held[c.key]
		if h != nil && h.start == c.start && h.uses == c.uses && !h.asking {
			if unused := h.cap() - pending; unused > 0 {
				h.releasing += unused
				items = append(items, Item{Key: Key(c.key), Start: h.start, End: h.end, Limit: h.limit, Period: h.period, Used: -unused})
			} else if h.granted == h.settled && h.releasing == 0 && pending == 0 {
				delete(r.held, c.key)
			}
		}
		r.mu.Unlock()
	}
	if len(items) == 0 {
		return
	}
	err := r.Propose(items)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err == nil {
		r.failedAt = 0
		r.Reserved.Inc()
		return
	}
	r.failedAt = now
	r.Failed.Inc()
	r.Log.Debug("quota reservation not committed; will retry", "err", err)
	// Wants are asked again by the next call that needs them. A release
	// stays counted as releasing: its outcome is unknown, and if it is
	// applied later, Granted settles it; if never, its units stay unused
	// until the period ends (fewer admitted, never more).
	for _, it := range items {
		if h := r.held[string(it.Key)]; h != nil && h.start == it.Start && it.Used > 0 {
			h.asking = false
		}
	}
}

// exhausted reports whether the cluster has no units of h's period left
// to grant: then units idle here are units another node may be refusing
// calls for.
func (r *Reserver) exhausted(key string, h *held) bool {
	it, ok := r.Committed(key)
	return ok && it.Start == h.start && it.Limit-max(it.Used, it.Reserved) <= 0
}

// Granted records the outcome of a reservation this replica applied: for
// this node's own entries, units granted (or, negative, given back).
func (r *Reserver) Granted(origin string, items []Item, grants []int64) {
	if origin != r.Self {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, it := range items {
		h := r.held[string(it.Key)]
		if h == nil || h.start != it.Start {
			continue
		}
		g := grants[i]
		h.granted += g
		if it.Used > 0 {
			h.asking, h.lastGrant = false, g
		} else {
			h.releasing += it.Used
		}
	}
}

// Settled records that n of this node's counts of key in the period
// starting at start are now committed. It must be called before the
// engine's pending count drops, so that a call never sees more room than
// there is.
func (r *Reserver) Settled(key []byte, start, n int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if h := r.held[string(key)]; h != nil && h.start == start {
		h.settled += n
	}
}

// Forget drops what is held of reset counters: the state machine forgot
// their reservations with them.
func (r *Reserver) Forget(keys []Key) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, k := range keys {
		delete(r.held, string(k))
	}
}
