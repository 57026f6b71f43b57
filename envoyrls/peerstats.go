package envoyrls

import (
	"log/slog"
	"math"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// peerStats are envoyproxy/ratelimit's stats under the names its
// Prometheus sink gives them (src/stats/prom/default_mapper.yaml): per
// rule, labelled by the domain and the first two parts of the rule's
// stats key, as that mapping splits it at dots; and, with statsd on,
// under the names its gostats store sends (src/stats/manager_impl.go).
//
// The stats of a key are made once, at its first hit, and kept: the hot
// path looks them up and adds to them. The keys are bounded as the
// labels are: a rule's key (or budget node) comes from the
// configuration; keys that name request values (detailed_metric,
// value_to_metric, overrides) are kept up to maxPeerKeys, past which they
// count under the key "<domain>.overflow"; domain_not_found names at most
// maxNotFound domains.
type peerStats struct {
	nearRatio                                       float64
	totalHits, overLimit, nearLimit, within, shadow *prometheus.CounterVec
	loadOK, loadError                               prometheus.Counter
	callErrors                                      *prometheus.CounterVec
	globalShadow                                    prometheus.Counter
	totalRequests                                   prometheus.Counter
	responseTime                                    prometheus.Observer
	responseScale                                   float64 // seconds → the histogram's unit
	reg                                             prometheus.Registerer

	sd                                           *statsd
	sdLoadOK, sdLoadError, sdCallError, sdShadow *statsdCounter
	sdRequests                                   *statsdCounter
	sdResponseTime                               *statsdTimer

	mu       sync.RWMutex
	keys     map[string]*peerKey
	notFound map[string]*notFoundStat
}

const (
	maxPeerKeys = 10000
	maxNotFound = 256
)

// peerKey is the stats of one stats key.
type peerKey struct {
	prom [5]prometheus.Counter // total_hits, over_limit, near_limit, within_limit, shadow_mode
	sd   [5]*statsdCounter
}

type notFoundStat struct {
	prom prometheus.Counter
	sd   *statsdCounter
}

var peerKeyStats = [5]string{"total_hits", "over_limit", "near_limit", "within_limit", "shadow_mode"}

// PeerStatsOptions are the drop-in's stats settings.
type PeerStatsOptions struct {
	// NearRatio (NEAR_LIMIT_RATIO) is the share of a limit past which
	// hits count as near_limit.
	NearRatio float64
	// Statsd, when set, sends the stats there too.
	Statsd *StatsdOptions
	// ResponseTimeMillis (PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS)
	// observes response_time_seconds in milliseconds, as the peer does.
	ResponseTimeMillis bool
	Log                *slog.Logger
}

// EnablePeerStats adds envoyproxy/ratelimit's stats to the metrics (the
// drop-in), near_limit counted from nearRatio (NEAR_LIMIT_RATIO).
func (m *Metrics) EnablePeerStats(nearRatio float64) {
	m.EnablePeerStatsWith(PeerStatsOptions{NearRatio: nearRatio})
}

// EnablePeerStatsWith adds envoyproxy/ratelimit's stats to the metrics
// and, with o.Statsd, starts sending them to statsd (until Close).
func (m *Metrics) EnablePeerStatsWith(o PeerStatsOptions) {
	vec := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ratelimit_service_rate_limit_" + name, Help: help},
			[]string{"domain", "key1", "key2"})
	}
	p := &peerStats{nearRatio: o.NearRatio, reg: m.reg, keys: map[string]*peerKey{}, notFound: map[string]*notFoundStat{},
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
		globalShadow: prometheus.NewCounter(prometheus.CounterOpts{Name: "ratelimit_service_global_shadow_mode",
			Help: "Requests over a limit answered OK by SHADOW_MODE (envoyproxy/ratelimit's global_shadow_mode)."}),
		responseScale: 1,
	}
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ratelimit_service_total_requests",
		Help: "gRPC ShouldRateLimit calls (envoyproxy/ratelimit's ratelimit_server.<method>.total_requests)."}, []string{"grpc_method"})
	rt := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "ratelimit_service_response_time_seconds",
		Help: "Time gRPC ShouldRateLimit calls took (envoyproxy/ratelimit's ratelimit_server.<method>.response_time)."}, []string{"grpc_method"})
	if o.ResponseTimeMillis {
		p.responseScale = 1000
	}
	p.totalRequests, p.responseTime = requests.WithLabelValues("ShouldRateLimit"), rt.WithLabelValues("ShouldRateLimit")
	p.callErrors.WithLabelValues("service_error")
	m.reg.MustRegister(p.totalHits, p.overLimit, p.nearLimit, p.within, p.shadow, p.loadOK, p.loadError, p.callErrors,
		p.globalShadow, requests, rt)
	if o.Statsd != nil {
		p.sd = newStatsd(*o.Statsd, o.Log)
		p.sdLoadOK = p.sd.counter("ratelimit.service.config_load_success")
		p.sdLoadError = p.sd.counter("ratelimit.service.config_load_error")
		p.sdCallError = p.sd.counter("ratelimit.service.call.should_rate_limit.service_error")
		p.sdShadow = p.sd.counter("ratelimit.service.global_shadow_mode")
		p.sdRequests = p.sd.counter("ratelimit_server.ShouldRateLimit.total_requests")
		p.sdResponseTime = p.sd.timer("ratelimit_server.ShouldRateLimit.response_time")
		go p.sd.run()
	}
	m.peer = p
}

// Close stops sending stats to statsd, after a last flush.
func (m *Metrics) Close() {
	if m != nil && m.peer != nil && m.peer.sd != nil {
		m.peer.sd.close()
	}
}

// sanitizeStatName is the peer's utils.SanitizeStatName: ':' and '|' as
// '_', and the dots of what looks like an IPv4 address as '_'.
func sanitizeStatName(s string) string {
	s = strings.NewReplacer(":", "_", "|", "_").Replace(s)
	return ipv4Pattern.ReplaceAllStringFunc(s, func(ip string) string { return strings.ReplaceAll(ip, ".", "_") })
}

var ipv4Pattern = regexp.MustCompile(`\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}`)

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

// key returns the stats of stats key k, making them at its first hit.
// Past maxPeerKeys keys, a new one counts under "<domain>.overflow"
// (looked up under the write lock each time: a configuration that has
// that many keys names request values).
func (p *peerStats) key(k string) *peerKey {
	p.mu.RLock()
	s, ok := p.keys[k]
	p.mu.RUnlock()
	if ok {
		return s
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if s, ok := p.keys[k]; ok {
		return s
	}
	k = strings.Clone(k) // it may be a caller's buffer
	name := sanitizeStatName(k)
	if len(p.keys) >= maxPeerKeys {
		domain, _, _ := strings.Cut(name, ".")
		name = domain + ".overflow"
		k = "\x00" + name
		if s, ok := p.keys[k]; ok {
			return s
		}
	}
	s = &peerKey{}
	l := peerLabels(name)
	for i, vec := range []*prometheus.CounterVec{p.totalHits, p.overLimit, p.nearLimit, p.within, p.shadow} {
		s.prom[i] = vec.WithLabelValues(l[:]...)
		s.sd[i] = p.sd.counter("ratelimit.service.rate_limit." + name + "." + peerKeyStats[i])
	}
	p.keys[k] = s
	return s
}

// count adds one descriptor's hits as the peer's base limiter counts
// them: before and after are its window's count around the request.
func (p *peerStats) count(key string, limit, hits, before, after int64, shadow bool) {
	k := p.key(key)
	add := func(i int, n int64) {
		k.prom[i].Add(float64(n))
		k.sd[i].add(uint64(n))
	}
	add(0, hits)
	near := int64(math.Floor(float64(float32(limit) * float32(p.nearRatio))))
	if after > limit {
		over := hits
		if before < limit {
			over = after - limit
			add(2, limit-max(near, before))
		}
		add(1, over)
		if shadow {
			add(4, over)
		}
		return
	}
	if after > near {
		n := hits
		if before < near {
			n = after - near
		}
		add(2, n)
	}
	add(3, hits)
}

// domainNotFound counts a descriptor of a domain without rules that
// nothing limits: the peer's ratelimit.service.rate_limit.<domain>.domain_not_found,
// which its Prometheus mapping leaves unmapped, named
// ratelimit_service_rate_limit_<domain>_domain_not_found.
func (p *peerStats) domainNotFound(domain string) {
	p.mu.RLock()
	s, ok := p.notFound[domain]
	p.mu.RUnlock()
	if !ok {
		p.mu.Lock()
		if s, ok = p.notFound[domain]; !ok && len(p.notFound) < maxNotFound {
			name := sanitizeStatName(domain)
			s = &notFoundStat{sd: p.sd.counter("ratelimit.service.rate_limit." + name + ".domain_not_found")}
			c := prometheus.NewCounter(prometheus.CounterOpts{Name: "ratelimit_service_rate_limit_" + promEscape(name) + "_domain_not_found",
				Help: "Descriptors of a domain without rules (envoyproxy/ratelimit's domain_not_found)."})
			if err := p.reg.Register(c); err == nil {
				s.prom = c
			} else if are, ok := err.(prometheus.AlreadyRegisteredError); ok {
				s.prom, _ = are.ExistingCollector.(prometheus.Counter)
			}
			p.notFound[domain] = s
		}
		p.mu.Unlock()
	}
	if s == nil {
		return
	}
	if s.prom != nil {
		s.prom.Inc()
	}
	s.sd.add(1)
}

// promEscape is statsd_exporter's EscapeMetricName: every byte that a
// Prometheus name cannot hold as '_'.
func promEscape(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			b[i] = '_'
		}
	}
	return string(b)
}

// request counts a gRPC ShouldRateLimit call that took d.
func (p *peerStats) request(d time.Duration) {
	p.totalRequests.Inc()
	p.responseTime.Observe(d.Seconds() * p.responseScale)
	p.sdRequests.add(1)
	p.sdResponseTime.observe(uint32(min(d.Milliseconds(), math.MaxUint32)))
}

func (p *peerStats) callError() {
	p.callErrors.WithLabelValues("service_error").Inc()
	p.sdCallError.add(1)
}

func (p *peerStats) globalShadowHit() {
	p.globalShadow.Inc()
	p.sdShadow.add(1)
}
