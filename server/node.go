package server

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice/commands"
	"github.com/sluice-rl/sluice/fault"
	"github.com/sluice-rl/sluice/peer"
	"github.com/sluice-rl/sluice/quota"
	"github.com/sluice-rl/sluice/raftfsm"
)

// Node is a running sluice process: the RESP/HTTP server and its Raft
// member.
type Node struct {
	Server *Server
	Raft   *raftfsm.Node
	log    *slog.Logger
	failed chan error
	stop   chan struct{}
	// reserver holds this node's quota units (in a cluster); keepUnits,
	// set by tests, stops the node without giving them back, as a crash
	// would.
	reserver  *quota.Reserver
	keepUnits bool
}

// NodeHooks lets tests adjust the Raft options (timing, snapshots) and
// the clock, before anything runs.
type NodeHooks struct {
	Raft func(*raftfsm.Options)
	Now  func() int64
}

// Open starts a node from a validated config: bind the sockets, open Raft
// (bootstrapping or joining), then serve.
func Open(cfg Config, log *slog.Logger) (*Node, error) { return OpenWith(cfg, log, NodeHooks{}) }

// OpenWith is Open with hooks for tests.
func OpenWith(cfg Config, log *slog.Logger, hooks NodeHooks) (*Node, error) {
	s, err := New(cfg, log)
	if err != nil {
		return nil, err
	}
	if hooks.Now != nil {
		s.env.Now = hooks.Now
	}
	if err := s.Listen(); err != nil {
		return nil, err
	}
	advertise := cfg.Advertise
	if _, port, _ := net.SplitHostPort(advertise); port == "0" {
		advertise = s.ln.Addr().String()
	}
	o := raftfsm.Options{
		ID: cfg.NodeID, RaftAddr: cfg.RaftAddr, RespAddr: advertise, DataDir: filepath.Join(cfg.DataDir, "raft"),
		Join: cfg.Join, Logger: log.With("component", "raft"),
		LogLevel: cfg.LogLevel, ApplyTimeout: cfg.ApplyTimeout, Voters: cfg.Voters,
	}
	if isDNSJoin(cfg.Join) {
		o.Join = ""
		o.Discover, o.BootstrapExpect = dnsDiscovery(cfg, advertise), cfg.WithDefaults().BootstrapExpect
	}
	if cfg.BootstrapPeers != "" {
		peers, _ := ParsePeers(cfg.BootstrapPeers)
		known := false
		for _, p := range peers {
			o.Peers = append(o.Peers, raftfsm.Member{ID: p.ID, RaftAddr: p.RaftAddr, RespAddr: p.RespAddr})
			known = known || p.ID == cfg.NodeID
		}
		if !known {
			s.closeListeners()
			return nil, fmt.Errorf("--bootstrap-peers does not list this node's --node-id %q", cfg.NodeID)
		}
	}
	if cfg.TLSCert != "" {
		if o.TLS, o.ClientTLS, err = peerTLS(cfg); err != nil {
			s.closeListeners()
			return nil, err
		}
	}
	applyHist := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "sluice_raft_apply_duration_seconds", Help: "Time from proposing a configuration write to its commit and apply.",
		Buckets: prometheus.ExponentialBuckets(100e-6, 2, 16),
	})
	o.ObserveApply = applyHist.Observe
	if hooks.Raft != nil {
		hooks.Raft(&o)
	}
	rem := peer.NewRemote(cfg.NodeID, cfg.peerLogin, o.ClientTLS)
	o.Remote = rem
	rn, err := raftfsm.Open(o)
	if err != nil {
		s.closeListeners()
		return nil, err
	}
	rem.SetID(rn.ID())
	peerUser, peerPass := cfg.peerLogin(rn.ID())
	s.env.Cluster = rn
	s.svc.Cluster, s.svc.Quotas = rn, rn.FSM()
	// Limiting calls wait, then answer LOADING, until this node has caught
	// up with the cluster (loading.go).
	s.svc.StartLoading()
	rn.FSM().SetMaxQuotaCounters(cfg.MaxQuotas)
	s.svc.Store.SetQuotaSource(rn.FSM())
	s.env.Info = func(sec string) []commands.InfoField { return raftInfo(rn, sec) }
	s.SetReady(func() bool { return rn.ReadyWithin(time.Second) })
	s.env.Metrics.Registry.MustRegister(applyHist, raftCollector{rn})
	n := &Node{Server: s, Raft: rn, log: log, failed: make(chan error, 1), stop: make(chan struct{})}
	n.startQuotaSync(&cfg)
	n.startReservations(&cfg)
	// Node-to-node traffic (package peer): consumption, leases, slots and
	// relayed client commands.
	pn := &peer.Node{Raft: rn, Service: s.svc, Registry: s.env.Metrics.Registry, Log: log, Stop: n.stop,
		TLS: o.ClientTLS, User: peerUser, Password: peerPass, ApplyTimeout: cfg.ApplyTimeout,
		DataTimeout: cfg.ScriptTimeLimit + cfg.ApplyTimeout}
	pn.Start(cfg.SyncInterval, s.env.Started)
	ps := &peer.Server{Service: s.svc}
	s.env.Peers = func(c commands.Writer, from string, args [][]byte) bool { return ps.Serve(c, from, args) }
	go n.watchLoading(cfg.LoadingTimeout)
	s.fail = func(err error) {
		select {
		case n.failed <- err:
		default:
		}
	}
	s.Serve()
	if cfg.Budgets != "" {
		go n.seed(cfg.Budgets)
	}
	return n, nil
}

func (s *Server) closeListeners() {
	s.ln.Listener.Close()
	if s.httpLn != nil {
		s.httpLn.Close()
	}
	if s.grpcLn != nil {
		s.grpcLn.Close()
	}
	for _, x := range s.side {
		x.ln.Close()
	}
}

// peerTLS builds the TLS configurations for Raft between nodes: peers must
// present a certificate signed by --tls-ca or, without it, this node's own
// certificate (one certificate shared by all nodes).
func peerTLS(cfg Config) (server, client *tls.Config, err error) {
	cert, err := tls.LoadX509KeyPair(cfg.TLSCert, cfg.TLSKey)
	if err != nil {
		return nil, nil, fmt.Errorf("--tls-cert/--tls-key: %v", err)
	}
	var pool *x509.CertPool
	if cfg.TLSCA != "" {
		if pool, err = loadCA("--tls-ca", cfg.TLSCA); err != nil {
			return nil, nil, err
		}
	} else {
		pool = x509.NewCertPool()
		leaf, err := x509.ParseCertificate(cert.Certificate[0])
		if err != nil {
			return nil, nil, fmt.Errorf("--tls-cert: %v", err)
		}
		pool.AddCert(leaf)
	}
	server, client = raftfsm.PeerTLS(cert, pool)
	return server, client, nil
}

// seed imports the --budgets file once a leader exists, if the tree is
// still empty then (IFEMPTY makes concurrent seeding by several nodes safe).
func (n *Node) seed(path string) {
	cfgs, err := ReadBudgets(path)
	if err != nil {
		n.log.Error("budgets not imported", "err", err)
		return
	}
	for attempt := 0; ; attempt++ {
		select {
		case <-n.stop:
			return
		case <-time.After(time.Duration(min(attempt, 10)) * 200 * time.Millisecond):
		}
		if n.Raft.State().Tree.Len() > 0 {
			return
		}
		if _, _, ok := n.Raft.Leader(); !ok {
			continue
		}
		warn, err := n.Server.svc.ImportBudgets(cfgs, false, true)
		switch {
		case err == nil:
			n.log.Info("budget tree seeded", "file", path, "warn", warn)
			return
		case fault.Code(err) != "TRYAGAIN":
			n.log.Error("--budgets: not imported", "file", path, "err", err)
			return
		}
		n.log.Warn("seeding budgets: will retry", "err", err)
	}
}

// Failed delivers an error if the node stops on its own.
func (n *Node) Failed() <-chan error { return n.failed }

// Close stops the node gracefully: stop accepting and finish in-flight
// replies, then hand over leadership and stop Raft.
func (n *Node) Close() {
	select {
	case <-n.stop:
		return
	default:
		close(n.stop)
	}
	n.Server.Shutdown()
	if n.reserver != nil && !n.keepUnits {
		// Served calls are over: what it holds unused goes back now.
		n.reserver.GiveBack(time.Second)
	}
	if err := n.Raft.Shutdown(); err != nil {
		n.log.Warn("raft shutdown", "err", err)
	}
}

func raftInfo(n *raftfsm.Node, sec string) []commands.InfoField {
	if sec != "raft" {
		return nil
	}
	st := n.Stats()
	id, addr, _ := n.Leader()
	f := func(k, v string) commands.InfoField { return commands.InfoField{Name: k, Value: v} }
	return []commands.InfoField{
		f("node_id", n.ID()), f("role", n.Role()), f("leader_id", id), f("leader_addr", addr),
		f("term", st["term"]), f("commit_index", st["commit_index"]), f("applied_index", strconv.FormatUint(n.AppliedIndex(), 10)),
		f("last_log_index", st["last_log_index"]), f("last_snapshot_index", st["last_snapshot_index"]),
		f("num_peers", st["num_peers"]), f("last_contact", st["last_contact"]),
		f("members", strconv.Itoa(len(n.State().Members))), f("budgets", strconv.Itoa(n.State().Tree.Len())),
		f("budget_version", strconv.FormatUint(n.State().Tree.Version(), 10)),
		f("quota_counters", strconv.Itoa(n.FSM().QuotaCounters())),
	}
}

// raftCollector bridges hashicorp/raft's figures into Prometheus at scrape
// time.
type raftCollector struct{ n *raftfsm.Node }

var (
	raftStateDesc   = prometheus.NewDesc("sluice_raft_state", "Raft role: 0 follower, 1 candidate, 2 leader, 3 shutdown.", nil, nil)
	raftTermDesc    = prometheus.NewDesc("sluice_raft_term", "Current Raft term.", nil, nil)
	raftCommitDesc  = prometheus.NewDesc("sluice_raft_commit_index", "Highest Raft log index known committed.", nil, nil)
	raftAppliedDesc = prometheus.NewDesc("sluice_raft_applied_index", "Highest Raft log index applied to the budget tree.", nil, nil)
	raftLeaderDesc  = prometheus.NewDesc("sluice_raft_leader", "1 if this node knows a leader, else 0.", nil, nil)
	raftPeersDesc   = prometheus.NewDesc("sluice_raft_peers", "Other voters in the Raft configuration.", nil, nil)
)

func (c raftCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{raftStateDesc, raftTermDesc, raftCommitDesc, raftAppliedDesc, raftLeaderDesc, raftPeersDesc} {
		ch <- d
	}
}

func (c raftCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.n.Stats()
	num := func(k string) float64 { v, _ := strconv.ParseFloat(st[k], 64); return v }
	state := map[string]float64{"Follower": 0, "Candidate": 1, "Leader": 2, "Shutdown": 3}[st["state"]]
	leader := 0.0
	if _, _, ok := c.n.Leader(); ok {
		leader = 1
	}
	ch <- prometheus.MustNewConstMetric(raftStateDesc, prometheus.GaugeValue, state)
	ch <- prometheus.MustNewConstMetric(raftTermDesc, prometheus.GaugeValue, num("term"))
	ch <- prometheus.MustNewConstMetric(raftCommitDesc, prometheus.GaugeValue, num("commit_index"))
	ch <- prometheus.MustNewConstMetric(raftAppliedDesc, prometheus.GaugeValue, float64(c.n.AppliedIndex()))
	ch <- prometheus.MustNewConstMetric(raftLeaderDesc, prometheus.GaugeValue, leader)
	ch <- prometheus.MustNewConstMetric(raftPeersDesc, prometheus.GaugeValue, num("num_peers"))
}
