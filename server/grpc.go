package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"strings"
	"syscall"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	"github.com/sluice-rl/sluice/access"
	"github.com/sluice-rl/sluice/envoyrls"
)

// listenGRPC binds --grpc-addr and builds the gRPC server: Envoy's rate
// limit service, gRPC health and server reflection, with the RESP listener's TLS, protected
// mode and credentials.
func (s *Server) listenGRPC() error {
	if s.cfg.GRPCAddr == "" {
		return nil
	}
	s.rlsStats = envoyrls.NewMetrics(s.env.Metrics.Registry)
	if o, ok := s.peerStatsOptions(); ok {
		s.rlsStats.EnablePeerStatsWith(o)
	}
	cfg, sum, err := s.loadEnvoyRules()
	if err != nil {
		return err
	}
	opts := []grpc.ServerOption{grpc.UnaryInterceptor(s.grpcAuth), grpc.NumStreamWorkers(grpcWorkers())}
	if age := s.cfg.GRPCMaxConnectionAge; age > 0 {
		opts = append(opts, grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionAge: age,
			MaxConnectionAgeGrace: s.cfg.GRPCMaxConnectionAgeGrace}))
	}
	tc, err := s.grpcTLSConfig()
	if err != nil {
		return err
	}
	if tc != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(tc)))
	}
	// Held for the first xDS response, the port is bound then
	// (openEnvoyPorts).
	var ln net.Listener
	if !s.holdsEnvoyPorts() {
		if ln, err = listenGRPCAddr(s.cfg.GRPCAddr); err != nil {
			return fmt.Errorf("--grpc-addr %s: %w", s.cfg.GRPCAddr, err)
		}
	}
	g := grpc.NewServer(opts...)
	rls := envoyrls.NewServer(s.svc, cfg, s.rlsStats, s.cfg.MaxKeyLen)
	if m := s.cfg.Ratelimit; m != nil {
		rls.SetOptions(m.Answers)
	}
	rlsv3.RegisterRateLimitServiceServer(g, rls)
	s.rls = rls
	if s.cfg.EnvoyConfig != "" {
		s.reload.rls, s.reload.envoySum = rls, sum
	}
	healthpb.RegisterHealthServer(g, &envoyrls.Health{Ready: s.rlsReady, Stop: s.shutdown})
	// Server reflection, so that grpcurl and other tools list and call the
	// services with no .proto files (it reveals only their descriptions).
	reflection.Register(g)
	s.grpc, s.grpcLn = g, ln
	return nil
}

// peerStatsOptions are envoyproxy/ratelimit's stats of the Envoy front:
// on in the drop-in (unless DISABLE_STATS), and with --statsd-addr, sent
// to statsd.
func (s *Server) peerStatsOptions() (envoyrls.PeerStatsOptions, bool) {
	o := envoyrls.PeerStatsOptions{NearRatio: 0.8, Log: s.log}
	m := s.cfg.Ratelimit
	if m != nil {
		if m.DisableStats {
			return o, false
		}
		o.NearRatio, o.ResponseTimeMillis = m.NearLimitRatio, m.ResponseTimeMillis
	}
	if s.cfg.StatsdAddr != "" {
		tags, _ := envoyrls.ParseStatsdTags(s.cfg.StatsdTags) // checked by Validate
		o.Statsd = &envoyrls.StatsdOptions{Addr: s.cfg.StatsdAddr, Protocol: s.cfg.StatsdProtocol,
			Interval: s.cfg.StatsdFlushInterval, Tags: tags}
	}
	return o, m != nil || o.Statsd != nil
}

// loadEnvoyRules reads --envoy-config, if given, with the fingerprint of
// what it read. Rules that do not load stop a node run with sluice's
// flags; one run as envoyproxy/ratelimit stays up without rules, as the
// peer does, and loads them when their files are mended.
func (s *Server) loadEnvoyRules() (*envoyrls.Config, string, error) {
	path := s.cfg.EnvoyConfig
	if path == "" {
		return nil, "", nil
	}
	// The fingerprint first: a change made while loading is seen by the
	// next check.
	o := s.loadOptions()
	sum, err := envoyrls.FingerprintWith(path, o)
	var cfg *envoyrls.Config
	if err == nil {
		cfg, err = envoyrls.LoadConfigWith(path, o)
	}
	if err != nil && s.cfg.Ratelimit == nil {
		return nil, "", err
	}
	if err != nil {
		s.log.Error("envoy configuration not loaded: every request is answered 'no rate limit configuration loaded' until the files load", "path", path, "err", err)
		s.envoyLoads(false)
		return nil, "bad:" + err.Error(), nil
	}
	s.envoyLoads(true)
	s.log.Info("envoy configuration loaded", "path", path, "domains", strings.Join(cfg.Domains(), ","))
	s.warnEnvoy(cfg)
	return cfg, sum, nil
}

// envoyLoads counts a load of the Envoy rules that succeeded or failed.
func (s *Server) envoyLoads(ok bool) {
	if s.rlsStats != nil {
		s.rlsStats.ConfigLoad(ok)
	}
}

// warnEnvoy logs what the loaded rules ignore.
func (s *Server) warnEnvoy(cfg *envoyrls.Config) {
	for _, w := range cfg.Warnings() {
		s.log.Warn("envoy configuration: ignored", "what", w)
	}
}

// rlsReady is the gRPC health of the node: ready, not draining, and, when
// HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED, with rules of some domain.
func (s *Server) rlsReady() bool {
	if s.draining.Load() || !s.ready() {
		return false
	}
	if m := s.cfg.Ratelimit; m != nil && m.HealthyWithAtLeastOneConfig {
		return s.rls != nil && len(s.rls.Config().Domains()) > 0
	}
	return true
}

// grpcWorkers is how many goroutines run gRPC calls for the life of the
// server (grpc.NumStreamWorkers), 32 per CPU and at least 64: a call that
// finds one free runs on it rather than on a new goroutine, which would
// grow its stack to the handler's depth on every call, copying it each
// time — an eighth of the gRPC front's CPU under load, measured with 64
// calls in flight on two CPUs (docs/benchmarks.md). A call that finds
// none free gets its own goroutine, as without workers.
func grpcWorkers() uint32 { return uint32(max(64, 32*runtime.GOMAXPROCS(0))) }

// unixSocket reports whether a listen address names a Unix socket
// (unix:PATH, or unix://PATH as gRPC clients write it), and its path.
func unixSocket(addr string) (string, bool) {
	path, ok := strings.CutPrefix(addr, "unix:")
	if !ok {
		return "", false
	}
	if p, ok := strings.CutPrefix(path, "//"); ok {
		path = p
	}
	return path, true
}

// listenGRPCAddr binds --grpc-addr: a TCP address, or a Unix socket. A
// socket file that a previous run left behind (nobody accepts on it) is
// replaced; one a live process listens on is left alone, and any other
// file is an error.
func listenGRPCAddr(addr string) (net.Listener, error) {
	path, ok := unixSocket(addr)
	if !ok {
		return net.Listen("tcp", addr)
	}
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
		c, err := net.DialTimeout("unix", path, time.Second)
		if err == nil {
			c.Close()
			return nil, fmt.Errorf("listen unix %s: a running process listens on it", path)
		}
		if errors.Is(err, syscall.ECONNREFUSED) {
			os.Remove(path) // stale: its process is gone
		}
	}
	return net.Listen("unix", path)
}

// GRPCAddr returns the bound gRPC address, or "" if gRPC is off (or not
// bound yet: held for the first xDS response).
func (s *Server) GRPCAddr() string {
	s.envoyMu.Lock()
	defer s.envoyMu.Unlock()
	if s.grpcLn == nil {
		return ""
	}
	return listenerAddr(s.grpcLn)
}

// listenerAddr is a listener's address as clients dial it: host:port, or
// unix:PATH for a Unix socket (gRPC's form).
func listenerAddr(ln net.Listener) string {
	if a := ln.Addr(); a.Network() == "unix" {
		return "unix:" + a.String()
	}
	return ln.Addr().String()
}

// stopGRPC lets in-flight calls finish, up to the shutdown timeout.
func (s *Server) stopGRPC() {
	if s.grpc == nil {
		return
	}
	done := make(chan struct{})
	go func() {
		s.grpc.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(s.cfg.ShutdownTimeout):
		s.grpc.Stop()
	}
	s.rlsStats.Close() // the last stats to statsd
}

// grpcAuth applies protected mode and credentials to every call but health
// checks (probes carry no credentials). Credentials travel in the
// authorization metadata: "Bearer <password>" for the default user, or
// "Basic base64(user:password)"; the limiter role suffices.
func (s *Server) grpcAuth(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if strings.HasPrefix(info.FullMethod, "/grpc.health.v1.Health/") {
		return h(ctx, req)
	}
	if s.cfg.Ratelimit != nil && !s.env.Auth.Required() {
		// As envoyproxy/ratelimit: its gRPC port is open to the network
		// unless a password is set (sluice's own fronts stay protected).
		return h(ctx, req)
	}
	if s.draining.Load() {
		return nil, status.Error(codes.Unavailable, "server is shutting down")
	}
	if err := s.authorize(ctx, metadataValue(ctx, "authorization"), access.RoleLimiter); err != nil {
		return nil, err
	}
	return h(ctx, req)
}

func metadataValue(ctx context.Context, key string) string {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

// authorize checks a gRPC caller (its address and metadata in ctx).
func (s *Server) authorize(ctx context.Context, authz string, need access.Role) error {
	addr := ""
	if p, ok := peer.FromContext(ctx); ok {
		addr = p.Addr.String()
		if p.Addr.Network() == "unix" {
			// A Unix socket's callers are on this machine, as loopback
			// ones are: protected mode lets them in.
			addr = "127.0.0.1:0"
		}
	}
	switch refusal, msg := s.env.Auth.CheckCaller(addr, authz, need, s.cfg.ProtectedMode); refusal {
	case access.Unauthenticated:
		return status.Error(codes.Unauthenticated, msg)
	case access.Forbidden:
		return status.Error(codes.PermissionDenied, msg)
	}
	return nil
}
