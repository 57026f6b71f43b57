package envoyrls

import (
	"math"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// peerStats are envoyproxy/ratelimit's stats under the names its
// Prometheus sink gives them (src/stats/prom/default_mapper.yaml): per
// rule, labelled by the domain and the first two parts of the rule's
// stats key, as that mapping splits it at dots.
type peerStats struct {
	nearRatio                                       float64
	totalHits, overLimit, nearLimit, within, shadow *prometheus.CounterVec
	loadOK, loadError                               prometheus.Counter
	callErrors                                      *prometheus.CounterVec
}

// EnablePeerStats adds envoyproxy/ratelimit's stats to the metrics (the
// drop-in), near_limit counted from nearRatio (NEAR_LIMIT_RATIO).
func (m *Metrics) EnablePeerStats(nearRatio float64) {
	vec := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ratelimit_service_rate_limit_" + name, Help: help},
			[]string{"domain", "key1", "key2"})
	}
	p := &peerStats{nearRatio: nearRatio,
		totalHits: vec("total_hits", "Hits of descriptors with a limit (envoyproxy/ratelimit's total_hits)."),
		overLimit: vec("over_limit", "Hits over the limit (envoyproxy/ratelimit's over_limit)."),
		nearLimit: vec("near_limit", "Hits past NEAR_LIMIT_RATIO of the limit and within it (envoyproxy/ratelimit's near_limit)."),
		within:    vec("within_limit", "Hits within the limit (envoyproxy/ratelimit's within_limit)."),
		shadow:    vec("shadow_mode", "Hits over the limit of shadow_mode rules (envoyproxy/ratelimit's shadow_mode)."),
		loadOK: prometheus.NewCounter(prometheus.CounterOpts{Name: "ratelimit_service_config_load_success",
			Help: "Loads of the rule files that succeeded (envoyproxy/ratelimit's config_load_success)."}),
		loadError: prometheus.NewCounter(prometheus.CounterOpts{Name: "ratelimit_service_config_load_error",
			Help: "Loads of the rule files that failed (envoyproxy/ratelimit's config_load_error)."}),
		callErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ratelimit_service_should_rate_limit_error",
			Help: "ShouldRateLimit calls answered with an error (envoyproxy/ratelimit's should_rate_limit errors)."}, []string{"err_type"}),
	}
	m.reg.MustRegister(p.totalHits, p.overLimit, p.nearLimit, p.within, p.shadow, p.loadOK, p.loadError, p.callErrors)
	m.peer = p
}

// peerLabels splits a stats key as the peer's mapping does: the domain,
// then the first two keys (key2 empty for a key of one level).
func peerLabels(key string) [3]string {
	var l [3]string
	for i := range l {
		part, rest, _ := strings.Cut(key, ".")
		l[i], key = part, rest
	}
	return l
}

// count adds one descriptor's hits as the peer's base limiter counts
// them: before and after are its window's count around the request.
func (p *peerStats) count(key string, limit, hits, before, after int64, shadow bool) {
	l := peerLabels(key)
	p.totalHits.WithLabelValues(l[:]...).Add(float64(hits))
	near := int64(math.Floor(float64(float32(limit) * float32(p.nearRatio))))
	if after > limit {
		over := hits
		if before < limit {
			over = after - limit
			p.nearLimit.WithLabelValues(l[:]...).Add(float64(limit - max(near, before)))
		}
		p.overLimit.WithLabelValues(l[:]...).Add(float64(over))
		if shadow {
			p.shadow.WithLabelValues(l[:]...).Add(float64(over))
		}
		return
	}
	if after > near {
		n := hits
		if before < near {
			n = after - near
		}
		p.nearLimit.WithLabelValues(l[:]...).Add(float64(n))
	}
	p.within.WithLabelValues(l[:]...).Add(float64(hits))
}
