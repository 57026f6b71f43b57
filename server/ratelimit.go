package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluice-rl/sluice/envoyrls"
	"github.com/sluice-rl/sluice/httpapi"
)

// RatelimitMode is how a node run as envoyproxy/ratelimit (`sluice
// ratelimit`, or the binary named ratelimit: SPEC §11) differs from one
// run with sluice's own flags. cmd/sluice fills it from the peer's
// environment variables; Config.Ratelimit is nil otherwise.
type RatelimitMode struct {
	// Answers are the Envoy front's semantics (envoyrls.PeerOptions and
	// the peer's settings, with sluice's opted back in).
	Answers envoyrls.Options
	// Load says how the rule directory (--envoy-config) is read: the
	// peer's runtime tree.
	Load envoyrls.LoadOptions
	// HealthyWithAtLeastOneConfig (HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED)
	// keeps health checks failing until rules of at least one domain are
	// loaded.
	HealthyWithAtLeastOneConfig bool
	// DebugAddr (DEBUG_HOST:DEBUG_PORT) serves the peer's debug endpoints
	// (/rlconfig); empty: none.
	DebugAddr string
	// NearLimitRatio (NEAR_LIMIT_RATIO) is the share of a limit past which
	// hits count as near_limit in the peer's stats.
	NearLimitRatio float64
	// DisableStats (DISABLE_STATS) turns the peer's stats off: none on
	// /metrics, none sent to statsd.
	DisableStats bool
	// ResponseTimeMillis (PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS)
	// observes response_time_seconds in milliseconds, as the peer does.
	ResponseTimeMillis bool
	// PrometheusAddr and PrometheusPath (USE_PROMETHEUS, PROMETHEUS_ADDR,
	// PROMETHEUS_PATH) serve the metrics there too; empty: not.
	PrometheusAddr, PrometheusPath string
	// XDS, when set (CONFIG_TYPE=GRPC_XDS_SOTW), is the management server
	// the rules come from, instead of --envoy-config.
	XDS *envoyrls.XDSSettings
	// ForceStart (FORCE_START_WITHOUT_INITIAL_CONFIG), with XDS, serves
	// Envoy's ports at once; unset, as the peer, they are bound only once
	// the xDS server's first response has been handled.
	ForceStart bool
}

// holdsEnvoyPorts reports whether the ports Envoy and its probes use (the
// HTTP and gRPC addresses, the debug port) wait for the first xDS
// response.
func (s *Server) holdsEnvoyPorts() bool {
	m := s.cfg.Ratelimit
	return m != nil && m.XDS != nil && !m.ForceStart
}

// loadOptions are how the node reads its Envoy rules.
func (s *Server) loadOptions() envoyrls.LoadOptions {
	if m := s.cfg.Ratelimit; m != nil {
		return m.Load
	}
	return envoyrls.LoadOptions{}
}

// sideServer is an HTTP listener of the drop-in beside --http-addr: the
// peer's debug port, its Prometheus port.
type sideServer struct {
	name string
	srv  *http.Server
	ln   net.Listener
}

// listenRatelimit binds the drop-in's side listeners (debug, Prometheus).
// The debug port waits with the others held for the first xDS response
// (openEnvoyPorts).
func (s *Server) listenRatelimit() error {
	m := s.cfg.Ratelimit
	if m == nil {
		return nil
	}
	if m.DebugAddr != "" && !s.holdsEnvoyPorts() {
		if err := s.listenSide("debug", m.DebugAddr, s.debugHandler()); err != nil {
			return err
		}
	}
	if m.PrometheusAddr != "" {
		mux := http.NewServeMux()
		mux.Handle(m.PrometheusPath, promhttp.HandlerFor(s.env.Metrics.Registry, promhttp.HandlerOpts{}))
		return s.listenSide("prometheus", m.PrometheusAddr, mux)
	}
	return nil
}

func (s *Server) listenSide(name, addr string, h http.Handler) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("ratelimit %s listener %s: %w", name, addr, err)
	}
	s.side = append(s.side, newSideServer(name, ln, h))
	return nil
}

func newSideServer(name string, ln net.Listener, h http.Handler) *sideServer {
	return &sideServer{name: name, srv: &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}, ln: ln}
}

// serveSide serves side listeners in the background.
func (s *Server) serveSide(side []*sideServer) {
	for _, x := range side {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			if err := x.srv.Serve(x.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				s.log.Error("ratelimit "+x.name+" server", "err", err)
			}
		}()
		s.log.Info("ratelimit "+x.name+" listening", "addr", x.ln.Addr().String())
	}
}

// stopSide stops the side listeners.
func (s *Server) stopSide() {
	for _, x := range s.side {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		x.srv.Shutdown(ctx)
		cancel()
	}
}

// debugHandler serves the peer's debug port: /rlconfig (the rules in
// force) and, at /, the list of its endpoints.
func (s *Server) debugHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/rlconfig", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if s.rls != nil {
			io.WriteString(w, s.rls.Config().Dump())
		}
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, "/rlconfig: print out the currently loaded configuration for debugging\n")
	})
	return mux
}

// ratelimitRoutes adds the peer's endpoints to the HTTP API's mux: POST
// /json and /healthcheck.
func (s *Server) ratelimitRoutes(mux *http.ServeMux) {
	if s.cfg.Ratelimit == nil {
		return
	}
	mux.HandleFunc("POST /json", func(w http.ResponseWriter, r *http.Request) {
		if s.rls == nil {
			http.Error(w, "the gRPC front is off (--grpc-addr)", http.StatusServiceUnavailable)
			return
		}
		if s.env.Auth.Required() {
			if err := s.httpAccess(r, false); err != nil {
				d := err.(*httpapi.Denied)
				http.Error(w, d.Msg, d.Status)
				return
			}
		}
		s.rls.JSONHandler().ServeHTTP(w, r)
	})
	mux.HandleFunc("/healthcheck", func(w http.ResponseWriter, r *http.Request) {
		if !s.rlsReady() {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		io.WriteString(w, "OK")
	})
}
