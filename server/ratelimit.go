package server

import (
	"github.com/sluice-rl/sluice/envoyrls"
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
	// PrometheusAddr and PrometheusPath (USE_PROMETHEUS, PROMETHEUS_ADDR,
	// PROMETHEUS_PATH) serve the metrics there too; empty: not.
	PrometheusAddr, PrometheusPath string
}

// loadOptions are how the node reads its Envoy rules.
func (s *Server) loadOptions() envoyrls.LoadOptions {
	if m := s.cfg.Ratelimit; m != nil {
		return m.Load
	}
	return envoyrls.LoadOptions{}
}
