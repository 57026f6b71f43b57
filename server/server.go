// Package server runs a sluice node: its settings (config.go), the
// listeners — RESP (sessions, auth and ACL users, protected mode, TLS,
// protocol limits, pipelines), HTTP for /metrics, /healthz, /readyz and
// the HTTP API (package httpapi), and gRPC for Envoy's rate limit service
// (grpc.go, package envoyrls) — and the wiring of the command registry,
// the limiter service, the engine and the Raft node (node.go). It also runs the node's exchanges with its
// peers: writes forwarded to the leader (remote.go), consumption sent to
// every peer each --sync-interval (sync.go), token leases between nodes
// (lease.go), and quota's syncer, which commits the calendar quota counts
// through Raft (quota.go).
//
// RESP is read by sluice's own zero-copy parser (resp.go): redcon's server
// copies every command and allocates its argument slice, which cost more
// than the limiting itself. Replies are written with redcon's Writer, and
// handlers write to a commands.Writer of its shape, nothing else of the
// connection.
package server

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"

	"github.com/sluice-rl/sluice/access"
	"github.com/sluice-rl/sluice/commands"
	"github.com/sluice-rl/sluice/console"
	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/envoyrls"
	"github.com/sluice-rl/sluice/httpapi"
	"github.com/sluice-rl/sluice/keyspace"
	"github.com/sluice-rl/sluice/limiter"
	luascript "github.com/sluice-rl/sluice/script"
	"github.com/sluice-rl/sluice/usage"
)

// Version is the server's version, reported by HELLO and INFO.
var Version = "0.1.0"

// Server is one running sluice node.
type Server struct {
	cfg Config
	log *slog.Logger
	env *commands.Env
	reg *commands.Registry
	// svc is the limiter every front calls and the peer exchanges use.
	svc *limiter.Service

	ln       *listener
	http     *http.Server
	httpLn   net.Listener
	grpc     *grpc.Server
	grpcLn   net.Listener
	rls      *envoyrls.Server  // the Envoy front, when --grpc-addr is set
	rlsStats *envoyrls.Metrics // its metrics
	side     []*sideServer     // the drop-in's debug and Prometheus listeners
	draining atomic.Bool
	// buffers is the bytes of every connection's read buffer and queued
	// transaction together, bounded by --max-client-buffers.
	buffers  atomic.Int64
	shutdown chan struct{}
	done     chan struct{}
	wg       sync.WaitGroup
	ready    func() bool
	// certs is the certificate the listeners present (nil without TLS);
	// reload what SIGHUP compares against (reload.go).
	certs *certSource
	// grpcCerts is the certificate of --grpc-addr when it has its own
	// (--grpc-tls-cert); nil: s.certs, if any.
	grpcCerts *certSource
	reload    reloadState
	// envoyMu guards the Envoy-facing listeners while they are bound late,
	// for the first xDS response (openEnvoyPorts).
	envoyMu sync.Mutex
	// fail reports an error that ends the node (nil: logged only).
	fail func(error)
}

// New builds a node from a validated config. It binds nothing yet.
func New(cfg Config, log *slog.Logger) (*Server, error) {
	acl, err := access.LoadACL(cfg.ACLFile)
	if err != nil {
		return nil, err
	}
	reg := commands.NewRegistry()
	s := &Server{cfg: cfg, log: log, reg: reg, shutdown: make(chan struct{}), done: make(chan struct{})}
	s.aclNames(acl)
	if cfg.TLSCert != "" {
		if s.certs, err = newCertSource(cfg.TLSCert, cfg.TLSKey, "--tls-cert", "--tls-key"); err != nil {
			return nil, err
		}
	}
	if cfg.GRPCTLSCert != "" {
		if s.grpcCerts, err = newCertSource(cfg.GRPCTLSCert, cfg.GRPCTLSKey, "--grpc-tls-cert", "--grpc-tls-key"); err != nil {
			return nil, err
		}
	}
	store := engine.New(engine.Options{Shards: cfg.Shards, MaxBuckets: cfg.MaxBuckets})
	s.env = &commands.Env{
		Clients:   commands.NewClients(),
		Auth:      access.NewAuth(cfg.RequirePass, peerUser(cfg, acl)),
		PeerAuth:  access.NewPeerAuth(cfg.peerSecret(), cfg.RequirePass != "" || cfg.PeerPassword != "" || len(acl) > 0),
		Metrics:   commands.NewMetrics(reg),
		Registry:  reg,
		Version:   Version,
		Started:   time.Now(),
		MaxKeyLen: cfg.MaxKeyLen,

		SyncInterval: cfg.SyncInterval,
	}
	s.svc = &limiter.Service{Store: store, Clock: s.env.Clock, Shutdown: s.shutdown,
		Waiting: s.env.Metrics.AddWaiting, Counted: s.env.Metrics.Count, Recorder: usage.NewRecorder()}
	s.svc.Keys = keyspace.New(keyspace.Options{MaxKeys: cfg.MaxBuckets, MaxBytes: int64(cfg.MaxDataMemory)})
	s.svc.Scripts = luascript.New()
	s.svc.Scripts.TimeLimit = cfg.ScriptTimeLimit
	s.svc.Scripts.Interpret = !cfg.ScriptNative
	s.env.Service = s.svc
	s.env.ClientMemory = s.reserveBuffer
	s.env.Settings = func() []commands.Setting {
		var out []commands.Setting
		for _, kv := range s.cfg.Settings() {
			out = append(out, commands.Setting{Name: kv[0], Value: kv[1]})
		}
		// Redis settings that tools such as redis-benchmark read, with
		// sluice's truthful values: no RDB saves, no AOF, one database.
		return append(out, commands.Setting{Name: "save", Value: ""}, commands.Setting{Name: "appendonly", Value: "no"},
			commands.Setting{Name: "databases", Value: "1"})
	}
	s.ready = func() bool { return true }
	m := s.env.Metrics.Registry
	m.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_buckets", Help: "Live buckets in the store."},
			func() float64 { return float64(store.Len()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_connected_clients", Help: "Connected RESP clients."},
			func() float64 { return float64(s.env.Clients.Len()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_client_buffers_bytes", Help: "Bytes of every client connection's read buffer and queued transaction together (bounded by --max-client-buffers plus each connection's first 16 KiB read buffer)."},
			func() float64 { return float64(s.buffers.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_buckets_evicted_total", Help: "Full buckets dropped at --max-buckets to make room for new ones (nothing is lost).", ConstLabels: prometheus.Labels{"kind": "full"}},
			func() float64 { return float64(store.Evictions()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_buckets_refused_total", Help: "Calls refused because they needed a new bucket at --max-buckets while no bucket was full."},
			func() float64 { return float64(store.Refusals()) }),
	)
	m.MustRegister(newUsageMetrics(s.svc))
	s.env.Metrics.ConnectionsClosed.WithLabelValues("client_buffers") // at 0 from the start
	return s, nil
}

// ClientBufferShare is the part of --max-client-buffers that client
// buffers themselves may hold: the rest (an eighth) is room for the
// garbage the collector has not reached yet (buffers left behind as they
// grew, queues of closed connections), so that the process's memory for
// client buffers, that garbage included, stays within the flag
// (memlimit.go).
func ClientBufferShare(flag int64) int64 { return flag - flag/8 }

// reserveBuffer takes n more bytes of --max-client-buffers for a read
// buffer or a queued transaction, or gives -n back; it refuses growth
// past the buffers' share of it (ClientBufferShare). It never counts past
// the bound even for a moment (a
// refused reservation is not added and taken back), so the gauge of
// sluice_client_buffers_bytes shows what is held.
func (s *Server) reserveBuffer(n int64) bool {
	if n <= 0 {
		s.buffers.Add(n)
		return true
	}
	for {
		cur := s.buffers.Load()
		if cur+n > ClientBufferShare(int64(s.cfg.MaxClientBuffers)) {
			return false
		}
		if s.buffers.CompareAndSwap(cur, cur+n) {
			return true
		}
	}
}

// PeerUser is the user nodes authenticate as with --peer-password.
const PeerUser = "sluice-peer"

// peerUser adds the peer user to the ACL users when --peer-password is set.
func peerUser(cfg Config, acl []access.User) []access.User {
	if cfg.PeerPassword == "" {
		return acl
	}
	return append(acl, access.User{Name: PeerUser, Role: access.RoleAdmin, Hash: sha256.Sum256([]byte(cfg.PeerPassword))})
}

// peerSecret is the cluster secret nodes prove themselves to each other
// with: --peer-password, else --requirepass.
func (c *Config) peerSecret() string {
	if c.PeerPassword != "" {
		return c.PeerPassword
	}
	return c.RequirePass
}

// peerLogin returns the user and password node id authenticates as.
func (c *Config) peerLogin(id string) (user, password string) {
	return access.PeerUserPrefix + id, access.PeerToken(c.peerSecret(), id)
}

// Env exposes the shared command environment (for tests and wiring).
func (s *Server) Env() *commands.Env { return s.env }

// Start binds the listeners and serves in the background (Listen, then
// Serve).
func (s *Server) Start() error {
	if err := s.Listen(); err != nil {
		return err
	}
	s.Serve()
	return nil
}

// Listen binds the RESP and HTTP sockets without serving yet, so that the
// bound addresses are known before the Raft node starts.
func (s *Server) Listen() error {
	ln, err := net.Listen("tcp", s.cfg.RespAddr)
	if err != nil {
		return fmt.Errorf("--resp-addr %s: %w", s.cfg.RespAddr, err)
	}
	if s.cfg.TLSCert != "" {
		tc, err := s.tlsConfig()
		if err != nil {
			ln.Close()
			return err
		}
		ln = tls.NewListener(ln, tc)
	}
	s.ln = &listener{Listener: ln, srv: s, conns: map[*conn]struct{}{}}
	if s.cfg.HTTPAddr != "" {
		if !s.holdsEnvoyPorts() {
			if s.httpLn, err = net.Listen("tcp", s.cfg.HTTPAddr); err != nil {
				ln.Close()
				return fmt.Errorf("--http-addr %s: %w", s.cfg.HTTPAddr, err)
			}
		}
		s.http = &http.Server{Handler: s.httpHandler(), ReadHeaderTimeout: 5 * time.Second}
	}
	if err := s.listenGRPC(); err != nil {
		s.closeListeners()
		return err
	}
	if err := s.listenRatelimit(); err != nil {
		s.closeListeners()
		return err
	}
	return nil
}

// Serve starts serving on the bound sockets in the background.
func (s *Server) Serve() {
	s.serveHTTP(s.httpLn)
	s.serveGRPC(s.grpcLn)
	if s.reload.rls != nil {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.watchEnvoy()
		}()
	}
	if len(s.certSources()) > 0 {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.watchCerts()
		}()
	}
	s.serveSide(s.side)
	s.startXDS()
	s.wg.Add(2)
	go func() {
		defer s.wg.Done()
		s.ln.serve()
	}()
	go func() {
		defer s.wg.Done()
		s.sweep()
	}()
	s.log.Info("listening", "resp", s.ln.Addr().String(), "http", s.HTTPAddr(), "grpc", s.GRPCAddr(), "tls", s.cfg.TLSCert != "", "grpc_tls", s.grpcTLSMode(),
		"auth", s.env.Auth.Required(), "protected_mode", s.cfg.ProtectedMode && !s.env.Auth.Required())
	if s.holdsEnvoyPorts() {
		s.log.Info("ratelimit: the HTTP, gRPC and debug ports open once the xDS server's first configuration is handled (FORCE_START_WITHOUT_INITIAL_CONFIG is not set)",
			"http", s.cfg.HTTPAddr, "grpc", s.cfg.GRPCAddr, "xds_server", s.cfg.Ratelimit.XDS.ServerURL)
	}
}

// serveHTTP serves the HTTP API on ln in the background (nothing if
// either is missing).
func (s *Server) serveHTTP(ln net.Listener) {
	if s.http == nil || ln == nil {
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := s.http.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("http server", "err", err)
		}
	}()
}

// serveGRPC serves gRPC on ln in the background (nothing if either is
// missing).
func (s *Server) serveGRPC(ln net.Listener) {
	if s.grpc == nil || ln == nil {
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := s.grpc.Serve(ln); err != nil {
			s.log.Error("grpc server", "err", err)
		}
	}()
}

// RespAddr returns the bound RESP address.
func (s *Server) RespAddr() string { return s.ln.Addr().String() }

// HTTPAddr returns the bound HTTP address, or "" if HTTP is off (or not
// bound yet: held for the first xDS response).
func (s *Server) HTTPAddr() string {
	s.envoyMu.Lock()
	defer s.envoyMu.Unlock()
	if s.httpLn == nil {
		return ""
	}
	return s.httpLn.Addr().String()
}

// SetReady installs the readiness check behind /readyz.
func (s *Server) SetReady(f func() bool) { s.ready = f }

// Shutdown stops accepting, lets in-flight replies finish (up to the
// shutdown timeout) and stops the background work.
func (s *Server) Shutdown() {
	if !s.draining.CompareAndSwap(false, true) {
		<-s.done
		return
	}
	close(s.shutdown)
	s.svc.Scripts.Close() // a running script stops now, not at its time limit
	// Ports being opened for the first xDS response are open (and stop
	// below) or will not be.
	s.envoyMu.Lock()
	s.envoyMu.Unlock()
	s.ln.Listener.Close()
	s.ln.drain(s.cfg.ShutdownTimeout)
	s.stopGRPC()
	s.stopSide()
	if s.http != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		s.http.Shutdown(ctx)
		cancel()
	}
	s.wg.Wait()
	close(s.done)
}

// sweep forgets full buckets: every second, half the store's slots (at
// least 64 Ki), so that an idle key is gone within a few seconds of
// refilling without the sweeper costing the hot path cache misses.
func (s *Server) sweep() {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-s.shutdown:
			return
		case <-t.C:
			st := s.svc.Store
			st.Sweep(s.svc.Clock(), max(st.Len()/2, 1<<16))
			// Expired keys of the data commands, as Redis's active expiry
			// (a key is also removed when it is next touched).
			s.svc.Keys.Sweep(s.svc.Clock(), max(s.svc.Keys.Len()/4, 1<<14))
			s.svc.DropMovedKeys()
		}
	}
}

// accept admits or refuses a new connection and creates its session.
func (s *Server) accept(c *conn) bool {
	m := s.env.Metrics
	refuse := func(reason, msg string) bool {
		m.ConnectionsRejected.WithLabelValues(reason).Inc()
		c.WriteError(msg)
		return false
	}
	if s.draining.Load() {
		return refuse("shutdown", "ERR server is shutting down")
	}
	if s.cfg.ProtectedMode && !s.env.Auth.Required() && !access.IsLoopback(c.addr) {
		return refuse("protected_mode", "DENIED "+access.ProtectedMode)
	}
	if s.ln.count.Load() > int64(s.cfg.MaxClients) {
		return refuse("maxclients", "ERR max number of clients reached")
	}
	m.ConnectionsReceived.Inc()
	role := access.RoleAdmin
	if s.env.Auth.Required() {
		role = access.RoleNone
		if s.cfg.AuthTimeout > 0 {
			c.authBy = time.Now().Add(s.cfg.AuthTimeout)
		}
	}
	nc := c.nc
	sess := commands.NewSession(s.env.Clients.NextID(), c.addr, nc.LocalAddr().String(), role, func() { nc.Close() })
	sess.FD = connFD(nc)
	sess.Stats = m.Connect()
	s.env.Clients.Add(sess)
	c.sess = sess
	return true
}

// connFD returns the file descriptor under a connection, for CLIENT
// INFO's fd field, or -1.
func connFD(nc net.Conn) int {
	if t, ok := nc.(*tls.Conn); ok {
		nc = t.NetConn()
	}
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return -1
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return -1
	}
	fd := -1
	raw.Control(func(f uintptr) { fd = int(f) })
	return fd
}

// closed forgets a finished connection.
func (s *Server) closed(c *conn, err error) {
	if sess := c.sess; sess != nil {
		s.env.Clients.Remove(sess)
		sess.Close()
		s.env.Metrics.Disconnect(sess.Stats)
	}
	if err != nil && !errors.Is(err, errProtocol) && !errors.Is(err, net.ErrClosed) && !errors.Is(err, io.EOF) &&
		!strings.Contains(err.Error(), "connection reset") {
		s.log.Debug("connection closed", "addr", c.addr, "err", err)
	}
}

func (s *Server) httpHandler() http.Handler {
	mux := http.NewServeMux()
	if s.cfg.Pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	api := &httpapi.API{Service: s.svc, MaxKeyLen: s.cfg.MaxKeyLen, Access: s.httpAccess, Views: s.views()}
	api.Register(mux)
	console.Register(mux)
	s.ratelimitRoutes(mux)
	mux.Handle("/metrics", promhttp.HandlerFor(s.env.Metrics.Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if s.draining.Load() || !s.ready() {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, "not ready")
			return
		}
		fmt.Fprintln(w, "ready")
	})
	return mux
}

// httpAccess checks a caller of the HTTP API: refund needs the admin
// role, the rest the limiter role.
func (s *Server) httpAccess(r *http.Request, admin bool) error {
	need := access.RoleLimiter
	if admin {
		need = access.RoleAdmin
	}
	switch refusal, msg := s.env.Auth.CheckCaller(r.RemoteAddr, r.Header.Get("Authorization"), need, s.cfg.ProtectedMode); refusal {
	case access.Unauthenticated:
		return &httpapi.Denied{Status: http.StatusUnauthorized, Msg: msg}
	case access.Forbidden:
		return &httpapi.Denied{Status: http.StatusForbidden, Msg: msg}
	}
	return nil
}
