// Package reserve holds the open reservations of one node (RL.RESERVE):
// what each one charged, when it expires, and the concurrency slots they
// take. It decides nothing about tokens — limiter charges and settles the
// buckets through the engine — and reads no clock: time is an argument of
// every call. See DESIGN.md.
package reserve

import (
	"slices"
	"strconv"
	"sync"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/fault"
)

// Level is one request a reservation charged: enough to give tokens back
// or charge more later, whatever the budget tree has become since.
type Level struct {
	Space engine.Space
	// PerCall: the level counted the call (1), not its cost; a
	// settlement leaves it as it is and a release gives the 1 back. (Next
	// to Space, in the padding before Key.)
	PerCall    bool
	Key        []byte // in the hold's arena
	Limit      engine.Limit
	Start, End int64  // a quota counter's period
	Name       []byte // what limited_by reports for it, in the arena
}

// Request returns the level as an engine request of cost 0.
func (l *Level) Request() engine.Request {
	return engine.Request{Space: l.Space, Key: l.Key, Limit: &l.Limit, PeriodStart: l.Start, PeriodEnd: l.End}
}

// Hold is one open reservation. Its fields are the caller's to fill
// between Open and Commit; after Commit they change only through the Store.
type Hold struct {
	Estimate int64
	Levels   []Level
	Expires  int64 // Unix ns
	// Label is the metrics label of the budget it was charged to
	// ("inline" for the inline form).
	Label string
	// Waited: the call had WAIT, so it was charged to this node's own
	// buckets rather than a lease (engine.Store.RefundWaited).
	Waited bool

	id    uint64
	tag   uint64 // the id's unguessable half
	key   string // the concurrency key of its slot, "" for none
	arena []byte
	group *group
	gi    int // index in group.held
	hi    int // index in the expiry heap; -1 when not in it
}

// Grow makes room for levels more levels and bytes more key and name
// bytes, so that AddLevel allocates once per hold rather than per level.
func (h *Hold) Grow(levels, bytes int) {
	h.Levels = slices.Grow(h.Levels, levels)
	h.arena = slices.Grow(h.arena, bytes)
}

// AddLevel copies a charged request and its name into the hold.
func (h *Hold) AddLevel(r *engine.Request, name []byte) {
	k := len(h.arena)
	h.arena = append(append(h.arena, r.Key...), name...)
	h.Levels = append(h.Levels, Level{Space: r.Space, Limit: *r.Limit, Start: r.PeriodStart, End: r.PeriodEnd,
		Key: h.arena[k : k+len(r.Key) : k+len(r.Key)], Name: h.arena[k+len(r.Key):]})
}

// fixLevels points the levels at the arena again after it grew.
func (h *Hold) fixLevels() {
	k := 0
	for i := range h.Levels {
		l := &h.Levels[i]
		nk, nn := len(l.Key), len(l.Name)
		l.Key, l.Name = h.arena[k:k+nk:k+nk], h.arena[k+nk:k+nk+nn:k+nk+nn]
		k += nk + nn
	}
}

// group is the concurrency slots of one key.
type group struct {
	key   string
	limit int64
	held  []*Hold
	// wake is closed (and cleared) when a slot frees, for waiters.
	wake chan struct{}
}

// Store is a node's open reservations. Its methods are safe for
// concurrent use; none does I/O or touches the engine.
type Store struct {
	mu     sync.Mutex
	node   string
	tags   func() uint64
	next   uint64
	max    int
	open   int // held, committed or not
	byID   map[uint64]*Hold
	exp    expiry
	groups map[string]*group

	// Copies of holds other nodes issued (copies.go): key → id → copy,
	// and every copy by id and by expiry. At most max.
	copies   map[string]map[string]*copyEntry
	copyByID map[string]*copyEntry
	cexp     copyExpiry
	ended    endedIDs // copies.go
	// gen counts the times another member asked for a key's holds
	// (Holds): a decision chosen before one is taken again (OpenAt).
	gen uint64
}

// New returns a store for node (the id every reservation carries) holding
// at most max reservations; ids count up from seed, so that a restarted
// node does not hand out the ids of its previous life.
func New(node string, max int, seed uint64) *Store {
	return &Store{node: node, max: max, next: seed, byID: map[uint64]*Hold{}, groups: map[string]*group{},
		copies: map[string]map[string]*copyEntry{}, copyByID: map[string]*copyEntry{}}
}

// Node is the id of the node the store issues reservations for.
func (s *Store) Node() string { return s.node }

// Errors of the store, with their reply codes.
var (
	// ErrFull refuses a reservation while the node holds its maximum.
	ErrFull = &fault.Error{Code: "ERR", Msg: "too many open reservations (--max-reservations): settle or release some, or wait for their TTL to expire them"}
)

// ErrMoved answers OpenAt when another member asked for the key's holds
// since the caller chose to decide here: it must choose again.
var ErrMoved = &fault.Error{Code: "TRYAGAIN", Msg: "the concurrency slots of this key are moving to another node: try again", Retry: true}

// ErrUnknown is the reply to an id this node holds nothing for.
func ErrUnknown(id string) error {
	return fault.New("NORESERVATION", "no open reservation '%s': unknown, or already settled, released or expired", fault.Printable([]byte(id)))
}

// errElsewhere is the reply to an id another node issued.
func errElsewhere(id, node string) error {
	return fault.New("NORESERVATION", "reservation '%s' lives on node '%s': settle, release or renew it there",
		fault.Printable([]byte(id)), fault.Printable([]byte(node)))
}

// SetTags sets where the unguessable half of each id comes from (a
// random source; nil: 0, for tests that want fixed ids). Without it, a
// client could settle or release reservations of others by counting.
func (s *Store) SetTags(f func() uint64) { s.tags = f }

// Format returns the id clients see for h: its number and its tag in 16
// hex digits each, '@', the node.
func (s *Store) Format(h *Hold) string {
	var b [32]byte
	hex16(b[:16], h.id)
	hex16(b[16:], h.tag)
	return string(b[:]) + "@" + s.node
}

// hex16 writes v in 16 lower-case hex digits.
func hex16(b []byte, v uint64) {
	for i := 15; i >= 0; i-- {
		b[i] = "0123456789abcdef"[v&15]
		v >>= 4
	}
}

// idLen is the length of an id before '@'.
const idLen = 32

// IssuedBy returns the node that issued id, when id has the form of a
// reservation id (its number, its tag, '@', the node); ok is false for
// anything else.
func IssuedBy(id string) (node string, ok bool) {
	_, _, node, ok = splitID(id)
	return node, ok && node != ""
}

// splitID reads an id's number, tag and node; ok is false when id does
// not have the form of a reservation id.
func splitID(id string) (n, tag uint64, node string, ok bool) {
	if len(id) <= idLen || id[idLen] != '@' {
		return 0, 0, "", false
	}
	n, e1 := strconv.ParseUint(id[:16], 16, 64)
	tag, e2 := strconv.ParseUint(id[16:idLen], 16, 64)
	if e1 != nil || e2 != nil {
		return 0, 0, "", false
	}
	return n, tag, id[idLen+1:], true
}

// local reads an id this node issued: its number and tag, ok. An id of
// another node is not ok, with the error that says where it lives;
// anything else that is not one of this node's ids is not ok, with no
// error.
func (s *Store) local(id string) (n, tag uint64, ok bool, err error) {
	n, tag, node, ok := splitID(id)
	if !ok {
		return 0, 0, false, nil
	}
	if node != s.node {
		return 0, 0, false, errElsewhere(id, node)
	}
	return n, tag, true, nil
}

// find returns the open hold id names, or nil (s.mu held).
func (s *Store) find(n, tag uint64) *Hold {
	if h := s.byID[n]; h != nil && h.tag == tag {
		return h
	}
	return nil
}

// Len returns the number of open reservations.
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.open
}
