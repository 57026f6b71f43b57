package raftfsm

import (
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
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/sluice-rl/sluice/internal/respclient"
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
	// required when it has ClientCAs); ClientTLS dials peers, for Raft and
	// for RESP. Both nil: plain TCP.
	TLS, ClientTLS *tls.Config
	// User and Password authenticate RESP calls to peers (join,
	// forwarding); an empty User means the default user.
	User, Password string
	Logger         *slog.Logger
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

// Node is this process's Raft member.
type Node struct {
	opts    Options
	log     *slog.Logger
	raft    *raft.Raft
	fsm     *FSM
	bolt    *raftboltdb.BoltStore
	trans   *raft.NetworkTransport
	client  *respclient.Client // joins
	fwd     *respclient.Client // forwarded writes
	notify  chan bool
	changed chan struct{}

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
	ErrNotLeader = &Error{Code: "TRYAGAIN", Msg: "not the leader"}
	ErrNoLeader  = &Error{Code: "TRYAGAIN", Msg: "no leader"}
	ErrTimeout   = &Error{Code: "TRYAGAIN", Msg: "no quorum: the write was not committed in time; it may still be applied, and writes are safe to repeat"}
	ErrLost      = &Error{Code: "TRYAGAIN", Msg: "leadership lost while applying: the write may or may not have been applied; writes are safe to repeat"}
	ErrShutdown  = &Error{Code: "CLUSTERDOWN", Msg: "this node is shutting down"}
)

// Error is a cluster error with its reply code.
type Error struct{ Code, Msg string }

func (e *Error) Error() string { return e.Code + " " + e.Msg }

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
	hl := raftLogger(o.Logger, o.LogLevel)
	n := &Node{opts: o, log: o.Logger, fsm: NewFSM(), stop: make(chan struct{}), notify: make(chan bool, 16), changed: make(chan struct{}, 1),
		client: &respclient.Client{TLS: o.ClientTLS, User: o.User, Password: o.Password, Name: "sluice-peer:" + o.ID, Timeout: 10 * time.Second},
		fwd:    &respclient.Client{TLS: o.ClientTLS, User: o.User, Password: o.Password, Name: ForwardPrefix + o.ID, Timeout: 10 * time.Second}}
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
	n.client.Name, n.fwd.Name = "sluice-peer:"+o.ID, ForwardPrefix+o.ID
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
	if n.raft, err = raft.NewRaft(cfg, n.fsm, logs, n.bolt, snaps, n.trans); err != nil {
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
	// Serve what this node had applied before it stopped until Raft has
	// replayed that far, so that a node restarted without a quorum still
	// limits with its last tree.
	if err := n.fsm.LoadView(n.viewPath(), n.raft.AppliedIndex()); err != nil {
		n.log.Warn("saved view not used", "err", err)
	}
	n.wg.Add(3)
	go n.relayNotify()
	go n.register()
	go n.saveViews()
	n.log.Info("raft started", "id", o.ID, "raft", o.RaftAddr, "existing_state", existing,
		"bootstrap_peers", len(o.Peers), "join", o.Join)
	return n, nil
}

// raftLogger routes hashicorp/raft's hclog lines into slog, so that every
// line the process writes has one format (text or JSON). Raft's info lines
// are chatty; unless level is "debug" only its warnings and errors pass.
func raftLogger(l *slog.Logger, level string) hclog.Logger {
	minLevel := hclog.Warn
	if strings.EqualFold(level, "debug") {
		minLevel = hclog.Debug
	}
	il := hclog.NewInterceptLogger(&hclog.LoggerOptions{Name: "raft", Level: minLevel, Output: io.Discard})
	il.RegisterSink(slogSink{l: l, min: minLevel})
	return il
}

type slogSink struct {
	l   *slog.Logger
	min hclog.Level
}

func (s slogSink) Accept(name string, level hclog.Level, msg string, args ...any) {
	if level < s.min || level == hclog.Off {
		return
	}
	lv := slog.LevelInfo
	switch {
	case level <= hclog.Debug:
		lv = slog.LevelDebug
	case level == hclog.Warn:
		lv = slog.LevelWarn
	case level >= hclog.Error:
		lv = slog.LevelError
	}
	for i, a := range args {
		if f, ok := a.(hclog.Format); ok && len(f) > 0 {
			if format, ok := f[0].(string); ok {
				args[i] = fmt.Sprintf(format, f[1:]...)
			}
		}
	}
	s.l.Log(context.Background(), lv, msg, append([]any{"logger", name}, args...)...)
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

// Apply proposes an entry and waits, at most ApplyTimeout, for it to be
// committed and applied. Only the leader may apply: others get
// ErrNotLeader and should forward.
func (n *Node) Apply(entry []byte) (Response, error) {
	if n.raft.State() != raft.Leader {
		return Response{}, ErrNotLeader
	}
	start := time.Now()
	f := n.raft.Apply(entry, n.opts.ApplyTimeout)
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	t := time.NewTimer(n.opts.ApplyTimeout)
	defer t.Stop()
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
	case <-t.C:
		return Response{}, ErrTimeout
	case <-n.stop:
		return Response{}, ErrShutdown
	}
}

// Forward sends a write to the leader over RESP and returns its raw reply.
func (n *Node) Forward(args [][]byte) ([]byte, error) {
	_, addr, ok := n.Leader()
	if !ok || addr == "" {
		return nil, ErrNoLeader
	}
	raw, err := n.fwd.Do(addr, args)
	if err != nil {
		return nil, &Error{Code: "TRYAGAIN", Msg: "leader " + addr + " unreachable: " + err.Error()}
	}
	return raw, nil
}

// Join adds a node as a voter (leader only), first removing any stale
// member with the same id or Raft address, and records its RESP address.
// It is idempotent: joining a member again only refreshes its record.
func (n *Node) Join(id, raftAddr, respAddr string) error {
	if n.raft.State() != raft.Leader {
		return ErrNotLeader
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
	if _, err := n.Apply((&Entry{Type: AddMember, Member: &Member{ID: id, RespAddr: respAddr, RaftAddr: raftAddr}}).Encode()); err != nil {
		return err
	}
	if already {
		return nil
	}
	if err := n.raft.AddVoter(raft.ServerID(id), raft.ServerAddress(raftAddr), 0, n.opts.ApplyTimeout).Error(); err != nil {
		return &Error{Code: "TRYAGAIN", Msg: "adding voter: " + err.Error()}
	}
	n.log.Info("node joined", "id", id, "raft", raftAddr, "resp", respAddr)
	return nil
}

// Leave removes a node from the cluster (leader only).
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
	_, member := n.fsm.State().Members[id]
	if !found && !member {
		return &Error{Code: "ERR", Msg: "no node with id '" + id + "'"}
	}
	if member {
		if _, err := n.Apply((&Entry{Type: RemoveMember, ID: id}).Encode()); err != nil {
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

// register makes sure the replicated member map holds this node (and, on
// the leader, every bootstrap peer) with its current addresses: a new node
// joins through Join or the leader; a restarted node with a new RESP
// address refreshes its record.
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
	if n.IsLeader() {
		voters := map[string]bool{}
		if servers, err := n.Servers(); err == nil {
			for _, s := range servers {
				voters[string(s.ID)] = true
			}
		}
		for i, p := range append([]Member{me}, n.opts.Peers...) {
			if i > 0 && (p.ID == me.ID || st.Members[p.ID] != (Member{}) || !voters[p.ID]) {
				// A peer's own record wins over the bootstrap list, and
				// a peer that left stays gone.
				continue
			}
			if st.Members[p.ID] != p {
				if _, err := n.Apply((&Entry{Type: AddMember, Member: &p}).Encode()); err != nil {
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
			raw, err := n.client.Do(target, [][]byte{[]byte("RL.CLUSTER"), []byte("JOIN"),
				[]byte(me.ID), []byte(me.RaftAddr), []byte(me.RespAddr)})
			if err == nil && len(raw) > 0 && raw[0] == '-' {
				err = errors.New(strings.TrimSpace(string(raw[1:])))
			}
			if err != nil {
				n.log.Info("joining", "via", target, "err", err)
			}
		}
	}
	st = n.fsm.State()
	return st.Members[me.ID] == me && (!n.IsLeader() || n.peersRegistered(st))
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

// Ready reports whether the node has a leader and has applied everything
// it knows to be committed.
//
// Raft's own applied index counts its no-op and configuration entries,
// which the state machine never sees, so it is the one compared with the
// commit index. A commit index of 0 means the node has not heard one from
// a leader yet (a restarted node whose log is not replayed): not ready.
func (n *Node) Ready() bool {
	if addr, _ := n.raft.LeaderWithID(); addr == "" {
		return false
	}
	commit, _ := strconv.ParseUint(n.raft.Stats()["commit_index"], 10, 64)
	return commit > 0 && n.raft.AppliedIndex() >= commit
}

// AppliedIndex returns the index of the last log entry Raft has applied
// (configuration and no-op entries included).
func (n *Node) AppliedIndex() uint64 { return n.raft.AppliedIndex() }

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
	n.client.Close()
	n.fwd.Close()
	n.trans.Close()
	if cerr := n.bolt.Close(); err == nil {
		err = cerr
	}
	return err
}
