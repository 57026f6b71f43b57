package client

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Defaults of NodesConfig.
const (
	// DefaultRefresh is how often Nodes reads the cluster's members again.
	DefaultRefresh = 10 * time.Second
	// nodeDownMin and nodeDownMax bound how long a node that failed is
	// tried only after the others: the first failure sets it aside for
	// nodeDownMin, each further one in a row for twice as long.
	nodeDownMin = 500 * time.Millisecond
	nodeDownMax = 10 * time.Second
	// topologyTimeout bounds one RL.CLUSTER NODES or DNS look-up.
	topologyTimeout = time.Second
)

// ErrNoNodes is the error of a call made when Nodes knows no node: every
// address of NodesConfig.Addrs failed to resolve, or Close was called.
var ErrNoNodes = errors.New("client: no sluice node to send to")

// NodesConfig says which sluice nodes a Nodes sends to.
type NodesConfig struct {
	// Addrs are the nodes to start from: host:port, or dns:NAME:PORT for
	// every address NAME resolves to (a headless service, a round-robin
	// name). At least one is required.
	Addrs []string
	// Options is the template of each node's go-redis client: Username,
	// Password, TLSConfig, pool sizes, timeouts. Its Addr is ignored. Nil
	// means go-redis's defaults. Whatever it says, each node's client gets
	// ContextTimeoutEnabled (the Client's deadline cuts a call), MaxRetries
	// -1 (a failed call goes to another node instead of the same one
	// again), and DialerRetries 1 with a DialerRetryTimeout of 1µs (a
	// refused connection fails at once instead of after go-redis's five
	// dials 100 ms apart).
	Options *redis.Options
	// Refresh is how often the members are read again with RL.CLUSTER
	// NODES (and dns: names resolved again); 0 means DefaultRefresh, a
	// negative value never after the first time. A node that fails also
	// brings the next read forward (at most one a second).
	Refresh time.Duration
	// Static keeps to Addrs (resolved) and never asks RL.CLUSTER NODES:
	// for nodes whose advertised addresses this process cannot reach.
	Static bool
	// LookupHost resolves dns: names; nil means net.DefaultResolver's.
	LookupHost func(ctx context.Context, host string) ([]string, error)
}

// Nodes is a Doer that sends each command to one node of a sluice cluster
// and, when that node cannot answer, to the next, within the call's
// deadline. Pass it to New:
//
//	nodes, err := client.NewNodes(client.NodesConfig{Addrs: []string{"10.0.0.11:6380", "10.0.0.12:6380", "10.0.0.13:6380"}})
//	if err != nil { … }
//	defer nodes.Close()
//	sl := client.New(nodes, client.OnFailure(client.FailOpen))
//
// Which node: the nodes are ranked for each call by rendezvous hashing of
// its key (the command's first argument: the key, budget path or
// reservation id), so every call for a key meets the same node and its
// buckets while that node answers, and calls for different keys spread
// over the cluster. A node that failed is ranked last for half a second,
// then twice as long for each further failure in a row, up to 10 s, and
// is tried again after that (or earlier, when every other node failed
// too).
//
// Which failures go to the next node: a connection that cannot be made or
// breaks (refused, reset, closed, EOF) and the error replies LOADING,
// CLUSTERDOWN and TRYAGAIN. A node that does not answer within the
// deadline is ranked last, but the call that met it has no time left for
// another (and sending it on after a part of its deadline could charge it
// twice). Any
// other reply — a decision, an error about the call — is the answer. A
// call fails only when no node answers it; the Client's failure policy
// then decides.
//
// The members are read with RL.CLUSTER NODES from any node that answers,
// in the background: when NewNodes returns, at every Refresh and soon
// after a node fails. Members reported as unreachable are ranked last. A
// command a node refuses (an ACL user without RL.CLUSTER, an old server)
// leaves the resolved Addrs in use.
type Nodes struct {
	cfg  NodesConfig
	tmpl redis.Options
	now  func() time.Time

	mu    sync.RWMutex
	nodes []*nodeConn // sorted by address
	done  bool

	kick    chan struct{}
	stop    chan struct{}
	stopped chan struct{}
	bg      context.Context // cancelled by Close: topology reads stop
	cancel  context.CancelFunc
	lastRef atomic.Int64 // UnixNano of the last topology read
}

// nodeConn is one node and its go-redis client.
type nodeConn struct {
	addr      string
	rdb       *redis.Client
	downUntil atomic.Int64 // UnixNano; 0: up
	fails     atomic.Int32 // in a row
}

// NewNodes returns a Nodes for cfg, its Addrs resolved (an error if none
// resolves), and starts reading the members in the background.
func NewNodes(cfg NodesConfig) (*Nodes, error) {
	if len(cfg.Addrs) == 0 {
		return nil, errors.New("client: NewNodes needs at least one address")
	}
	if cfg.Refresh == 0 {
		cfg.Refresh = DefaultRefresh
	}
	if cfg.LookupHost == nil {
		cfg.LookupHost = net.DefaultResolver.LookupHost
	}
	n := &Nodes{cfg: cfg, now: time.Now, kick: make(chan struct{}, 1), stop: make(chan struct{}), stopped: make(chan struct{})}
	n.bg, n.cancel = context.WithCancel(context.Background())
	if cfg.Options != nil {
		n.tmpl = *cfg.Options
	}
	n.tmpl.ContextTimeoutEnabled = true
	n.tmpl.MaxRetries = -1
	n.tmpl.DialerRetries = 1
	n.tmpl.DialerRetryTimeout = time.Microsecond
	ctx, cancel := context.WithTimeout(n.bg, topologyTimeout)
	addrs, err := n.resolve(ctx)
	cancel()
	if len(addrs) == 0 {
		n.cancel()
		return nil, fmt.Errorf("client: NewNodes: no address: %w", err)
	}
	n.set(addrs)
	go n.loop()
	return n, nil
}

// contextTimeouts tells New that every node's client honours the
// context's deadline.
func (n *Nodes) contextTimeouts() bool { return true }

// Addrs returns the addresses of the nodes the Nodes sends to now, sorted.
func (n *Nodes) Addrs() []string {
	n.mu.RLock()
	defer n.mu.RUnlock()
	out := make([]string, len(n.nodes))
	for i, nc := range n.nodes {
		out[i] = nc.addr
	}
	return out
}

// Close stops reading the members and closes every node's client.
func (n *Nodes) Close() error {
	n.mu.Lock()
	if n.done {
		n.mu.Unlock()
		return nil
	}
	n.done = true
	nodes := n.nodes
	n.nodes = nil
	n.mu.Unlock()
	n.cancel()
	close(n.stop)
	<-n.stopped
	var errs []error
	for _, nc := range nodes {
		errs = append(errs, nc.rdb.Close())
	}
	return errors.Join(errs...)
}

// Do sends the command to the nodes in their order for its key until one
// answers or the context ends, and returns the last node's result.
func (n *Nodes) Do(ctx context.Context, args ...any) *redis.Cmd {
	order := n.order(routingKey(args))
	var cmd *redis.Cmd
	for _, nc := range order {
		if cmd != nil && ctx.Err() != nil {
			break
		}
		start := time.Now()
		cmd = nc.rdb.Do(ctx, args...)
		next, down := nodeFailed(ctx, cmd.Err())
		if !next {
			nc.up() // it answered
			return cmd
		}
		if down && errors.Is(cmd.Err(), context.DeadlineExceeded) && time.Since(start) < time.Millisecond {
			down = false // the deadline had passed, not the node's doing
		}
		if down {
			nc.down(n.now())
			n.refreshSoon()
		}
		// No time left for another node: the socket's deadline can fire
		// a moment before the context's, and the next node would only
		// fail for want of time (and be set aside for it).
		if dl, ok := ctx.Deadline(); ctx.Err() != nil || ok && !time.Now().Before(dl) {
			break
		}
	}
	if cmd == nil {
		cmd = redis.NewCmd(ctx, args...)
		cmd.SetErr(ErrNoNodes)
	}
	return cmd
}

// nodeFailed reports whether err calls for the next node, and whether it
// says the node itself is unwell (it is then ranked last for a while).
func nodeFailed(ctx context.Context, err error) (next, down bool) {
	if err == nil || errors.Is(err, redis.Nil) {
		return false, false
	}
	var re redis.Error
	if errors.As(err, &re) {
		msg := re.Error()
		switch {
		case strings.HasPrefix(msg, "LOADING"), strings.HasPrefix(msg, "CLUSTERDOWN"):
			return true, true
		case strings.HasPrefix(msg, "TRYAGAIN"):
			return true, false // no leader: another node may know one
		}
		return false, false
	}
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		return false, false // the caller gave up: not the node's doing
	}
	if errors.Is(err, redis.ErrClosed) {
		return true, false // a node dropped from the members meanwhile
	}
	return true, true
}

func (nc *nodeConn) up() {
	if nc.fails.Load() != 0 || nc.downUntil.Load() != 0 {
		nc.fails.Store(0)
		nc.downUntil.Store(0)
	}
}

func (nc *nodeConn) down(now time.Time) {
	f := nc.fails.Add(1)
	d := nodeDownMin << min(f-1, 8)
	d = min(d, nodeDownMax)
	nc.downUntil.Store(now.Add(d).UnixNano())
}

// routingKey is the argument that ranks the nodes for a command: its first
// argument (the key, path or reservation id), or for RL.BUDGET and
// RL.CLUSTER their subcommand's argument.
func routingKey(args []any) string {
	i := 1
	if len(args) > 2 {
		if s, ok := args[0].(string); ok && (strings.EqualFold(s, "RL.BUDGET") || strings.EqualFold(s, "RL.CLUSTER")) {
			i = 2
		}
	}
	if len(args) <= i {
		return ""
	}
	switch v := args[i].(type) {
	case string:
		return v
	case []byte:
		return string(v)
	}
	return fmt.Sprint(args[i])
}

// order returns the nodes ranked for key: those that are up by their
// rendezvous score, highest first, then those set aside, soonest back
// first.
func (n *Nodes) order(key string) []*nodeConn {
	n.mu.RLock()
	nodes := n.nodes
	n.mu.RUnlock()
	if len(nodes) <= 1 {
		return nodes
	}
	type ranked struct {
		nc    *nodeConn
		score uint64
		until int64
	}
	now := n.now().UnixNano()
	rs := make([]ranked, len(nodes))
	for i, nc := range nodes {
		h := fnv.New64a()
		h.Write([]byte(key))
		h.Write([]byte{0})
		h.Write([]byte(nc.addr))
		until := nc.downUntil.Load()
		if until <= now {
			until = 0
		}
		rs[i] = ranked{nc, h.Sum64(), until}
	}
	sort.Slice(rs, func(i, j int) bool {
		a, b := rs[i], rs[j]
		if a.until != b.until {
			return a.until < b.until // 0 (up) first
		}
		return a.score > b.score
	})
	out := make([]*nodeConn, len(rs))
	for i, r := range rs {
		out[i] = r.nc
	}
	return out
}

// resolve returns the addresses of cfg.Addrs, dns: names looked up, sorted
// and without repeats; err is the last look-up's failure.
func (n *Nodes) resolve(ctx context.Context) ([]string, error) {
	var out []string
	var err error
	for _, a := range n.cfg.Addrs {
		name, ok := strings.CutPrefix(a, "dns:")
		if !ok {
			out = append(out, a)
			continue
		}
		host, port, e := net.SplitHostPort(name)
		if e != nil {
			err = fmt.Errorf("client: %q: want dns:NAME:PORT: %w", a, e)
			continue
		}
		ips, e := n.cfg.LookupHost(ctx, host)
		if e != nil {
			err = fmt.Errorf("client: resolving %s: %w", host, e)
			continue
		}
		for _, ip := range ips {
			out = append(out, net.JoinHostPort(ip, port))
		}
	}
	slices.Sort(out)
	return slices.Compact(out), err
}

// set makes addrs the nodes, keeping the clients of those already known
// and closing those of the ones gone.
func (n *Nodes) set(addrs []string) {
	n.mu.Lock()
	if n.done {
		n.mu.Unlock()
		return
	}
	old := map[string]*nodeConn{}
	for _, nc := range n.nodes {
		old[nc.addr] = nc
	}
	next := make([]*nodeConn, 0, len(addrs))
	for _, a := range addrs {
		if nc, ok := old[a]; ok {
			next = append(next, nc)
			delete(old, a)
			continue
		}
		o := n.tmpl
		o.Addr = a
		next = append(next, &nodeConn{addr: a, rdb: redis.NewClient(&o)})
	}
	n.nodes = next
	n.mu.Unlock()
	for _, nc := range old {
		nc.rdb.Close()
	}
}

// refreshSoon asks the background loop for a topology read.
func (n *Nodes) refreshSoon() {
	select {
	case n.kick <- struct{}{}:
	default:
	}
}

func (n *Nodes) loop() {
	defer close(n.stopped)
	n.refresh()
	var tick <-chan time.Time
	if n.cfg.Refresh > 0 {
		t := time.NewTicker(n.cfg.Refresh)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-n.stop:
			return
		case <-tick:
		case <-n.kick:
			// At most one read a second, however many nodes fail.
			if wait := time.Until(time.Unix(0, n.lastRef.Load()).Add(time.Second)); wait > 0 {
				t := time.NewTimer(wait)
				select {
				case <-n.stop:
					t.Stop()
					return
				case <-t.C:
				}
			}
		}
		n.refresh()
	}
}

// member is one row of RL.CLUSTER NODES.
type member struct{ id, addr, role string }

// refresh reads the members and makes them the nodes; without an answer,
// the resolved Addrs.
func (n *Nodes) refresh() {
	n.lastRef.Store(time.Now().UnixNano())
	ctx, cancel := context.WithTimeout(n.bg, topologyTimeout)
	seeds, _ := n.resolve(ctx)
	cancel()
	if !n.cfg.Static {
		if ms, ok := n.members(seeds); ok {
			addrs := make([]string, 0, len(ms))
			for _, m := range ms {
				addrs = append(addrs, m.addr)
			}
			slices.Sort(addrs)
			n.set(slices.Compact(addrs))
			now := n.now()
			n.mu.RLock()
			for _, nc := range n.nodes {
				for _, m := range ms {
					if m.addr == nc.addr && (m.role == "unreachable" || m.role == "removed") && nc.downUntil.Load() == 0 {
						nc.down(now)
					}
				}
			}
			n.mu.RUnlock()
			return
		}
	}
	if len(seeds) > 0 {
		n.set(seeds)
	}
}

// members asks the known nodes, then the seeds, for RL.CLUSTER NODES and
// returns the first readable answer with at least one member.
func (n *Nodes) members(seeds []string) ([]member, bool) {
	tried := map[string]bool{}
	for _, nc := range n.order("") {
		tried[nc.addr] = true
		if ms, ok := askMembers(n.bg, nc.rdb); ok {
			return ms, true
		}
	}
	for _, a := range seeds {
		if tried[a] {
			continue
		}
		o := n.tmpl
		o.Addr = a
		rdb := redis.NewClient(&o)
		ms, ok := askMembers(n.bg, rdb)
		rdb.Close()
		if ok {
			return ms, true
		}
	}
	return nil, false
}

func askMembers(bg context.Context, rdb *redis.Client) ([]member, bool) {
	ctx, cancel := context.WithTimeout(bg, topologyTimeout)
	defer cancel()
	v, err := rdb.Do(ctx, "RL.CLUSTER", "NODES").Result()
	if err != nil {
		return nil, false
	}
	ms, err := parseMembers(v)
	return ms, err == nil && len(ms) > 0
}

// parseMembers reads RL.CLUSTER NODES: one array per member, id,
// resp_addr, raft_addr, suffrage, role (docs/cluster.md).
func parseMembers(v any) ([]member, error) {
	rows, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("client: RL.CLUSTER NODES reply is not an array: %v", v)
	}
	var out []member
	for _, r := range rows {
		f, ok := r.([]any)
		if !ok || len(f) < 5 {
			return nil, fmt.Errorf("client: RL.CLUSTER NODES row is not an array of 5: %v", r)
		}
		var s [5]string
		for i := range s {
			if s[i], ok = f[i].(string); !ok {
				return nil, fmt.Errorf("client: RL.CLUSTER NODES row element %d is not a string: %v", i+1, f[i])
			}
		}
		if s[1] == "" {
			continue // a member that has not registered its RESP address yet
		}
		out = append(out, member{id: s[0], addr: s[1], role: s[4]})
	}
	return out, nil
}
