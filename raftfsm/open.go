package raftfsm

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

// Open opens (or creates) the node's Raft state in DataDir and starts it:
// a node with no state bootstraps (alone, or with Peers) or joins.
func Open(o Options) (*Node, error) {
	o = o.withDefaults()
	if err := os.MkdirAll(o.DataDir, 0o750); err != nil {
		return nil, fmt.Errorf("--data-dir: %w", err)
	}
	hl, peers := raftLogger(o.Logger, o.LogLevel)
	n := newNode(o, peers)
	snaps, err := n.openStores(hl)
	if err != nil {
		return nil, err
	}
	existing, err := n.startRaft(hl, snaps)
	if err != nil {
		return nil, err
	}
	n.start()
	n.log.Info("raft started", "id", n.opts.ID, "raft", n.opts.RaftAddr, "existing_state", existing,
		"bootstrap_peers", len(o.Peers), "join", o.Join)
	return n, nil
}

func (o Options) withDefaults() Options {
	if o.ApplyTimeout == 0 {
		o.ApplyTimeout = 5 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.Voters == 0 {
		o.Voters = defaultVoters
	}
	if o.ProbeInterval == 0 {
		o.ProbeInterval = defaultProbeInterval
	}
	if o.UnreachableAfter == 0 {
		o.UnreachableAfter = defaultUnreachableAfter
	}
	if o.VoterGrace == 0 {
		o.VoterGrace = defaultVoterGrace
	}
	if o.VoterStabilization == 0 {
		o.VoterStabilization = defaultVoterStabilization
	}
	if o.Remote == nil {
		o.Remote = noRemote{}
	}
	return o
}

func newNode(o Options, peers *peerLog) *Node {
	n := &Node{opts: o, log: o.Logger, fsm: NewFSM(), stop: make(chan struct{}), notify: make(chan bool, 16), changed: make(chan struct{}, 1),
		remote: o.Remote, peers: peers}
	// Write ids continue across restarts (the clock has moved on), so a
	// restarted node's writes are never mistaken for its earlier ones.
	n.seq.Store(uint64(time.Now().UnixNano()))
	n.fsm.OnConfiguration = n.configurationApplied
	n.fsm.OnMembers = func(st *State) {
		if st.Removed[n.opts.ID] {
			n.setRemoved(true)
		}
	}
	return n
}

// openStores opens the log store (behind a cache), the snapshot store and
// the transport, and settles the node's Raft address (the bound port, if
// 0 was asked for) and its id (that address, if none was given).
func (n *Node) openStores(hl hclog.Logger) (*raft.FileSnapshotStore, error) {
	o := n.opts
	var err error
	if n.bolt, err = raftboltdb.New(raftboltdb.Options{Path: filepath.Join(o.DataDir, "raft.db")}); err != nil {
		return nil, fmt.Errorf("raft log store: %w", err)
	}
	cleanup := func() { n.bolt.Close() }
	if n.logs, err = raft.NewLogCache(512, n.bolt); err != nil {
		cleanup()
		return nil, err
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(o.DataDir, 2, hl)
	if err != nil {
		cleanup()
		return nil, fmt.Errorf("raft snapshots: %w", err)
	}
	if n.trans, err = newTransport(o, hl); err != nil {
		cleanup()
		return nil, fmt.Errorf("--raft-addr %s: %w", o.RaftAddr, err)
	}
	n.opts.RaftAddr = string(n.trans.LocalAddr())
	if n.opts.ID == "" {
		n.opts.ID = n.opts.RaftAddr
	}
	return snaps, nil
}

// startRaft starts Raft on the open stores: a node with state checks that
// its address is the one on record; a new node that joins no cluster
// bootstraps one. It reports whether the node had state.
func (n *Node) startRaft(hl hclog.Logger, snaps *raft.FileSnapshotStore) (bool, error) {
	closeStores := func() {
		n.trans.Close()
		n.bolt.Close()
	}
	existing, err := raft.HasExistingState(n.logs, n.bolt, snaps)
	if err != nil {
		closeStores()
		return false, err
	}
	n.fresh.Store(!existing)
	n.stable = &stableStore{s: n.bolt}
	if n.raft, err = raft.NewRaft(raftConfig(n.opts, hl, n.notify), n.fsm, n.logs, n.stable, snaps, n.trans); err != nil {
		closeStores()
		return false, err
	}
	n.trans.watch(n.raft)
	if existing {
		if err := n.checkAddress(); err != nil {
			n.raft.Shutdown().Error()
			closeStores()
			return false, err
		}
	} else if n.opts.Join == "" && n.opts.Discover == nil {
		if err := n.bootstrap(); err != nil {
			n.Shutdown()
			return false, err
		}
	}
	return existing, nil
}

// raftConfig is hashicorp/raft's configuration for o. Its default timing
// (1 s heartbeat and election timeouts, 500 ms lease) stands unless o
// sets it: a loaded machine's pauses do not start needless elections, and
// failover takes one to two seconds.
func raftConfig(o Options, hl hclog.Logger, notify chan bool) *raft.Config {
	cfg := raft.DefaultConfig()
	cfg.LocalID = raft.ServerID(o.ID)
	cfg.Logger = hl
	cfg.NotifyCh = notify
	override(&cfg.SnapshotThreshold, o.SnapshotThreshold)
	override(&cfg.SnapshotInterval, o.SnapshotInterval)
	override(&cfg.TrailingLogs, o.TrailingLogs)
	override(&cfg.HeartbeatTimeout, o.HeartbeatTimeout)
	override(&cfg.ElectionTimeout, o.ElectionTimeout)
	override(&cfg.LeaderLeaseTimeout, o.LeaderLeaseTimeout)
	return cfg
}

// override sets *dst to v if v is set (above zero).
func override[T uint64 | time.Duration](dst *T, v T) {
	if v > 0 {
		*dst = v
	}
}

// bootstrap writes the first configuration of a new cluster: this node
// alone, or every node of Peers (each started with the identical list).
// A cluster bootstrapped already is no error.
func (n *Node) bootstrap() error {
	servers := []raft.Server{{ID: raft.ServerID(n.opts.ID), Address: raft.ServerAddress(n.opts.RaftAddr), Suffrage: raft.Voter}}
	if len(n.opts.Peers) > 0 {
		servers = servers[:0]
		for _, p := range n.opts.Peers {
			servers = append(servers, raft.Server{ID: raft.ServerID(p.ID), Address: raft.ServerAddress(p.RaftAddr), Suffrage: raft.Voter})
		}
	}
	if err := n.raft.BootstrapCluster(raft.Configuration{Servers: servers}).Error(); err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
		return fmt.Errorf("bootstrap: %w", err)
	}
	return nil
}

// start starts the node's goroutines once Raft runs: the observer of
// leadership, the relay of Raft's notifications, registration and the
// saving of views.
func (n *Node) start() {
	obs := make(chan raft.Observation, 16)
	n.raft.RegisterObserver(raft.NewObserver(obs, false, func(o *raft.Observation) bool {
		switch o.Data.(type) {
		case raft.LeaderObservation, raft.RaftState, raft.ResumedHeartbeatObservation, raft.FailedHeartbeatObservation:
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
	n.wg.Add(6)
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
	go n.autopilot()
	go n.probe()
	if n.opts.Discover != nil {
		n.wg.Add(1)
		go n.discover()
	}
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

func newTransport(o Options, hl hclog.Logger) (*transport, error) {
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
	return newFilteredTransport(raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: st, MaxPool: 3, Timeout: 10 * time.Second, Logger: hl,
	})), nil
}

// transport is Raft's network transport with the heartbeat fast path
// kept only where it is safe. Given a handler (SetHeartbeatHandler),
// hashicorp/raft answers a heartbeat on the transport's goroutine, beside
// its main loop, so that a follower's heartbeats do not wait behind its
// disk writes. But a heartbeat of a newer term, there, moves a node that
// still leads to that term while its main loop is writing the entries of
// client writes, which it then stores under the new term although it does
// not lead it; the new leader's log matches them by index and term and
// never replaces them, so the node applies entries no other node has at
// indexes all of them committed (hashicorp/raft#695). The robustness suite
// saw it: a leader cut off while taking writes, then two nodes with
// different states at the same applied index.
//
// So a heartbeat takes the fast path only when it cannot change this
// node's term or role: the node follows, and the heartbeat's term is not
// newer than its own. Terms only grow, and a node that becomes a candidate
// raises its own, so by the time Raft looks at such a heartbeat it is of
// this node's term (a follower's, handled as before) or older (ignored).
// Every other heartbeat goes to Raft's main loop, in order with everything
// else, as every other RPC does.
type transport struct {
	*raft.NetworkTransport
	in   chan raft.RPC // what Raft's main loop consumes
	node atomic.Pointer[raftView]
	stop chan struct{}
	once sync.Once
}

// raftView is what the filter reads of the node's Raft (a *raft.Raft).
type raftView interface {
	State() raft.RaftState
	CurrentTerm() uint64
}

func newFilteredTransport(nt *raft.NetworkTransport) *transport {
	t := &transport{NetworkTransport: nt, in: make(chan raft.RPC), stop: make(chan struct{})}
	go func() {
		from := nt.Consumer()
		for {
			select {
			case rpc := <-from:
				select {
				case t.in <- rpc:
				case <-t.stop:
					rpc.Respond(nil, raft.ErrTransportShutdown)
					return
				}
			case <-t.stop:
				return
			}
		}
	}()
	return t
}

// watch gives the filter the node's Raft; until then every heartbeat
// goes to the main loop.
func (t *transport) watch(r raftView) { t.node.Store(&r) }

// Consumer is what Raft's main loop reads: every RPC, and the heartbeats
// kept off the fast path.
func (t *transport) Consumer() <-chan raft.RPC { return t.in }

// SetHeartbeatHandler installs Raft's fast path behind the filter.
func (t *transport) SetHeartbeatHandler(fast func(raft.RPC)) {
	if fast == nil {
		t.NetworkTransport.SetHeartbeatHandler(nil)
		return
	}
	t.NetworkTransport.SetHeartbeatHandler(func(rpc raft.RPC) {
		if t.fastPathSafe(rpc) {
			fast(rpc)
			return
		}
		select {
		case t.in <- rpc:
		case <-t.stop:
			rpc.Respond(nil, raft.ErrTransportShutdown)
		}
	})
}

func (t *transport) fastPathSafe(rpc raft.RPC) bool {
	r := t.node.Load()
	a, ok := rpc.Command.(*raft.AppendEntriesRequest)
	return r != nil && ok && (*r).State() == raft.Follower && a.Term <= (*r).CurrentTerm()
}

// Close stops the filter and the network transport.
func (t *transport) Close() error {
	t.once.Do(func() { close(t.stop) })
	return t.NetworkTransport.Close()
}

// advertAddr is a Raft address as written, host name or IP.
type advertAddr string

func (a advertAddr) Network() string { return "tcp" }

func (a advertAddr) String() string { return string(a) }

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
