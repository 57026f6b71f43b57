package envoyrls

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics counts requests and descriptors per domain and rule, like
// envoyproxy/ratelimit's stats. Labels stay bounded: a domain is named
// only when it is configured (loaded rules, or a budget node a descriptor
// resolved to), else "unknown"; a descriptor is named by its rule
// (domain.key_value.key…), its budget node, or "domain.override".
type Metrics struct {
	requests    *prometheus.CounterVec
	descriptors *prometheus.CounterVec
	loads       *prometheus.CounterVec
	loadedOK    prometheus.Gauge
	reg         prometheus.Registerer
	peer        *peerStats // envoyproxy/ratelimit's stats, in the drop-in

	mu    sync.RWMutex
	cache map[[3]string]prometheus.Counter
}

// NewMetrics registers the Envoy front's metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_envoy_requests_total",
			Help: "ShouldRateLimit requests by domain and overall result (ok, over_limit)."}, []string{"domain", "result"}),
		descriptors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_envoy_descriptors_total",
			Help: "ShouldRateLimit descriptors by domain, rule and result (ok, over_limit, shadow_over_limit, unlimited, no_limit)."},
			[]string{"domain", "descriptor", "result"}),
		loads: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_envoy_config_loads_total",
			Help: "Loads of the Envoy rule files, at start and on each change, by result (ok, error): an error leaves the rules in force."}, []string{"result"}),
		loadedOK: prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_envoy_config_last_load_ok",
			Help: "1 if the last load of the Envoy rule files succeeded, 0 if it failed (the rules in force are older than the files)."}),
		cache: map[[3]string]prometheus.Counter{},
		reg:   reg,
	}
	reg.MustRegister(m.requests, m.descriptors, m.loads, m.loadedOK)
	return m
}

func (m *Metrics) counter(vec *prometheus.CounterVec, k [3]string, labels ...string) prometheus.Counter {
	m.mu.RLock()
	c, ok := m.cache[k]
	m.mu.RUnlock()
	if ok {
		return c
	}
	c = vec.WithLabelValues(labels...)
	m.mu.Lock()
	m.cache[k] = c
	m.mu.Unlock()
	return c
}

func (m *Metrics) request(domain, result string) {
	m.counter(m.requests, [3]string{"\x00req", domain, result}, domain, result).Inc()
}

func (m *Metrics) descriptor(domain, descriptor, result string) {
	m.counter(m.descriptors, [3]string{domain, descriptor, result}, domain, descriptor, result).Inc()
}

// ConfigLoad counts a load of the rule files that succeeded or failed.
func (m *Metrics) ConfigLoad(ok bool) {
	if m == nil {
		return
	}
	if ok {
		m.loads.WithLabelValues("ok").Inc()
		m.loadedOK.Set(1)
		if m.peer != nil {
			m.peer.loadOK.Inc()
			m.peer.sdLoadOK.add(1)
		}
		return
	}
	m.loads.WithLabelValues("error").Inc()
	m.loadedOK.Set(0)
	if m.peer != nil {
		m.peer.loadError.Inc()
		m.peer.sdLoadError.add(1)
	}
}
