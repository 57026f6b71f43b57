package server

// The drop-in's xDS configuration source (CONFIG_TYPE=GRPC_XDS_SOTW): the
// node's rules come from a management server instead of --envoy-config.
// Each response the server pushes is loaded and put in force at once, or
// refused (NACKed) with the rules in force kept. Without
// FORCE_START_WITHOUT_INITIAL_CONFIG the ports Envoy and its probes use
// are bound only once the first response has been handled, as
// envoyproxy/ratelimit serves nothing before its first configuration; the
// RESP and Raft ports serve at once, so that the node joins its cluster
// meanwhile.

import (
	"context"
	"fmt"
	"net"
	"strings"

	"github.com/sluice-rl/sluice/envoyrls"
)

// startXDS starts the xDS client, when the node takes its rules from a
// management server; it stops at shutdown.
func (s *Server) startXDS() {
	m := s.cfg.Ratelimit
	if m == nil || m.XDS == nil || s.rls == nil {
		return
	}
	first := true
	c := envoyrls.NewXDSClient(*m.XDS, s.log.With("component", "xds"), func(cfg *envoyrls.Config, version string, err error) {
		s.xdsConfig(cfg, version, err)
		if first {
			first = false
			if s.holdsEnvoyPorts() {
				s.openEnvoyPorts()
			}
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	s.wg.Add(2)
	go func() {
		defer s.wg.Done()
		<-s.shutdown
		cancel()
	}()
	go func() {
		defer s.wg.Done()
		c.Run(ctx)
	}()
}

// xdsConfig puts pushed rules in force, or logs why they were refused.
func (s *Server) xdsConfig(cfg *envoyrls.Config, version string, err error) {
	server := s.cfg.Ratelimit.XDS.ServerURL
	if err != nil {
		s.log.Error("xds: configuration refused (NACK): the rules in force stay", "server", server, "version", version, "err", err)
		s.envoyLoads(false)
		return
	}
	old := s.rls.Config().Domains()
	s.rls.SetConfig(cfg)
	s.envoyLoads(true)
	s.warnEnvoy(cfg)
	added, removed := diff(old, cfg.Domains())
	s.log.Info("xds: configuration loaded", "server", server, "version", version, "domains", strings.Join(cfg.Domains(), ","),
		"added", strings.Join(added, ","), "removed", strings.Join(removed, ","))
}

// openEnvoyPorts binds and serves the ports held for the first xDS
// response: the HTTP and gRPC addresses and the debug port. A port that
// cannot be bound ends the node.
func (s *Server) openEnvoyPorts() {
	s.envoyMu.Lock()
	defer s.envoyMu.Unlock()
	if s.draining.Load() {
		return
	}
	var bound []net.Listener
	bind := func(flag, addr string) (net.Listener, error) {
		listen := func(addr string) (net.Listener, error) { return net.Listen("tcp", addr) }
		if flag == "--grpc-addr" {
			listen = listenGRPCAddr // it may name a Unix socket
		}
		ln, err := listen(addr)
		if err != nil {
			for _, l := range bound {
				l.Close()
			}
			return nil, fmt.Errorf("%s %s: %w", flag, addr, err)
		}
		bound = append(bound, ln)
		return ln, nil
	}
	var httpLn, grpcLn net.Listener
	var side []*sideServer
	err := func() error {
		var err error
		if s.http != nil {
			if httpLn, err = bind("--http-addr", s.cfg.HTTPAddr); err != nil {
				return err
			}
		}
		if grpcLn, err = bind("--grpc-addr", s.cfg.GRPCAddr); err != nil {
			return err
		}
		if a := s.cfg.Ratelimit.DebugAddr; a != "" {
			ln, err := bind("ratelimit debug listener", a)
			if err != nil {
				return err
			}
			side = append(side, newSideServer("debug", ln, s.debugHandler()))
		}
		return nil
	}()
	if err != nil {
		s.log.Error("ratelimit: cannot open the ports held for the first xDS configuration", "err", err)
		if s.fail != nil {
			s.fail(err)
		}
		return
	}
	s.httpLn, s.grpcLn = httpLn, grpcLn
	s.side = append(s.side, side...)
	s.serveHTTP(httpLn)
	s.serveGRPC(grpcLn)
	s.serveSide(side)
	httpAddr := ""
	if httpLn != nil {
		httpAddr = httpLn.Addr().String()
	}
	s.log.Info("ratelimit: serving after the first xDS configuration", "http", httpAddr, "grpc", listenerAddr(grpcLn))
}
