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
	// Marks, if set, is this node's durable record of what it may have
	// spent (spend marks): a call is admitted only up to the mark its
	// counter has on disk, which is extended ahead of the calls, a step
	// at a time, by a goroutine of its own (RunMarks), so that a restart
	// can give back what this life held and did not spend (ReturnPrior).
	Marks *Marks

	caughtUp atomic.Bool

	mu       sync.Mutex
	held     map[string]*held
	wants    map[string]bool
	failedAt int64 // when a proposal last failed
	kick     chan chan struct{}
	markKick chan chan struct{}
	// due holds the counters whose mark is being written; short those
	// with a call short of units (so that neither the writer nor a
	// waiting call looks through every counter).
	due, short map[*held]struct{}
	// spent keeps, of a counter forgotten once all that this life was
	// granted of it was spent and committed, that amount: a counter held
	// again this period counts its grants and marks on from there, as the
	// state machine and the marks file do (a few dozen bytes a counter
	// rather than a held, and no place in the rounds' scans).
	spent map[string]spentRec
	// prior are the lives before this one whose units are not yet given
	// back (ReturnPrior); priorDone: one was given back since the marks
	// file was last rewritten.
	prior     []Life
	priorDone bool
	// closing: the node is stopping and has given back what it held
	// (GiveBack); nothing more is admitted against a quota.
	closing bool
}

// held is what this node holds of one counter in one period.
type held struct {
	key        string
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
	// need is what a call refused here lacked beyond what the node holds
	// (at needAt): asked for whole, and, while the pool is short of it,
	// from the others' idle units (they give them back at once).
	need, needAt int64
	// progressAt is when the need last moved: set, or units came (granted
	// here, or given back by another node).
	progressAt int64
	releaseNow bool // another node is short of units of this counter
	// mark is the spend mark on disk: settled + pending never passes it;
	// markWant is the mark being written.
	mark, markWant int64
}

// spentRec is a forgotten counter's period and what this life spent of
// it, all of it committed.
type spentRec struct{ start, end, base int64 }

// cap is what the node's pending count may reach.
func (h *held) cap() int64 { return h.granted - h.settled - h.releasing }

// markStep is how far ahead of its spending a node writes its spend mark
// (Marks): what a crash may strand of a quota, per counter, beyond the
// cost of a call being decided at that moment: max(1, limit/600), one
// unit of a 600/day quota, 916 of 550,000 a month. A mark is written
// again once less than half a step is left, so that calls rarely wait for
// one.
func markStep(limit int64) int64 { return max(1, limit/600) }

// needFor is how long a refused call's need is asked for: the longest a
// call waits for a reservation (the service's wait); a call waits for
// units while some came within the last needPatience (the others give
// back idle units within a commit or two of learning of the need).
const (
	needFor      = int64(time.Second)
	needPatience = int64(4 * reserveTick)
)

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
	if r.closing {
		return 0
	}
	h := r.held[string(key)]
	if h == nil || h.start != start {
		p, ok := PeriodOfCode(lim.Window)
		if !ok {
			return -1
		}
		txt, _ := p.MarshalText()
		r.drop(h)
		h = &held{key: string(key), start: start, end: end, limit: lim.Burst, period: string(txt)}
		if sp, ok := r.spent[h.key]; ok {
			delete(r.spent, h.key)
			if sp.start == start {
				h.granted, h.settled, h.mark, h.markWant = sp.base, sp.base, sp.base, sp.base
			}
		}
		r.held[h.key] = h
	}
	h.lastUse = now
	h.uses++
	c := h.cap()
	if short := pending + cost - c; short > 0 {
		// This call does not fit: ask for what it lacks, whole.
		if h.need == 0 {
			h.progressAt = now
			r.short[h] = struct{}{}
		}
		h.need, h.needAt = max(short, h.need), now
	}
	// Ask ahead while chunks are large; near the limit (chunks of a
	// unit or two) only when a call does not fit, so that no node holds
	// units it is not using while another needs them.
	if !h.asking && c-pending-cost < h.lastGrant/2 {
		h.asking = true
		r.wants[string(key)] = true
		r.poke(nil)
	}
	if r.Marks != nil {
		// Spend only up to the mark on disk; write the next one ahead.
		spent := h.settled + pending
		step := markStep(h.limit)
		if want := spent + cost + step; h.mark-spent-cost < max(1, step/2) && want > h.markWant {
			h.markWant = want
			r.due[h] = struct{}{}
			r.pokeMarks(nil)
		}
		c = min(c, h.mark-h.settled)
	}
	return c
}

// pokeMarks wakes the marks writer (done, if not nil, is closed after its
// next round).
func (r *Reserver) pokeMarks(done chan struct{}) {
	select {
	case r.markKick <- done:
	default:
		if done != nil {
			close(done)
		}
	}
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
// a call refused for want of reserved units tries again after it. While
// a call here lacks units the pool does not have, it waits on (up to
// wait) for the other nodes to give back their idle ones and asks again;
// and it waits for the spend marks being written. It returns false at
// once while proposals are failing (no quorum).
func (r *Reserver) Reserve(wait time.Duration) bool {
	deadline := time.Now().Add(wait)
	if !r.isCaughtUp() && !r.awaitCatchUp(wait) {
		return false
	}
	r.mu.Lock()
	failing := r.failedAt != 0 && r.Clock()-r.failedAt < failedBackoff
	closing := r.closing
	r.mu.Unlock()
	if closing {
		return false
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	if failing {
		// No reservation can commit now; what is held may still be
		// spent, once its mark is on disk.
		if _, marking := r.waiting(); !marking {
			return false
		}
		done := make(chan struct{})
		r.pokeMarks(done)
		select {
		case <-done:
			return true
		case <-t.C:
			return false
		}
	}
	done := make(chan struct{})
	r.poke(done)
	select {
	case <-done:
	case <-t.C:
		return false
	}
	for {
		short, marking := r.waiting()
		if !short && !marking {
			return true
		}
		if marking {
			done = make(chan struct{})
			r.pokeMarks(done)
		} else {
			done = nil
		}
		select {
		case <-done:
		case <-time.After(reserveTick / 10):
		case <-t.C:
			return !short
		}
		if time.Now().After(deadline) {
			return !short
		}
	}
}

// waiting reports whether a call here lacks units it asked for (short)
// and whether marks are being written.
func (r *Reserver) waiting() (short, marking bool) {
	now := r.Clock()
	r.mu.Lock()
	defer r.mu.Unlock()
	for h := range r.short {
		short = short || h.need > 0 && now-h.needAt < needFor && now-h.progressAt < needPatience && r.mayCome(h.key, h)
	}
	return short, len(r.due) > 0
}

// drop forgets h's place in the sets of counters due a mark or short of
// units (r.mu held).
func (r *Reserver) drop(h *held) {
	if h != nil {
		delete(r.due, h)
		delete(r.short, h)
	}
}

// mayCome reports whether the cluster may yet grant h's need soon: the
// units free and those other nodes hold (idle, or spent and about to be
// committed) cover it (r.mu held).
func (r *Reserver) mayCome(key string, h *held) bool {
	it, ok := r.Committed(key)
	if !ok || it.Start != h.start {
		return true
	}
	free := it.Limit - max(it.Used, it.Reserved)
	others := it.Reserved - it.Used - (h.granted - h.settled)
	return max(free, 0)+max(others, 0) >= h.need
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
	r.held, r.wants, r.kick, r.markKick = map[string]*held{}, map[string]bool{}, make(chan chan struct{}, 64), make(chan chan struct{}, 64)
	r.due, r.short, r.spent = map[*held]struct{}{}, map[*held]struct{}{}, map[string]spentRec{}
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
	for h := range r.short {
		// A call short of units asks again every round while it waits:
		// the others give back idle units when they learn of it.
		if h.need > 0 && now-h.needAt >= needFor {
			h.need = 0
		}
		switch {
		case h.need == 0:
			delete(r.short, h)
		case !h.asking && r.held[h.key] == h:
			h.asking = true
			r.wants[h.key] = true
		}
	}
	for k := range r.wants {
		if h := r.held[k]; h != nil {
			items = append(items, Item{Key: Key(k), Start: h.start, End: h.end, Limit: h.limit, Period: h.period, Used: h.limit, Need: h.need})
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
		now   bool // asked for by a node short of units
	}
	var idles []idle
	r.mu.Lock()
	for k, h := range r.held {
		switch {
		case h.end <= now:
			r.drop(h)
			delete(r.held, k)
		case h.releaseNow && h.need == 0:
			// Another node is short of this counter's units: what is
			// unused here goes back now.
			h.releaseNow = false
			idles = append(idles, idle{k, h.start, h.uses, true})
		case !h.asking && h.need == 0 && (now-h.lastUse >= releaseAfter || now-h.lastUse >= releaseSoon && r.exhausted(k, h)):
			idles = append(idles, idle{k, h.start, h.uses, false})
		}
	}
	r.mu.Unlock()
	for _, c := range idles {
		pending := r.Store.QuotaCount([]byte(c.key), c.start)
		r.mu.Lock()
		h := r.held[c.key]
		if h != nil && h.start == c.start && h.uses != c.uses && c.now {
			h.releaseNow = true // used meanwhile: next round
		}
		if h != nil && h.start == c.start && h.uses == c.uses {
			if unused := h.cap() - pending; unused > 0 {
				h.releasing += unused
				items = append(items, Item{Key: Key(c.key), Start: h.start, End: h.end, Limit: h.limit, Period: h.period, Used: -unused})
			} else if h.granted == h.settled && h.releasing == 0 && pending == 0 && !h.asking {
				// All spent and committed: forgotten, but for what was
				// spent, from which the state machine's record of this
				// life's grants and the marks go on if it is held again.
				if h.granted != 0 && r.Marks != nil {
					// Ended ones go when the marks file is rewritten,
					// which the marks written for them bring about.
					r.spent[c.key] = spentRec{h.start, h.end, h.granted}
				}
				r.drop(h)
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
// this node's own entries, units granted (or, negative, given back); for
// another node's, whether it is short of units this node holds idle (it
// asked for a call's need and got less), or gave units back that a call
// here is short of.
func (r *Reserver) Granted(origin string, items []Item, grants []int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if origin != r.Self {
		for i, it := range items {
			h := r.held[string(it.Key)]
			if h == nil || h.start != it.Start {
				continue
			}
			switch {
			case it.Used > 0 && it.Need > grants[i] && h.need == 0:
				h.releaseNow = true
				r.poke(nil)
			case it.Used < 0 && h.need > 0:
				h.progressAt = r.Clock()
				if !h.asking {
					h.asking = true
					r.wants[string(it.Key)] = true
					r.poke(nil)
				}
			}
		}
		return
	}
	for i, it := range items {
		h := r.held[string(it.Key)]
		if h == nil || h.start != it.Start {
			continue
		}
		g := grants[i]
		h.granted += g
		if it.Used > 0 {
			h.asking, h.lastGrant = false, g
			if g > 0 && h.need > 0 {
				h.need, h.progressAt = max(h.need-g, 0), r.Clock()
			}
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
		r.drop(r.held[string(k)])
		delete(r.held, string(k))
		delete(r.spent, string(k))
	}
}

// RunMarks writes the spend marks calls want (QuotaCap asks a step ahead)
// and syncs them, one batch at a time, until stop; it also rewrites the
// file once it has grown, or once a previous life's units are back.
func (r *Reserver) RunMarks(stop <-chan struct{}) {
	defer r.Marks.Close()
	for {
		var done chan struct{}
		select {
		case <-stop:
			return
		case done = <-r.markKick:
		}
		r.writeMarks()
		if done != nil {
			close(done)
		}
		for more := true; more; {
			select {
			case d := <-r.markKick:
				if d != nil {
					close(d)
				}
			default:
				more = false
			}
		}
	}
}

// writeMarks writes every mark wanted, then lets calls spend up to them.
func (r *Reserver) writeMarks() {
	type want struct {
		h    *held
		mark int64
	}
	var items []Item
	var wants []want
	r.mu.Lock()
	for h := range r.due {
		if h.markWant > h.mark {
			items = append(items, Item{Key: Key(h.key), Start: h.start, End: h.end, Used: h.markWant})
			wants = append(wants, want{h, h.markWant})
		}
		delete(r.due, h)
	}
	rewrite := r.priorDone
	r.priorDone = false
	r.mu.Unlock()
	if len(items) > 0 {
		err := r.Marks.Write(r.Self, items)
		r.mu.Lock()
		for _, w := range wants {
			if err == nil {
				w.h.mark = max(w.h.mark, w.mark)
			} else {
				// Calls wanting it are refused; the next one tries again.
				w.h.markWant = w.h.mark
			}
		}
		r.mu.Unlock()
		if err != nil {
			r.Log.Warn("quota spend marks not written: calls past the last mark are refused", "err", err)
			return
		}
	}
	if rewrite || r.Marks.Crowded() {
		r.rewriteMarks()
	}
}

// rewriteMarks rewrites the marks file with the previous lives not yet
// given back and this life's marks of the counters it holds.
func (r *Reserver) rewriteMarks() {
	r.mu.Lock()
	lives := append([]Life(nil), r.prior...)
	cur := Life{Origin: r.Self}
	for k, h := range r.held {
		if h.mark > 0 {
			cur.Marks = append(cur.Marks, Item{Key: Key(k), Start: h.start, End: h.end, Used: h.mark})
		}
	}
	now := r.Clock()
	for k, sp := range r.spent {
		if sp.end <= now {
			delete(r.spent, k)
		} else if h := r.held[k]; h == nil || h.start != sp.start {
			cur.Marks = append(cur.Marks, Item{Key: Key(k), Start: sp.start, End: sp.end, Used: sp.base})
		}
	}
	r.mu.Unlock()
	if err := r.Marks.Rewrite(append(lives, cur)); err != nil {
		r.Log.Warn("quota spend marks file not rewritten", "err", err)
	}
}

// SetPrior records the lives before this one that the marks file holds
// (OpenMarks), to give their units back (ReturnPrior).
func (r *Reserver) SetPrior(lives []Life) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, l := range lives {
		if l.Origin != r.Self {
			r.prior = append(r.prior, l)
		}
	}
}

// returnChunk is how many counters one QuotaReturn entry names.
const returnChunk = 1000

// ReturnPrior gives back to the cluster, through ret (a QuotaReturn entry
// of a previous life: its marks, and with all its grants elsewhere), the
// units each previous life held and cannot have spent, retrying until
// each is committed or stop. The entries of one life go in order, each
// committed before the next (the last one, with all, must follow the
// marks).
func (r *Reserver) ReturnPrior(ret func(origin string, marks []Item, all bool) (int, error), stop <-chan struct{}) {
	r.mu.Lock()
	lives := append([]Life(nil), r.prior...)
	r.mu.Unlock()
	for _, l := range lives {
		back := 0
		for i := 0; i == 0 || i < len(l.Marks); i += returnChunk {
			chunk := l.Marks[i:min(i+returnChunk, len(l.Marks))]
			all := i+returnChunk >= len(l.Marks)
			for wait := 50 * time.Millisecond; ; wait = min(2*wait, 2*time.Second) {
				n, err := ret(l.Origin, chunk, all)
				if err == nil {
					back += n
					break
				}
				r.Log.Debug("quota units of a previous life not yet given back; will retry", "life", l.Origin, "err", err)
				select {
				case <-stop:
					return
				case <-time.After(wait):
				}
			}
		}
		r.Log.Info("gave back the quota units a previous life of this node held and did not spend", "life", l.Origin, "units", back)
		r.mu.Lock()
		for j, p := range r.prior {
			if p.Origin == l.Origin {
				r.prior = append(r.prior[:j], r.prior[j+1:]...)
				break
			}
		}
		r.priorDone = true
		r.mu.Unlock()
		r.pokeMarks(nil)
	}
}

// GiveBack is for a node that stops: from now on nothing is admitted
// against a quota, and every unit held unused goes back to the pool in one
// reservation entry, waited for up to wait (a node that cannot commit it
// leaves it to its next life, which gives back what it held past its
// marks). It returns the units offered back.
func (r *Reserver) GiveBack(wait time.Duration) int64 {
	type counter struct {
		key   string
		start int64
	}
	r.mu.Lock()
	r.closing = true
	var cs []counter
	for k, h := range r.held {
		if h.cap() > 0 {
			cs = append(cs, counter{k, h.start})
		}
	}
	r.mu.Unlock()
	// No call is admitted any more (QuotaCap answers 0 under the lock a
	// call holds while it counts), so the pending counts read now stay.
	var items []Item
	var back int64
	for _, c := range cs {
		pending := r.Store.QuotaCount([]byte(c.key), c.start)
		r.mu.Lock()
		if h := r.held[c.key]; h != nil && h.start == c.start {
			if unused := h.cap() - pending; unused > 0 {
				h.releasing += unused
				back += unused
				items = append(items, Item{Key: Key(c.key), Start: h.start, End: h.end, Limit: h.limit, Period: h.period, Used: -unused})
			}
		}
		r.mu.Unlock()
	}
	if len(items) == 0 {
		return 0
	}
	done := make(chan error, 1)
	go func() { done <- r.Propose(items) }()
	select {
	case err := <-done:
		if err != nil {
			r.Log.Debug("quota units not given back at stop; the next start gives them back", "err", err)
		}
	case <-time.After(wait):
	}
	return back
}
