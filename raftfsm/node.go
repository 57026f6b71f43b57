package raftfsm

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"github.com/sluice-rl/sluice/fault"
)

// Options configures a Node.
type Options struct {
	ID       string
	RaftAddr string // bound and advertised; never 0.0.0.0
	RespAddr string // this node's advertised RESP address
	DataDir  string
	// Peers is --bootstrap-peers: every node of a static cluster is started
	// with the identical list. Empty with Join empty: a one-node cluster.
	Peers []Member
	// Join is any member's RESP address, for a node joining a cluster.
	Join string
	// TLS is the server side of Raft's TLS (with client certificates
	// required when it has ClientCAs); ClientTLS dials peers. Both nil:
	// plain TCP.
	TLS, ClientTLS *tls.Config
	// Remote carries what a node asks of other nodes outside Raft (forwarded
	// writes, joins); the server implements it over its client protocol.
	Remote Remote
	Logger *slog.Logger
	// LogLevel filters hashicorp/raft's own lines, which go to Logger:
	// warnings and errors always, info and debug with "debug".
	LogLevel string

	ApplyTimeout      time.Duration // bound on waiting for a commit; default 5s
	SnapshotThreshold uint64        // default 8192
	SnapshotInterval  time.Duration // default 2m
	TrailingLogs      uint64        // default 10240
	// Raft timing; zero values take hashicorp/raft's defaults.
	HeartbeatTimeout, ElectionTimeout, LeaderLeaseTimeout time.Duration
	// ObserveApply, if set, receives the duration of every Apply.
	ObserveApply func(seconds float64)
}

// Remote is how a node reaches other nodes outside Raft. Calls end when
// ctx does.
type Remote interface {
	// Forward proposes an encoded entry on the leader at addr and returns
	// its outcome; errors are *Error (Retry set when another attempt, at
	// the same or a new leader, may succeed).
	Forward(ctx context.Context, addr string, entry []byte) (Response, error)
	// Relay sends a client command to the node at addr and returns its raw
	// reply (membership changes and consistent reads run on the leader).
	Relay(ctx context.Context, addr string, args [][]byte) ([]byte, error)
	// Join asks the member at addr to add m as a voter (auto: the node's
	// own request, refused for a node an operator removed).
	Join(ctx context.Context, addr string, m Member) error
	Close()
}

// noRemote is the Remote of a node that cannot reach others (tests of a
// lone node).
type noRemote struct{}

var errNoRemote = &Error{Code: "TRYAGAIN", Msg: "no way to reach other nodes", Retry: true}

func (noRemote) Forward(context.Context, string, []byte) (Response, error) {
	return Response{}, errNoRemote
}
func (noRemote) Relay(context.Context, string, [][]byte) ([]byte, error) { return nil, errNoRemote }
func (noRemote) Join(context.Context, string, Member) error              { return errNoRemote }
func (noRemote) Close()                                                  {}

// Node is this process's Raft member.
type Node struct {
	opts    Options
	log     *slog.Logger
	raft    *raft.Raft
	fsm     *FSM
	bolt    *raftboltdb.BoltStore
	stable  *stableStore
	logs    raft.LogStore
	trans   *raft.NetworkTransport
	remote  Remote
	notify  chan bool
	changed chan struct{}
	events  signal // leader or role changed
	seq     atomic.Uint64
	// readTerm is the term in which this node, as leader, has applied an
	// entry of its own: reads it serves as leader wait for it.
	readTerm  atomic.Uint64
	removed   atomic.Bool
	wasMember atomic.Bool
	// peers folds raft's lines about unreachable peers (logs.go); seen is
	// the leader and term last logged.
	peers *peerLog
	seen  string

	stop     chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup
}

// ForwardPrefix names the connections that carry writes forwarded by
// another node: such a write is never forwarded again, so a stale view of
// the leader cannot bounce a write between two followers.
const ForwardPrefix = "sluice-forward:"

// Errors a write can meet, worded as replies.
var (
	// ErrNotLeader: this node is not the leader; forward the write.
	ErrNotLeader = &Error{Code: "TRYAGAIN", Msg: "not the leader", Retry: true}
	ErrNoLeader  = &Error{Code: "TRYAGAIN", Msg: "no leader"}
	ErrTimeout   = &Error{Code: "TRYAGAIN", Msg: "no quorum: the write was not committed in time; it may still be applied, and writes are safe to repeat"}
	ErrLost      = &Error{Code: "TRYAGAIN", Msg: "leadership lost while applying", Retry: true}
	ErrShutdown  = &Error{Code: "CLUSTERDOWN", Msg: "this node is shutting down"}
	ErrRemoved   = &Error{Code: "CLUSTERDOWN", Msg: "this node was removed from the cluster (RL.CLUSTER LEAVE); an operator re-admits it with RL.CLUSTER JOIN"}
	ErrNotCaught = &Error{Code: "TRYAGAIN", Msg: "the new leader has not applied the log yet"}
	// ErrLeaderHere: a command being relayed to the leader found that this
	// node leads now; it serves the command itself.
	ErrLeaderHere = &Error{Code: "TRYAGAIN", Msg: "this node became the leader", Retry: true}
)

// Error is a cluster error with its reply code. Retry marks an error after
// which the same write may be tried again, here or at a new leader.
type Error = fault.Error

func retryable(err error) bool { return fault.Retryable(err) }

// signal is a broadcast: wait returns a channel that fire closes.
type signal struct {
	mu sync.Mutex
	ch chan struct{}
}

func (s *signal) wait() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch == nil {
		s.ch = make(chan struct{})
	}
	return s.ch
}

func (s *signal) fire() {
	s.mu.Lock()
	if s.ch != nil {
		close(s.ch)
		s.ch = nil
	}
	s.mu.Unlock()
}

// Open opens (or creates) the node's Raft state in DataDir and starts it:
// a node with no state bootstraps (alone, or with Peers) or joins.
func Open(o Options) (*Node, error) {
	if o.ApplyTimeout == 0 {
		o.ApplyTimeout = 5 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if err := os.MkdirAll(o.DataDir, 0o750); err != nil {
		return nil, fmt.Errorf("--data-dir: %w", err)
	}
	hl, peers := raftLogger(o.Logger, o.LogLevel)
	if o.Remote == nil {
		o.Remote = noRemote{}
	}
	n := &Node{opts: o, log: o.Logger, fsm: NewFSM(), stop: make(chan struct{}), notify: make(chan bool, 16), changed: make(chan struct{}, 1),
		remote: o.Remote, peers: peers}
	// Write ids continue across restarts (the clock has moved on), so a
	// restarted node's writes are never mistaken for its earlier ones.
	n.seq.Store(uint64(time.Now().UnixNano()))
	var err error
	if n.bolt, err = raftboltdb.New(raftboltdb.Options{Path: filepath.Join(o.DataDir, "raft.db")}); err != nil {
		return nil, fmt.Errorf("raft log store: %w", err)
	}
	cleanup := func() { n.bolt.Close() }
	logs, err := raft.NewLogCache(512, n.bolt)
	if err != nil {
		cleanup()
		return nil, err
	}
	n.logs = logs
	snaps, err := raft.NewFileSnapshotStoreWithLogger(o.DataDir, 2, hl)
	if err != nil {
		cleanup()
		return nil, fmt.Errorf("raft snapshots: %w", err)
	}
	if n.trans, err = newTransport(o, hl); err != nil {
		cleanup()
		return nil, fmt.Errorf("--raft-addr %s: %w", o.RaftAddr, err)
	}
	o.RaftAddr = string(n.trans.LocalAddr()) // the bound port, if 0 was asked for
	if o.ID == "" {
		o.ID = o.RaftAddr
	}
	n.opts.RaftAddr, n.opts.ID = o.RaftAddr, o.ID
	n.fsm.OnConfiguration = n.configurationApplied
	n.fsm.OnMembers = func(st *State) {
		if st.Removed[n.opts.ID] {
			n.setRemoved(true)
		}
	}
	// hashicorp/raft's timing (1 s heartbeat and election timeouts, 500 ms
	// lease): a loaded machine's pauses do not start needless elections,
	// and failover takes one to two seconds.
	cfg := raft.DefaultConfig()
	cfg.LocalID = raft.ServerID(o.ID)
	cfg.Logger = hl
	cfg.NotifyCh = n.notify
	if o.SnapshotThreshold > 0 {
		cfg.SnapshotThreshold = o.SnapshotThreshold
	}
	if o.SnapshotInterval > 0 {
		cfg.SnapshotInterval = o.SnapshotInterval
	}
	if o.TrailingLogs > 0 {
		cfg.TrailingLogs = o.TrailingLogs
	}
	if o.HeartbeatTimeout > 0 {
		cfg.HeartbeatTimeout = o.HeartbeatTimeout
	}
	if o.ElectionTimeout > 0 {
		cfg.ElectionTimeout = o.ElectionTimeout
	}
	if o.LeaderLeaseTimeout > 0 {
		cfg.LeaderLeaseTimeout = o.LeaderLeaseTimeout
	}
	existing, err := raft.HasExistingState(logs, n.bolt, snaps)
	if err != nil {
		n.trans.Close()
		cleanup()
		return nil, err
	}
	n.stable = &stableStore{s: n.bolt}
	if n.raft, err = raft.NewRaft(cfg, n.fsm, logs, n.stable, snaps, n.trans); err != nil {
		n.trans.Close()
		cleanup()
		return nil, err
	}
	if existing {
		if err := n.checkAddress(); err != nil {
			n.raft.Shutdown().Error()
			n.trans.Close()
			cleanup()
			return nil, err
		}
	} else if o.Join == "" {
		servers := []raft.Server{{ID: cfg.LocalID, Address: raft.ServerAddress(o.RaftAddr), Suffrage: raft.Voter}}
		if len(o.Peers) > 0 {
			servers = servers[:0]
			for _, p := range o.Peers {
				servers = append(servers, raft.Server{ID: raft.ServerID(p.ID), Address: raft.ServerAddress(p.RaftAddr), Suffrage: raft.Voter})
			}
		}
		if err := n.raft.BootstrapCluster(raft.Configuration{Servers: servers}).Error(); err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
			n.Shutdown()
			return nil, fmt.Errorf("bootstrap: %w", err)
		}
	}
	obs := make(chan raft.Observation, 16)
	n.raft.RegisterObserver(raft.NewObserver(obs, false, func(o *raft.Observation) bool {
		switch o.Data.(type) {
		case raft.LeaderObservation, raft.RaftState, raft.ResumedHeartbeatObservation:
			return true
		}
		return false
	}))
	// A lone voter elects itself now, so that it replays its log while the
	// saved view loads.
	after := n.raft.AppliedIndex()
	n.electAloneAtOnce()
	// Serve what this node had applied before it stopped until Raft has
	// replayed that far, so that a node restarted without a quorum still
	// limits with its last tree (and a lone node, with its quota counts,
	// while it replays).
	if err := n.fsm.LoadView(n.viewPath(), after); err != nil {
		n.log.Warn("saved view not used", "err", err)
	}
	n.wg.Add(4)
	if n.raft.State() == raft.Leader {
		// Elected before the observer was registered (loading a large
		// saved view takes a while): catch up all the same.
		n.wg.Add(1)
		go n.catchUp(n.raft.CurrentTerm())
	}
	idOf := n.idOf
	n.peers.idOf.Store(&idOf)
	go n.watch(obs)
	go n.relayNotify()
	go n.register()
	go n.saveViews()
	n.log.Info("raft started", "id", o.ID, "raft", o.RaftAddr, "existing_state", existing,
		"bootstrap_peers", len(o.Peers), "join", o.Join)
	return n, nil
}

// checkAddress refuses to run a known node id at a new Raft address: the
// other members would keep calling the old one.
func (n *Node) checkAddress() error {
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return err
	}
	for _, s := range f.Configuration().Servers {
		if string(s.ID) == n.opts.ID && string(s.Address) != n.opts.RaftAddr {
			return fmt.Errorf("node id %q is registered with raft address %s; refusing to start at %s "+
				"(restart with the old --raft-addr, or remove the node with RL.CLUSTER LEAVE and join it afresh)",
				n.opts.ID, s.Address, n.opts.RaftAddr)
		}
	}
	return nil
}

func newTransport(o Options, hl hclog.Logger) (*raft.NetworkTransport, error) {
	st := &stream{}
	var err error
	if o.TLS != nil {
		st.Listener, err = tls.Listen("tcp", o.RaftAddr, o.TLS)
		st.client = o.ClientTLS
	} else {
		st.Listener, err = net.Listen("tcp", o.RaftAddr)
	}
	if err != nil {
		return nil, err
	}
	// Advertise the address as configured (a host name stays a host name,
	// so a restarted node matches its record), or what was bound for
	// port 0.
	st.advertise = advertAddr(o.RaftAddr)
	if _, port, _ := net.SplitHostPort(o.RaftAddr); port == "0" {
		st.advertise = st.Listener.Addr()
	}
	return raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: st, MaxPool: 3, Timeout: 10 * time.Second, Logger: hl,
	}), nil
}

// advertAddr is a Raft address as written, host name or IP.
type advertAddr string

func (a advertAddr) Network() string { return "tcp" }
func (a advertAddr) String() string  { return string(a) }

// stream is Raft's stream layer: plain TCP, or TLS when client is set.
type stream struct {
	net.Listener
	advertise net.Addr
	client    *tls.Config
}

func (s *stream) Addr() net.Addr { return s.advertise }

func (s *stream) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	d := &net.Dialer{Timeout: timeout}
	if s.client != nil {
		return tls.DialWithDialer(d, "tcp", string(addr), s.client)
	}
	return d.Dial("tcp", string(addr))
}

// PeerTLS returns the client and server TLS configurations for traffic
// between nodes: certificates are verified against the CA (not against host
// names, so nodes may be addressed by IP), and each side must present one.
func PeerTLS(cert tls.Certificate, ca *x509.CertPool) (server, client *tls.Config) {
	verify := func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return errors.New("peer presented no certificate")
		}
		inter := x509.NewCertPool()
		for _, c := range cs.PeerCertificates[1:] {
			inter.AddCert(c)
		}
		_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: ca, Intermediates: inter,
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
		return err
	}
	server = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12,
		ClientAuth: tls.RequireAnyClientCert, VerifyConnection: verify}
	client = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12,
		InsecureSkipVerify: true, VerifyConnection: verify} // chain checked in verify
	return server, client
}

// FSM returns the state machine.
func (n *Node) FSM() *FSM { return n.fsm }

// State returns the current replicated state.
func (n *Node) State() *State { return n.fsm.State() }

// ID returns this node's id.
func (n *Node) ID() string { return n.opts.ID }

// IsLeader reports whether this node believes it leads.
func (n *Node) IsLeader() bool { return n.raft.State() == raft.Leader }

// Leader returns the leader's id and RESP address, if known.
func (n *Node) Leader() (id, respAddr string, ok bool) {
	_, lid := n.raft.LeaderWithID()
	if lid == "" {
		return "", "", false
	}
	m, known := n.fsm.State().Members[string(lid)]
	if string(lid) == n.opts.ID {
		return n.opts.ID, n.opts.RespAddr, true
	}
	return string(lid), m.RespAddr, known
}

// Write proposes e wherever the leader is and waits for its outcome: on
// the leader it applies, elsewhere it forwards the entry to the leader.
// While no leader is known or the leader is unreachable it waits for one,
// up to ApplyTimeout; an attempt whose outcome is unknown is retried, which
// is safe because the state machine applies each write id once. It
// replies only once this node has applied the write too (read-your-writes
// here); a write committed but not applied here in time is an error
// (NotAppliedError).
func (n *Node) Write(e *Entry) (Response, error) {
	if n.removed.Load() {
		return Response{}, ErrRemoved
	}
	e.Req = &ReqID{Node: n.opts.ID, Seq: n.seq.Add(1)}
	b := e.Encode()
	ctx, cancel := context.WithTimeout(context.Background(), n.opts.ApplyTimeout)
	defer cancel()
	resp, err := n.propose(ctx, b)
	if err != nil {
		return resp, err
	}
	// Committed: this node normally applies it within milliseconds. A
	// commit that came late in the write's time still gets a while here.
	if dl, _ := ctx.Deadline(); time.Until(dl) < n.opts.ApplyTimeout/2 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.Background(), n.opts.ApplyTimeout/2)
		defer cancel()
	}
	if !n.waitApplied(ctx, resp.Index) {
		return Response{}, NotAppliedError(resp.Index)
	}
	return resp, nil
}

// NotAppliedError is a write's reply when the leader committed it but
// this node did not apply it within ApplyTimeout (cut off from the
// leader's log, or far behind): replying OK would break
// read-your-writes here, so the caller is told where to read it.
func NotAppliedError(index uint64) *Error {
	return &Error{Code: "TRYAGAIN", Msg: "the write was committed at index " + strconv.FormatUint(index, 10) +
		" but this node has not applied it yet, so reads here would not show it; read it with CONSISTENT (served by the leader), or repeat the write: writes are safe to repeat"}
}

func (n *Node) propose(ctx context.Context, b []byte) (Response, error) {
	var last error = ErrNoLeader
	backoff := 10 * time.Millisecond
	for {
		changed := n.events.wait()
		if n.raft.State() == raft.Leader {
			resp, err := n.applyHere(ctx, b)
			if err == nil || !retryable(err) {
				return resp, err
			}
			last = err
		} else if id, addr, ok := n.Leader(); ok && addr != "" && id != n.opts.ID {
			resp, err := n.forwardOnce(ctx, addr, b)
			if err == nil || !retryable(err) {
				return resp, err
			}
			last = err
		}
		select {
		case <-ctx.Done():
			var e *Error
			_, _, known := n.Leader()
			switch {
			case errors.Is(last, ErrNoLeader), !known && n.raft.State() != raft.Leader:
				// An unreachable leader that has since been given up on
				// (this node's heartbeat timeout) is no leader at all.
				return Response{}, ErrNoLeader
			case errors.As(last, &e) && strings.HasPrefix(e.Msg, "leader "):
				return Response{}, &Error{Code: e.Code, Msg: e.Msg} // the leader stayed unreachable
			case errors.Is(last, ErrLost), errors.Is(last, ErrNotLeader):
				return Response{}, ErrNoLeader
			}
			return Response{}, ErrTimeout
		case <-n.stop:
			return Response{}, ErrShutdown
		case <-changed:
			backoff = 10 * time.Millisecond
		case <-time.After(backoff):
			backoff = min(2*backoff, 200*time.Millisecond)
		}
	}
}

// forwardOnce forwards to the leader at addr, giving up early when this
// node's view of the leader changes (a dead or deposed leader).
func (n *Node) forwardOnce(ctx context.Context, addr string, b []byte) (Response, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		for {
			changed := n.events.wait()
			if _, a, ok := n.Leader(); !ok || a != addr {
				cancel()
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-changed:
			}
		}
	}()
	resp, err := n.remote.Forward(ctx, addr, b)
	if err != nil && ctx.Err() != nil {
		return Response{}, &Error{Code: "TRYAGAIN", Msg: "leader " + addr + " did not answer", Retry: true}
	}
	return resp, err
}

// Apply applies an encoded entry on this node if it leads (else
// ErrNotLeader), waiting at most ApplyTimeout. A write forwarded by
// another node comes here: it is never forwarded again, so a stale view of
// the leader cannot bounce a write between followers.
func (n *Node) Apply(b []byte) (Response, error) {
	if n.raft.State() != raft.Leader {
		return Response{}, ErrNotLeader
	}
	ctx, cancel := context.WithTimeout(context.Background(), n.opts.ApplyTimeout)
	defer cancel()
	return n.applyHere(ctx, b)
}

// applyHere proposes b on this node, which believes it leads, and waits
// (until ctx ends) for its commit and apply.
func (n *Node) applyHere(ctx context.Context, b []byte) (Response, error) {
	start := time.Now()
	timeout := n.opts.ApplyTimeout
	if d, ok := ctx.Deadline(); ok {
		timeout = max(time.Until(d), time.Millisecond)
	}
	f := n.raft.Apply(b, timeout)
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		if n.opts.ObserveApply != nil {
			n.opts.ObserveApply(time.Since(start).Seconds())
		}
		switch {
		case err == nil:
			return ResponseError(f.Response())
		case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipTransferInProgress):
			return Response{}, ErrNotLeader
		case errors.Is(err, raft.ErrLeadershipLost):
			return Response{}, ErrLost
		case errors.Is(err, raft.ErrRaftShutdown):
			return Response{}, ErrShutdown
		case errors.Is(err, raft.ErrEnqueueTimeout):
			return Response{}, ErrTimeout
		}
		return Response{}, &Error{Code: "TRYAGAIN", Msg: err.Error()}
	case <-ctx.Done():
		return Response{}, ErrTimeout
	case <-n.stop:
		return Response{}, ErrShutdown
	}
}

// waitApplied waits, until ctx ends, for this node to apply index.
func (n *Node) waitApplied(ctx context.Context, index uint64) bool {
	for {
		ch := n.fsm.appliedChanged()
		if n.AppliedIndex() >= index {
			return true
		}
		// The timer: no-ops and barriers move Raft's index only.
		if n.pause(ctx, ch, 10*time.Millisecond) != nil {
			return false
		}
	}
}

// Forward relays a client command to the leader, waiting for one (up to
// ApplyTimeout) when none is known, and returns its raw reply. A node
// that relays to a peer which is no longer the leader (its refusal starts
// with NotLeaderReply) waits for a newer view and relays again; if this
// node becomes the leader meanwhile, Forward returns ErrLeaderHere and the
// caller serves the command itself.
func (n *Node) Forward(args [][]byte) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), n.opts.ApplyTimeout)
	defer cancel()
	var last error = ErrNoLeader
	for {
		changed := n.events.wait()
		id, addr, ok := n.Leader()
		switch {
		case n.raft.State() == raft.Leader:
			return nil, ErrLeaderHere
		case ok && addr != "" && id != n.opts.ID:
			raw, err := n.remote.Relay(ctx, addr, args)
			switch {
			case err == nil && !bytes.HasPrefix(raw, notLeaderReply):
				return raw, nil
			case err == nil:
				last = ErrNoLeader // a deposed leader: wait for the next
			case ctx.Err() != nil:
				return nil, &Error{Code: "TRYAGAIN", Msg: "leader " + addr + " unreachable: " + err.Error()}
			default:
				last = &Error{Code: "TRYAGAIN", Msg: "leader " + addr + " unreachable: " + err.Error()}
			}
		}
		if err := n.pause(ctx, changed, 50*time.Millisecond); err == ErrShutdown {
			return nil, err
		} else if err != nil {
			return nil, last
		}
	}
}

// NotLeaderReply starts the refusal of a node that receives a relayed
// command (on a connection named with ForwardPrefix) but does not lead.
const NotLeaderReply = "TRYAGAIN not the leader"

var notLeaderReply = []byte("-" + NotLeaderReply)

// pause waits for ch, for d, for ctx to end or for shutdown, and says why
// it ended early: ctx.Err() or ErrShutdown; nil otherwise.
func (n *Node) pause(ctx context.Context, ch <-chan struct{}, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-n.stop:
		return ErrShutdown
	case <-ch:
	case <-time.After(d):
	}
	return nil
}

// ReadState returns the state for a read. On a leader it first waits (up
// to ApplyTimeout) until the leader has applied an entry of its own term,
// so a new leader never answers with an older state than its predecessor
// acknowledged. With consistent, the node must be the leader: it confirms
// its leadership with a quorum and waits until it has applied everything
// committed before the read (a linearizable read); others get ErrNotLeader.
func (n *Node) ReadState(consistent bool) (*State, error) {
	leader := n.raft.State() == raft.Leader
	if !leader {
		if consistent {
			return nil, ErrNotLeader
		}
		return n.fsm.State(), nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), n.opts.ApplyTimeout)
	defer cancel()
	for n.readTerm.Load() != n.raft.CurrentTerm() {
		changed := n.events.wait()
		if n.raft.State() != raft.Leader {
			return n.ReadState(consistent)
		}
		if err := n.pause(ctx, changed, 20*time.Millisecond); err == ErrShutdown {
			return nil, err
		} else if err != nil {
			return nil, ErrNotCaught
		}
	}
	if consistent {
		commit := n.raft.CommitIndex()
		if err := n.raft.VerifyLeader().Error(); err != nil {
			return nil, ErrNotLeader
		}
		if !n.waitApplied(ctx, commit) {
			return nil, ErrTimeout
		}
	}
	return n.fsm.State(), nil
}

// Join adds a node as a voter (leader only), first removing any stale
// member with the same id or Raft address, and records its RESP address.
// It is idempotent: joining a member again only refreshes its record. An
// automatic join (a node's own request) of a node an operator removed is
// refused; an operator's join re-admits it.
func (n *Node) Join(id, raftAddr, respAddr string, auto bool) error {
	if n.raft.State() != raft.Leader {
		return ErrNotLeader
	}
	if auto && n.fsm.State().Removed[id] {
		return errRemoved(id)
	}
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return &Error{Code: "TRYAGAIN", Msg: err.Error()}
	}
	already := false
	for _, s := range f.Configuration().Servers {
		switch {
		case string(s.ID) == id && string(s.Address) == raftAddr:
			already = true
		case string(s.ID) == id || string(s.Address) == raftAddr:
			if err := n.raft.RemoveServer(s.ID, 0, n.opts.ApplyTimeout).Error(); err != nil {
				return &Error{Code: "TRYAGAIN", Msg: "removing stale member " + string(s.ID) + ": " + err.Error()}
			}
		}
	}
	m := Member{ID: id, RespAddr: respAddr, RaftAddr: raftAddr}
	if st := n.fsm.State(); already && st.Members[id] == m && !st.Removed[id] {
		// A voter asking again with the addresses on record (a join
		// retried while its first answer was on its way): nothing to
		// change, and no entry for it.
		return nil
	}
	resp, err := n.Write(&Entry{Type: AddMember, Member: &m, Auto: auto})
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		return err
	}
	if already {
		return nil
	}
	if err := n.raft.AddVoter(raft.ServerID(id), raft.ServerAddress(raftAddr), 0, n.opts.ApplyTimeout).Error(); err != nil {
		return &Error{Code: "TRYAGAIN", Msg: "adding voter: " + err.Error()}
	}
	n.log.Info("node joined", "id", id, "raft", raftAddr, "resp", respAddr, "by_operator", !auto)
	return nil
}

// Leave removes a node from the cluster (leader only). The node is marked
// removed in the replicated state, so it does not rejoin on its own.
func (n *Node) Leave(id string) error {
	if n.raft.State() != raft.Leader {
		return ErrNotLeader
	}
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return &Error{Code: "TRYAGAIN", Msg: err.Error()}
	}
	found := false
	for _, s := range f.Configuration().Servers {
		found = found || string(s.ID) == id
	}
	st := n.fsm.State()
	_, member := st.Members[id]
	if !found && !member {
		return &Error{Code: "ERR", Msg: "no node with id '" + id + "'"}
	}
	if member || !st.Removed[id] {
		resp, err := n.Write(&Entry{Type: RemoveMember, ID: id})
		if err == nil {
			err = resp.Err
		}
		if err != nil {
			return err
		}
	}
	if found {
		if err := n.raft.RemoveServer(raft.ServerID(id), 0, n.opts.ApplyTimeout).Error(); err != nil {
			return &Error{Code: "TRYAGAIN", Msg: "removing server: " + err.Error()}
		}
	}
	n.log.Info("node left", "id", id)
	return nil
}

// Removed reports whether an operator removed this node from the cluster.
func (n *Node) Removed() bool { return n.removed.Load() }

func (n *Node) setRemoved(removed bool) {
	if n.removed.Swap(removed) != removed {
		if removed {
			n.log.Warn("this node was removed from the cluster; it does not rejoin on its own (an operator re-admits it with RL.CLUSTER JOIN)", "id", n.opts.ID)
		} else {
			n.log.Info("this node was re-admitted to the cluster", "id", n.opts.ID)
		}
		n.events.fire()
	}
}

// configurationApplied follows the Raft configurations this node applies:
// one that drops this node after it was a member means it was removed;
// one that lists it again (an operator's join), that it is back.
func (n *Node) configurationApplied(_ uint64, c raft.Configuration) {
	in := false
	for _, s := range c.Servers {
		in = in || string(s.ID) == n.opts.ID
	}
	switch {
	case in:
		n.wasMember.Store(true)
		if !n.fsm.State().Removed[n.opts.ID] {
			n.setRemoved(false)
		}
	case n.wasMember.Load() && len(c.Servers) > 0:
		n.setRemoved(true)
	}
}

// register makes sure the replicated member map holds this node (and, on
// the leader, every bootstrap peer) with its current addresses: a new node
// joins through Join or the leader; a restarted node with a new RESP
// address refreshes its record. A removed node does not rejoin.
func (n *Node) register() {
	defer n.wg.Done()
	backoff := 50 * time.Millisecond
	for {
		if n.registerOnce() {
			backoff = 2 * time.Second // settled: look again now and then
		} else {
			backoff = min(backoff*2, time.Second)
		}
		select {
		case <-n.stop:
			return
		case <-n.changed:
		case <-time.After(backoff):
		}
	}
}

// registerOnce is one pass of register; it reports whether the member map
// is settled (this node recorded, and on the leader every voter).
func (n *Node) registerOnce() bool {
	me := Member{ID: n.opts.ID, RespAddr: n.opts.RespAddr, RaftAddr: n.opts.RaftAddr}
	st := n.fsm.State()
	if st.Removed[me.ID] {
		n.setRemoved(true)
		return true
	}
	if n.removed.Load() {
		return true
	}
	if n.IsLeader() {
		voters := map[string]bool{}
		if servers, err := n.Servers(); err == nil {
			for _, s := range servers {
				voters[string(s.ID)] = true
			}
		}
		for i, p := range append([]Member{me}, n.opts.Peers...) {
			if i > 0 && (p.ID == me.ID || st.Members[p.ID] != (Member{}) || !voters[p.ID] || st.Removed[p.ID]) {
				// A peer's own record wins over the bootstrap list, and
				// a peer that left stays gone.
				continue
			}
			if st.Members[p.ID] != p {
				if _, err := n.Write(&Entry{Type: AddMember, Member: &p, Auto: true}); err != nil {
					n.log.Debug("registering member", "id", p.ID, "err", err)
				}
			}
		}
	} else if st.Members[me.ID] != me {
		target := ""
		if _, addr, ok := n.Leader(); ok && addr != "" {
			target = addr
		} else if n.opts.Join != "" && len(st.Members) == 0 {
			target = n.opts.Join
		}
		if target != "" {
			ctx, cancel := context.WithTimeout(context.Background(), n.opts.ApplyTimeout)
			err := n.remote.Join(ctx, target, me)
			cancel()
			switch {
			case err != nil && strings.Contains(err.Error(), RemovedText):
				n.setRemoved(true)
				return true
			case err != nil:
				n.log.Info("joining", "via", target, "err", err)
			}
		}
	}
	st = n.fsm.State()
	return st.Members[me.ID] == me && (!n.IsLeader() || n.peersRegistered(st))
}

// RemovedText is in the refusal a removed node meets when it asks to join.
const RemovedText = "was removed from the cluster"

// watch turns Raft's leader and role observations into events, and on
// becoming leader applies a barrier: once it returns, the new leader has
// applied everything earlier leaders committed, and may serve reads.
func (n *Node) watch(obs chan raft.Observation) {
	defer n.wg.Done()
	for {
		select {
		case <-n.stop:
			return
		case o := <-obs:
			switch d := o.Data.(type) {
			case raft.ResumedHeartbeatObservation:
				n.peers.resumed(n.addrOf(string(d.PeerID)))
				continue
			case raft.LeaderObservation:
				n.logLeader(d)
			}
			n.events.fire()
			if st, ok := o.Data.(raft.RaftState); ok && st == raft.Leader {
				n.wg.Add(1)
				go n.catchUp(n.raft.CurrentTerm())
			}
		}
	}
}

// logLeader says, once per leader and term, that this node became leader
// or follows another: one INFO line on each node for a leadership change.
func (n *Node) logLeader(o raft.LeaderObservation) {
	if o.LeaderID == "" {
		n.log.Debug("no leader", "term", n.raft.CurrentTerm())
		return
	}
	term := n.raft.CurrentTerm()
	key := fmt.Sprintf("%s@%d", o.LeaderID, term)
	if key == n.seen {
		return
	}
	n.seen = key
	if o.LeaderAddr != "" {
		n.peers.resumed(string(o.LeaderAddr)) // a peer that leads is up
	}
	if string(o.LeaderID) == n.opts.ID {
		n.log.Info("became leader", "term", term, "leader_id", string(o.LeaderID))
		return
	}
	n.log.Info("following leader", "term", term, "leader_id", string(o.LeaderID), "leader_raft", string(o.LeaderAddr))
}

// addrOf returns the Raft address of member id ("" if unknown).
func (n *Node) addrOf(id string) string {
	servers, _ := n.Servers()
	for _, s := range servers {
		if string(s.ID) == id {
			return string(s.Address)
		}
	}
	return ""
}

// idOf returns the id of the member at Raft address addr ("" if unknown).
func (n *Node) idOf(addr string) string {
	servers, _ := n.Servers()
	for _, s := range servers {
		if string(s.Address) == addr {
			return string(s.ID)
		}
	}
	return ""
}

func (n *Node) catchUp(term uint64) {
	defer n.wg.Done()
	for n.raft.State() == raft.Leader && n.raft.CurrentTerm() == term {
		if err := n.raft.Barrier(n.opts.ApplyTimeout).Error(); err == nil {
			if n.raft.CurrentTerm() == term {
				n.readTerm.Store(term)
				n.events.fire()
			}
			return
		}
		select {
		case <-n.stop:
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// alone reports whether this node is the only voter of its configuration.
func (n *Node) alone() bool {
	servers, err := n.Servers()
	return err == nil && len(servers) == 1 && string(servers[0].ID) == n.opts.ID
}

// electAloneAtOnce makes a node that is the only voter of its cluster
// elect itself now rather than after a heartbeat timeout (one to two
// seconds): Raft re-checks its timer when the heartbeat timeout shrinks,
// and a node that has never heard from a leader then campaigns at once.
func (n *Node) electAloneAtOnce() {
	if !n.alone() {
		return
	}
	rc := n.raft.ReloadableConfig()
	rc.HeartbeatTimeout -= time.Millisecond
	if err := n.raft.ReloadConfig(rc); err != nil {
		n.log.Debug("fast self-election", "err", err)
	}
}

func (n *Node) viewPath() string { return filepath.Join(n.opts.DataDir, "view.json") }

// saveViews saves the applied state to the data dir every second it
// changed, and once more at shutdown. A save that takes long (many quota
// counters) spaces the next ones out: at most a tenth of the time goes to
// saving.
func (n *Node) saveViews() {
	defer n.wg.Done()
	var saved uint64
	var next time.Time
	save := func(force bool) {
		if b := n.fsm.boot.Load(); b != nil && n.fsm.Applied() < b.index {
			return // still behind what was saved last time
		}
		if n.fsm.Applied() == saved || !force && time.Now().Before(next) {
			return
		}
		began := time.Now()
		idx, err := n.fsm.SaveView(n.viewPath())
		if err != nil {
			n.log.Warn("saving the applied state", "err", err)
			return
		}
		saved, next = idx, time.Now().Add(10*time.Since(began))
	}
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-n.stop:
			save(true)
			return
		case <-t.C:
			save(false)
		}
	}
}

// relayNotify drains Raft's leadership notifications, which Raft blocks on,
// into a one-slot signal that register picks up when it can.
func (n *Node) relayNotify() {
	defer n.wg.Done()
	for {
		select {
		case <-n.stop:
			return
		case <-n.notify:
			select {
			case n.changed <- struct{}{}:
			default:
			}
		}
	}
}

// CaughtUp reports whether the node is Ready and every server of the Raft
// configuration is in the replicated member map: before that, a node
// started with --bootstrap-peers counts fewer members than there are.
func (n *Node) CaughtUp() bool { return n.Ready() && n.peersRegistered(n.fsm.State()) }

func (n *Node) peersRegistered(st *State) bool {
	servers, err := n.Servers()
	if err != nil {
		return false
	}
	for _, s := range servers {
		if _, ok := st.Members[string(s.ID)]; !ok {
			return false
		}
	}
	return true
}

// Ready reports whether the node serves a current view: it has not been
// removed, knows a leader, has applied everything it knows committed, and,
// as leader, has applied an entry of its own term.
//
// A commit index of 0 means the node has not heard one from a leader yet
// (a restarted node whose log is not replayed): not ready.
func (n *Node) Ready() bool {
	if n.removed.Load() {
		return false
	}
	if addr, _ := n.raft.LeaderWithID(); addr == "" {
		return false
	}
	if n.raft.State() == raft.Leader && n.readTerm.Load() != n.raft.CurrentTerm() {
		return false
	}
	commit := n.raft.CommitIndex()
	return commit > 0 && n.AppliedIndex() >= commit
}

// AppliedIndex returns the index up to which the state machine has applied
// the log. Raft's own applied index moves when an entry is handed to the
// state machine, not when it is applied; the state machine's counts only
// the entries it sees (commands and configurations). This is Raft's when
// every command or configuration entry up to it has been applied (what
// lies between is no-ops and barriers), else the state machine's.
func (n *Node) AppliedIndex() uint64 {
	fa, ra := n.fsm.Applied(), n.raft.AppliedIndex()
	if fa >= ra {
		return fa
	}
	if ra-fa > 64 {
		return fa
	}
	var l raft.Log
	for i := ra; i > fa; i-- {
		if err := n.logs.GetLog(i, &l); err != nil {
			return ra // compacted into a snapshot that is restored
		}
		if l.Type == raft.LogCommand || l.Type == raft.LogConfiguration {
			return fa
		}
	}
	return ra
}

// Stats returns hashicorp/raft's figures.
func (n *Node) Stats() map[string]string { return n.raft.Stats() }

// Role returns leader, follower, candidate or shutdown.
func (n *Node) Role() string { return strings.ToLower(n.raft.State().String()) }

// Servers returns the Raft configuration's servers.
func (n *Node) Servers() ([]raft.Server, error) {
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, err
	}
	return f.Configuration().Servers, nil
}

// Voter is one server of the Raft configuration, as RL.CLUSTER NODES
// lists it.
type Voter struct {
	ID, RaftAddr string
	Voter        bool // false: a non-voter
}

// Voters returns the servers of the current Raft configuration.
func (n *Node) Voters() ([]Voter, error) {
	servers, err := n.Servers()
	out := make([]Voter, len(servers))
	for i, s := range servers {
		out[i] = Voter{ID: string(s.ID), RaftAddr: string(s.Address), Voter: s.Suffrage == raft.Voter}
	}
	return out, err
}

// Barrier waits until every entry committed before it has been applied.
func (n *Node) Barrier(timeout time.Duration) error { return n.raft.Barrier(timeout).Error() }

// Snapshot asks Raft to take a snapshot now.
func (n *Node) Snapshot() error { return n.raft.Snapshot().Error() }

// Shutdown stops the node: a leader first hands leadership to another
// voter, then Raft stops, then its stores close.
func (n *Node) Shutdown() error {
	n.stopOnce.Do(func() { close(n.stop) })
	n.wg.Wait()
	if n.raft.State() == raft.Leader {
		if servers, err := n.Servers(); err == nil && len(servers) > 1 {
			if err := n.raft.LeadershipTransfer().Error(); err != nil {
				n.log.Warn("leadership transfer", "err", err)
			} else {
				n.log.Info("leadership transferred")
			}
		}
	}
	err := n.raft.Shutdown().Error()
	n.remote.Close()
	n.trans.Close()
	n.stable.close()
	if cerr := n.bolt.Close(); err == nil {
		err = cerr
	}
	return err
}

// Entry returns the log entry at index as this node's log holds it (from
// its log cache when there), or an error for an index it does not hold or
// that is not a command.
func (n *Node) Entry(index uint64) (*Entry, error) {
	var l raft.Log
	if err := n.logs.GetLog(index, &l); err != nil {
		return nil, err
	}
	if l.Type != raft.LogCommand {
		return nil, fmt.Errorf("raftfsm: entry %d is not a command", index)
	}
	return Decode(l.Data)
}
