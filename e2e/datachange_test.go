package e2e

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/engine"
)

// The data keys' promises through change (docs/redis-libraries.md, "Exact
// across nodes"; SPEC §5 and §14): clients on every node drive
// go-redis/redis_rate's GCRA and a fixed window counted with INCR and
// EXPIRE on a set of keys while an owner is killed, a member joins or an
// owner's links are cut. Within one window (a day's GCRA period, an
// hour's window: neither refills during a test however slow the machine)
// a key admits at most its limit once per lost or changed owner, and
// exactly the limit while its owner neither changes nor is lost; every
// error a client sees is one a Redis client handles (TRYAGAIN, LOADING,
// or a relay's "may have run there"), never a wrong answer, and clients
// on running nodes get answers again once the members agree.

// dataLimit is each key's limit.
const dataLimit = 20

// ownersOf places data keys as the nodes do over members (a key's owner is
// the member its bucket in the data space ranks first).
func ownersOf(members ...string) func(dataKey string) string {
	s := engine.New(engine.Options{Shards: 1})
	s.SetOwners(members[0], members)
	var mu sync.Mutex
	return func(k string) string {
		mu.Lock()
		defer mu.Unlock()
		id, _ := s.Owner(engine.SpaceData, []byte(k))
		return id
	}
}

type dataKind int

const (
	gcraKey   dataKind = iota // redis_rate.Allow on the key (data key rate:<name>)
	windowKey                 // INCR and EXPIRE NX in MULTI (data key <name>)
)

func (k dataKind) String() string { return [...]string{"gcra", "window"}[k] }

// loadKey is one key of the load and what it admitted.
type loadKey struct {
	name     string // what the client names
	data     string // the key on the server
	kind     dataKind
	active   atomic.Bool
	admitted atomic.Int64
	denied   atomic.Int64
}

func newKey(kind dataKind, name string) *loadKey {
	k := &loadKey{name: name, data: name, kind: kind}
	if kind == gcraKey {
		k.data = "rate:" + name
	}
	k.active.Store(true)
	return k
}

// pickKeys returns, for each class (a test of a data key: where it lives
// before and after a change), n keys of each kind that pass it.
func pickKeys(t *testing.T, n int, classes map[string]func(dataKey string) bool) map[string][]*loadKey {
	t.Helper()
	out := map[string][]*loadKey{}
	var names []string
	for c := range classes {
		names = append(names, c)
	}
	sort.Strings(names)
	for _, c := range names {
		for _, kind := range []dataKind{gcraKey, windowKey} {
			found := 0
			for i := 0; found < n; i++ {
				if i > 100000 {
					t.Fatalf("no %s key of class %s", kind, c)
				}
				k := newKey(kind, fmt.Sprintf("%s:%s:%d", kind, c, i))
				if classes[c](k.data) {
					out[c] = append(out[c], k)
					found++
				}
			}
		}
	}
	return out
}

func allKeys(m map[string][]*loadKey) []*loadKey {
	var out []*loadKey
	var cs []string
	for c := range m {
		cs = append(cs, c)
	}
	sort.Strings(cs)
	for _, c := range cs {
		out = append(out, m[c]...)
	}
	return out
}

// loadNode is a node of the load: one go-redis client connected to it.
type loadNode struct {
	m   *member
	c   *redis.Client
	lim *redis_rate.Limiter
	// down: its process is killed, frozen or starting, so that a
	// transport error on its own connection is expected; flips counts
	// its changes, so that a call overlapping one is judged leniently.
	down  atomic.Bool
	flips atomic.Int64
	ok    map[*loadKey]*atomic.Int64 // answers
	errs  map[*loadKey]*atomic.Int64 // Redis errors
}

func (n *loadNode) setDown(d bool) { n.down.Store(d); n.flips.Add(1) }

// dataLoad drives every key from every node's client.
type dataLoad struct {
	t     *testing.T
	keys  []*loadKey
	gcra  redis_rate.Limit
	mu    sync.Mutex
	nodes []*loadNode
	stop  chan struct{}
	wg    sync.WaitGroup
	per   int
	// classes counts the errors seen, by kind; bad lists wrong answers
	// and errors no client handles.
	classes map[string]int
	bad     []string
	// seen, if set, is told of every call.
	seen func(n *loadNode, k *loadKey, began, ended time.Time, err error)
}

func newDataLoad(t *testing.T, keys []*loadKey, per int) *dataLoad {
	l := &dataLoad{t: t, keys: keys, per: per, stop: make(chan struct{}), classes: map[string]int{},
		gcra: redis_rate.Limit{Rate: dataLimit, Burst: dataLimit, Period: 24 * time.Hour}}
	t.Cleanup(l.end)
	return l
}

// add starts per callers on m's client.
func (l *dataLoad) add(m *member) *loadNode {
	// No retries of its own and long timeouts: what the node answers, and
	// when, is what the test sees.
	c := redis.NewClient(&redis.Options{Addr: m.resp, Protocol: 2, MaxRetries: -1, DialTimeout: 5 * time.Second,
		ReadTimeout: 2 * time.Minute, WriteTimeout: 2 * time.Minute, PoolSize: l.per + 2})
	l.t.Cleanup(func() { c.Close() })
	n := &loadNode{m: m, c: c, lim: redis_rate.NewLimiter(c), ok: map[*loadKey]*atomic.Int64{}, errs: map[*loadKey]*atomic.Int64{}}
	for _, k := range l.keys {
		n.ok[k], n.errs[k] = new(atomic.Int64), new(atomic.Int64)
	}
	l.mu.Lock()
	l.nodes = append(l.nodes, n)
	l.mu.Unlock()
	for g := range l.per {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for i := g * len(l.keys) / l.per; ; i++ {
				select {
				case <-l.stop:
					return
				default:
				}
				if k := l.keys[i%len(l.keys)]; k.active.Load() {
					l.call(n, k)
				}
				// A breath between calls: the nodes under test share the
				// machine's few cores with the clients.
				time.Sleep(time.Millisecond)
			}
		}()
	}
	return n
}

func (l *dataLoad) node(m *member) *loadNode {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, n := range l.nodes {
		if n.m == m {
			return n
		}
	}
	l.t.Fatalf("%s is not in the load", m.id)
	return nil
}

// call makes one call of k through n and counts its outcome.
func (l *dataLoad) call(n *loadNode, k *loadKey) {
	ctx := context.Background()
	flips, wasDown := n.flips.Load(), n.down.Load()
	began := time.Now()
	var err error
	switch k.kind {
	case gcraKey:
		var res *redis_rate.Result
		if res, err = n.lim.Allow(ctx, k.name, l.gcra); err == nil {
			if res.Remaining < 0 || res.Remaining > dataLimit || res.Allowed > 1 {
				l.fail("%s on %s: %+v", k.name, n.m.id, *res)
			}
			l.count(n, k, res.Allowed == 1)
		}
	case windowKey:
		var incr *redis.IntCmd
		var expire *redis.BoolCmd
		_, err = n.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
			incr = p.Incr(ctx, k.name)
			expire = p.ExpireNX(ctx, k.name, time.Hour)
			return nil
		})
		if incr.Err() == nil {
			// Counted at the owner, whatever became of the EXPIRE.
			if incr.Val() < 1 {
				l.fail("INCR %s on %s: %d", k.name, n.m.id, incr.Val())
			}
			l.count(n, k, incr.Val() <= dataLimit)
			err = expire.Err()
		} else {
			err = incr.Err()
		}
	}
	ended := time.Now()
	if err != nil {
		l.judge(n, k, err, wasDown || n.down.Load() || n.flips.Load() != flips)
	}
	if l.seen != nil {
		l.seen(n, k, began, ended, err)
	}
}

func (l *dataLoad) count(n *loadNode, k *loadKey, admitted bool) {
	if admitted {
		k.admitted.Add(1)
	} else {
		k.denied.Add(1)
	}
	n.ok[k].Add(1)
}

// judge classifies an error: a Redis error a client handles, a transport
// error while the client's own node was down, or a failure.
func (l *dataLoad) judge(n *loadNode, k *loadKey, err error, ownDown bool) {
	msg := err.Error()
	var re redis.Error
	class := ""
	switch {
	case errors.As(err, &re):
		code, _, _ := strings.Cut(msg, " ")
		switch {
		case code == "TRYAGAIN" || code == "LOADING" || code == "CLUSTERDOWN":
			class = code
		case strings.HasPrefix(msg, "ERR the node that keeps this key") && strings.HasSuffix(msg, "the command may have run there"):
			class = "ERR may have run there"
		default:
			l.fail("%s on %s: %v", k.name, n.m.id, err)
			return
		}
		n.errs[k].Add(1)
	case ownDown:
		class = "transport, own node down"
	default:
		l.fail("%s on %s: %v (a transport error from a running node)", k.name, n.m.id, err)
		return
	}
	l.mu.Lock()
	l.classes[class]++
	l.mu.Unlock()
}

func (l *dataLoad) fail(format string, a ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.bad) < 30 {
		l.bad = append(l.bad, fmt.Sprintf(format, a...))
	}
}

// end stops the callers and waits for them.
func (l *dataLoad) end() {
	select {
	case <-l.stop:
		return
	default:
	}
	close(l.stop)
	l.wg.Wait()
}

// mark is a moment of the load: every count so far.
type mark struct {
	ok, errs map[*loadNode]map[*loadKey]int64
	denied   map[*loadKey]int64
}

func (l *dataLoad) mark() mark {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := mark{ok: map[*loadNode]map[*loadKey]int64{}, errs: map[*loadNode]map[*loadKey]int64{}, denied: map[*loadKey]int64{}}
	for _, n := range l.nodes {
		m.ok[n], m.errs[n] = map[*loadKey]int64{}, map[*loadKey]int64{}
		for _, k := range l.keys {
			m.ok[n][k], m.errs[n][k] = n.ok[k].Load(), n.errs[k].Load()
		}
	}
	for _, k := range l.keys {
		m.denied[k] = k.denied.Load()
	}
	return m
}

// changeWait bounds the waits of the load's phases: generous, for a busy
// machine; the conditions, not the time, end them.
const changeWait = 60 * time.Second

// waitAnswered waits until each of ns has had an answer on each of keys
// since m.
func (l *dataLoad) waitAnswered(what string, ns []*loadNode, keys []*loadKey, m mark) {
	l.t.Helper()
	var missing string
	l.waitFor(what, func() bool {
		for _, n := range ns {
			for _, k := range keys {
				if n.ok[k].Load() <= m.ok[n][k] {
					missing = k.name + " on " + n.m.id
					return false
				}
			}
		}
		return true
	}, &missing)
}

// waitRefused waits until each of ns has had a Redis error on one of keys
// since m.
func (l *dataLoad) waitRefused(what string, ns []*loadNode, keys []*loadKey, m mark) {
	l.t.Helper()
	var missing string
	l.waitFor(what, func() bool {
		for _, n := range ns {
			seen := false
			for _, k := range keys {
				seen = seen || n.errs[k].Load() > m.errs[n][k]
			}
			if !seen {
				missing = n.m.id
				return false
			}
		}
		return true
	}, &missing)
}

// waitExhausted waits until each of keys has denied a call since m.
func (l *dataLoad) waitExhausted(what string, keys []*loadKey, m mark) {
	l.t.Helper()
	var missing string
	l.waitFor(what, func() bool {
		for _, k := range keys {
			if k.denied.Load() <= m.denied[k] {
				missing = k.name
				return false
			}
		}
		return true
	}, &missing)
}

func (l *dataLoad) waitFor(what string, cond func() bool, missing *string) {
	l.t.Helper()
	deadline := time.Now().Add(changeWait)
	for !cond() {
		if time.Now().After(deadline) {
			l.report()
			l.t.Fatalf("timed out after %v waiting for %s (still waiting on %s)", changeWait, what, *missing)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// report logs the errors seen and fails on wrong answers.
func (l *dataLoad) report() {
	l.t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.t.Logf("errors seen, by kind: %v", l.classes)
	for _, b := range l.bad {
		l.t.Error(b)
	}
}

// check ends the load and checks every key against its bound: the limit
// times one more than the owners it lost or changed (changes(k)).
func (l *dataLoad) check(changes func(k *loadKey) int) {
	l.t.Helper()
	l.end()
	l.report()
	for _, k := range l.keys {
		got, bound := k.admitted.Load(), int64(dataLimit*(1+changes(k)))
		l.t.Logf("%-22s admitted %3d, denied %5d (bound %d)", k.name, got, k.denied.Load(), bound)
		if got > bound {
			l.t.Errorf("%s admitted %d in one window: more than its limit %d × (1 + %d owners lost or changed)", k.name, got, dataLimit, changes(k))
		}
	}
}

func ids(ms []*member) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.id)
	}
	return out
}

func loadNodes(l *dataLoad, ms []*member) []*loadNode {
	var out []*loadNode
	for _, m := range ms {
		out = append(out, l.node(m))
	}
	return out
}

// dbsize is a node's DBSIZE (its own buckets and data keys).
func dbsize(m *member) (int64, error) {
	return m.c.DBSize(context.Background()).Result()
}

// holdsOnly waits until every node of ms holds exactly the keys of the
// load that owner places on it: an old owner has dropped what it handed
// over, and nothing put a copy back.
func holdsOnly(t *testing.T, ms []*member, keys []*loadKey, owner func(string) string) {
	t.Helper()
	want := map[string]int64{}
	for _, k := range keys {
		want[owner(k.data)]++
	}
	var got string
	deadline := time.Now().Add(changeWait)
	for {
		got = ""
		for _, m := range ms {
			if n, err := dbsize(m); err != nil || n != want[m.id] {
				got += fmt.Sprintf(" %s holds %d keys (%v), owns %d;", m.id, n, err, want[m.id])
			}
		}
		if got == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v:%s", changeWait, got)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// leave removes id through m (an election may refuse it a moment).
func leave(t *testing.T, m *member, id string) {
	t.Helper()
	eventually(t, changeWait, "RL.CLUSTER LEAVE "+id, func() bool {
		err := m.c.Do(context.Background(), "RL.CLUSTER", "LEAVE", id).Err()
		if err != nil && !strings.HasPrefix(err.Error(), "TRYAGAIN") && !strings.HasPrefix(err.Error(), "ERR no node with id") {
			t.Fatalf("RL.CLUSTER LEAVE %s: %v", id, err)
		}
		return err == nil || strings.HasPrefix(err.Error(), "ERR no node with id") // a TRYAGAIN's removal committed after all
	})
}

// An owner is killed (kill -9, the cluster's leader, so that an election
// comes with it) while clients on every node drive keys of every owner,
// then restarts from its data directory with no data keys. Survivors keep
// answering keys whose owner lives and refuse the dead owner's with
// errors a client handles; once it is back every client answers every key
// again, and the dead owner's keys, counted again from zero, admit at
// most twice their limit (once per lost owner), the others exactly theirs.
func TestDataKeysThroughAKilledOwner(t *testing.T) {
	ms, peers := threeNodes(t)
	owner := ownersOf(ids(ms)...)
	victim := leader(t, ms)
	classes := map[string]func(string) bool{}
	for _, m := range ms {
		classes[m.id] = func(k string) bool { return owner(k) == m.id }
	}
	byOwner := pickKeys(t, 2, classes)
	keys := allKeys(byOwner)
	lost := byOwner[victim.id]
	var living []*loadKey
	for _, k := range keys {
		if owner(k.data) != victim.id {
			living = append(living, k)
		}
	}
	l := newDataLoad(t, keys, 2)
	for _, m := range ms {
		l.add(m)
	}
	l.waitExhausted("every key to reach its limit", keys, mark{denied: map[*loadKey]int64{}})

	vn := l.node(victim)
	vn.setDown(true)
	victim.p.kill9()
	t.Logf("killed %s, the leader and owner of %d keys", victim.id, len(lost))
	survivors := loadNodes(l, others(ms, victim))
	m := l.mark()
	l.waitAnswered("the survivors to answer keys whose owner lives", survivors, living, m)
	l.waitRefused("the survivors to refuse the dead owner's keys", survivors, lost, m)

	victim.startWith(t, peers)
	vn.setDown(false)
	m = l.mark()
	l.waitAnswered("every client to answer every key after the restart", l.nodes, keys, m)
	l.waitExhausted("the dead owner's keys to reach their limit again", lost, m)
	l.check(func(k *loadKey) int {
		if owner(k.data) == victim.id {
			return 1
		}
		return 0
	})
}

// An owner is killed and removed (RL.CLUSTER LEAVE): its keys move to the
// survivors, which answer them once both list two members, from zero
// (once per lost owner); the survivors' own keys admit exactly their
// limit throughout.
func TestDataKeysThroughARemovedDeadOwner(t *testing.T) {
	ms, _ := threeNodes(t)
	owner := ownersOf(ids(ms)...)
	victim := others(ms, leader(t, ms))[0] // a follower: LEAVE needs a quorum
	classes := map[string]func(string) bool{}
	for _, m := range ms {
		classes[m.id] = func(k string) bool { return owner(k) == m.id }
	}
	byOwner := pickKeys(t, 2, classes)
	keys := allKeys(byOwner)
	lost := byOwner[victim.id]
	l := newDataLoad(t, keys, 2)
	for _, m := range ms {
		l.add(m)
	}
	l.waitExhausted("every key to reach its limit", keys, mark{denied: map[*loadKey]int64{}})

	vn := l.node(victim)
	vn.setDown(true)
	victim.p.kill9()
	alive := others(ms, victim)
	survivors := loadNodes(l, alive)
	m := l.mark()
	l.waitRefused("the survivors to refuse the dead owner's keys", survivors, lost, m)
	leave(t, alive[0], victim.id)
	listMembers(t, alive, 2)
	l.mu.Lock()
	l.nodes = survivors // the dead node's client is out of the waits below
	l.mu.Unlock()
	m = l.mark()
	l.waitAnswered("the survivors to answer every key once they list two members", survivors, keys, m)
	l.waitExhausted("the dead owner's keys to reach their limit on their new owners", lost, m)
	l.check(func(k *loadKey) int {
		if owner(k.data) == victim.id {
			return 1
		}
		return 0
	})
	holdsOnly(t, alive, keys, ownersOf(ids(alive)...))
}

// A fourth node joins under the load while one of the three others is
// frozen (SIGSTOP), so that it learns of the new member last, after the
// keys' old owners have handed them over and dropped them: resumed, it
// relays by the older member list for a while. Each key the new member
// takes starts again from zero there (at most twice its limit: once per
// changed owner), every other key admits exactly its limit, every client
// answers every key once the four agree, every node holds only the keys
// it owns (the old owner's copy is dropped and nothing puts one back),
// and when the new member leaves again, the keys it took do not come back
// at their old owners with their old counts.
func TestDataKeysThroughAJoin(t *testing.T) {
	ms, _ := threeNodes(t)
	n4 := &member{id: "n4", resp: "127.0.0.1:" + freePort(t), raft: "127.0.0.1:" + freePort(t), dir: t.TempDir()}
	before, after := ownersOf(ids(ms)...), ownersOf(append(ids(ms), n4.id)...)
	classes := map[string]func(string) bool{}
	for _, m := range ms {
		classes[m.id+"-stays"] = func(k string) bool { return before(k) == m.id && after(k) == m.id }
		classes[m.id+"-moves"] = func(k string) bool { return before(k) == m.id && after(k) == n4.id }
	}
	keys := allKeys(pickKeys(t, 1, classes))
	var moved []*loadKey
	for _, k := range keys {
		if after(k.data) == n4.id {
			moved = append(moved, k)
		}
	}
	l := newDataLoad(t, keys, 2)
	for _, m := range ms {
		l.add(m)
	}
	l.waitExhausted("every key to reach its limit", keys, mark{denied: map[*loadKey]int64{}})

	frozen := others(ms, leader(t, ms))[0]
	fn := l.node(frozen)
	fn.setDown(true)
	if err := frozen.p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { frozen.p.cmd.Process.Signal(syscall.SIGCONT) })
	running := others(ms, frozen)
	n4.p = start(t, "--node-id", n4.id, "--resp-addr", n4.resp, "--raft-addr", n4.raft, "--http-addr", "127.0.0.1:0",
		"--data-dir", n4.dir, "--join", running[0].resp)
	n4.c = client(t, n4.resp)
	listMembers(t, append(running, n4), 4)
	// The running old owners hand over and drop the keys n4 took.
	holdsOnly(t, running, keys, after)
	if err := frozen.p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	fn.setDown(false)
	t.Logf("%s frozen while %s joined; resumed", frozen.id, n4.id)
	l.add(n4)
	all := append(append([]*member(nil), ms...), n4)
	listMembers(t, all, 4)
	m := l.mark()
	l.waitAnswered("every client to answer every key once the four agree", l.nodes, keys, m)
	l.waitExhausted("the keys n4 took to reach their limit there", moved, m)
	l.check(func(k *loadKey) int {
		if after(k.data) != before(k.data) {
			return 1
		}
		return 0
	})
	holdsOnly(t, all, keys, after)

	// n4 leaves: the keys it took return to their old owners, which
	// dropped them when they handed them over.
	leave(t, ms[0], n4.id)
	if err := n4.p.stop(); err != nil {
		t.Logf("stopping %s: %v", n4.id, err)
	}
	listMembers(t, ms, 3)
	for _, k := range keys {
		for _, m := range ms {
			var v string
			var err error
			eventually(t, changeWait, "GET "+k.data+" on "+m.id, func() bool {
				v, err = m.c.Get(context.Background(), k.data).Result()
				return err == nil || err == redis.Nil || !strings.HasPrefix(err.Error(), "TRYAGAIN")
			})
			switch {
			case after(k.data) == n4.id && err != redis.Nil:
				t.Errorf("GET %s on %s after %s left: %q %v (want none: its old owner %s dropped it when it moved)", k.data, m.id, n4.id, v, err, before(k.data))
			case after(k.data) != n4.id && (err != nil || v == ""):
				t.Errorf("GET %s on %s, a key that never moved: %q %v", k.data, m.id, v, err)
			}
		}
	}
	var stayed []*loadKey
	for _, k := range keys {
		if after(k.data) == before(k.data) {
			stayed = append(stayed, k)
		}
	}
	holdsOnly(t, ms, stayed, before)
}

// peerCut is a TCP proxy in front of a node's RESP listener that its peers
// reach it through (the node advertises the proxy): cut, it holds every
// byte both ways (a partition; what was held is delivered when it heals,
// as a network's retransmissions would), or resets every connection and
// every new one (a refusing link).
type peerCut struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	cond   *sync.Cond
	held   bool
	reset  bool
	conns  map[net.Conn]bool
	closed bool
}

func newPeerCut(t *testing.T, target string) *peerCut {
	ln, err := net.Listen("tcp", "127.0.0.1:"+freePort(t))
	if err != nil {
		t.Fatal(err)
	}
	p := &peerCut{ln: ln, target: target, conns: map[net.Conn]bool{}}
	p.cond = sync.NewCond(&p.mu)
	t.Cleanup(p.close)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.pipe(c)
		}
	}()
	return p
}

func (p *peerCut) addr() string { return p.ln.Addr().String() }

func (p *peerCut) pipe(c net.Conn) {
	p.mu.Lock()
	if p.reset || p.closed {
		p.mu.Unlock()
		c.Close()
		return
	}
	p.mu.Unlock()
	d, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	p.conns[c], p.conns[d] = true, true
	p.mu.Unlock()
	go p.copy(d, c)
	go p.copy(c, d)
}

func (p *peerCut) copy(dst, src net.Conn) {
	defer func() {
		dst.Close()
		src.Close()
		p.mu.Lock()
		delete(p.conns, dst)
		delete(p.conns, src)
		p.mu.Unlock()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			for p.held && !p.closed {
				p.cond.Wait()
			}
			p.mu.Unlock()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// cut holds (hold) or resets (not hold) the link.
func (p *peerCut) cut(hold bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if hold {
		p.held = true
		return
	}
	p.reset = true
	for c := range p.conns {
		c.Close()
	}
}

func (p *peerCut) heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.held, p.reset = false, false
	p.cond.Broadcast()
}

func (p *peerCut) close() {
	p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	p.cond.Broadcast()
}

// relayBound is how long a call may take to fail while its key's owner
// does not answer: the relay's bound (--script-time-limit plus
// --apply-timeout, 10 s by default) and a new connection's greeting (2 s)
// for each of the two relayed commands of the window's MULTI, with room
// for a busy machine.
const relayBound = 40 * time.Second

// The links between the other nodes and a key's owner are cut while Raft
// between them stays up (its peers reach its RESP port through a proxy,
// which it advertises), first held (a partition), then reset: clients on
// the relaying nodes get an error a client handles changeWait the relay's
// bound for every call on the owner's keys, never an answer, so never an
// admission beyond the limit (a relaying node must not decide the key
// itself); the owner keeps answering its own clients on its keys, fresh
// ones up to their limit; once healed every client answers again, and
// every key admitted exactly its limit (its owner never changed).
func TestDataKeysThroughACutOwner(t *testing.T) {
	var ms []*member
	var peerList []string
	for i := 1; i <= 3; i++ {
		ms = append(ms, &member{id: fmt.Sprintf("n%d", i), resp: "127.0.0.1:" + freePort(t), raft: "127.0.0.1:" + freePort(t), dir: t.TempDir()})
	}
	o := ms[0]
	cut := newPeerCut(t, o.resp)
	for _, m := range ms {
		adv := m.resp
		if m == o {
			adv = cut.addr()
		}
		peerList = append(peerList, m.id+"="+m.raft+"="+adv)
	}
	for _, m := range ms {
		var extra []string
		if m == o {
			extra = []string{"--advertise", cut.addr()}
		}
		m.startWith(t, strings.Join(peerList, ","), extra...)
	}
	leader(t, ms)
	listMembers(t, ms, 3)
	owner := ownersOf(ids(ms)...)
	rounds := []string{"held", "reset"}
	classes := map[string]func(string) bool{
		"owned":  func(k string) bool { return owner(k) == o.id },
		"others": func(k string) bool { return owner(k) != o.id },
	}
	for _, r := range rounds {
		classes["fresh-"+r] = classes["owned"]
	}
	picked := pickKeys(t, 1, classes)
	keys := allKeys(picked)
	for _, r := range rounds {
		for _, k := range picked["fresh-"+r] {
			k.active.Store(false) // first asked while the links are cut
		}
	}
	var owned []*loadKey
	for _, k := range keys {
		if owner(k.data) == o.id {
			owned = append(owned, k)
		}
	}
	l := newDataLoad(t, keys, 3)
	var (
		mu       sync.Mutex
		cutSince time.Time // zero: not cut
		slowest  time.Duration
		answered []string
	)
	l.seen = func(n *loadNode, k *loadKey, began, ended time.Time, err error) {
		mu.Lock()
		defer mu.Unlock()
		if n.m == o || owner(k.data) != o.id {
			return
		}
		if err != nil {
			slowest = max(slowest, ended.Sub(began))
		}
		if cutSince.IsZero() || began.Before(cutSince) {
			return
		}
		if err == nil {
			answered = append(answered, fmt.Sprintf("%s on %s, asked %v after the cut", k.name, n.m.id, began.Sub(cutSince).Round(time.Millisecond)))
		}
	}
	for _, m := range ms {
		l.add(m)
	}
	var active []*loadKey
	for _, k := range keys {
		if k.active.Load() {
			active = append(active, k)
		}
	}
	l.waitExhausted("every key to reach its limit", active, mark{denied: map[*loadKey]int64{}})
	relayers := loadNodes(l, ms[1:])
	for _, r := range rounds {
		m := l.mark()
		mu.Lock()
		cutSince = time.Now()
		mu.Unlock()
		cut.cut(r == "held")
		fresh := picked["fresh-"+r]
		for _, k := range fresh {
			k.active.Store(true)
		}
		l.waitRefused("the relaying nodes to refuse "+o.id+"'s keys ("+r+")", relayers, owned, m)
		l.waitExhausted(o.id+"'s client to take its fresh keys to their limit ("+r+")", fresh, m)
		// Every relaying node has asked for a fresh key, and been refused.
		l.waitRefused("the relaying nodes to refuse a fresh key ("+r+")", relayers, fresh, m)
		mu.Lock()
		cutSince = time.Time{}
		mu.Unlock()
		cut.heal()
		m = l.mark()
		l.waitAnswered("every client to answer every key once healed ("+r+")", l.nodes, active, m)
		active = append(active, fresh...)
	}
	l.check(func(*loadKey) int { return 0 })
	mu.Lock()
	defer mu.Unlock()
	t.Logf("the slowest refusal through a cut link took %v", slowest.Round(time.Millisecond))
	for _, a := range answered {
		t.Errorf("answered through a cut link: %s", a)
	}
	if slowest > relayBound {
		t.Errorf("a call through a cut link took %v to fail, more than %v", slowest, relayBound)
	}
	for _, k := range keys {
		if k.admitted.Load() != dataLimit {
			t.Errorf("%s admitted %d, want exactly its limit %d (its owner never changed)", k.name, k.admitted.Load(), dataLimit)
		}
	}
}
