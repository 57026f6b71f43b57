package main

// `sluice ratelimit`: envoyproxy/ratelimit's environment variables
// (its src/settings/settings.go, with its defaults) read into sluice's
// settings, so that changing the image is the whole switch (SPEC §11).

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-rl/sluice/envoyrls"
	"github.com/sluice-rl/sluice/server"
)

// ratelimitMode is the drop-in's settings and what to log about them once
// the logger exists.
type ratelimitMode struct {
	server.RatelimitMode
	notes []string // settings accepted that change nothing here, said at WARN
	info  []string // settings ignored, said at INFO
}

func (m *ratelimitMode) logNotes(log *slog.Logger) {
	for _, n := range m.notes {
		log.Warn("ratelimit: " + n)
	}
	for _, n := range m.info {
		log.Info("ratelimit: " + n)
	}
}

// ratelimit runs a node as envoyproxy/ratelimit: the peer's variables,
// with its defaults, become sluice flags placed first, so that they win
// over SLUICE_* variables for the settings both name (an image's
// SLUICE_HTTP_ADDR must not move the peer's port 8080), and the flags
// given after `ratelimit` win over both.
func ratelimit(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	flags, mode, err := ratelimitSettings(getenv)
	if err != nil {
		fmt.Fprintln(stderr, "sluice ratelimit:", err)
		return 2
	}
	return runNode(append(flags, args...), getenv, stdout, stderr, mode)
}

// peerEnv reads the peer's variables with their defaults, and notes
// which it read (reportUnread names the others that are set).
type peerEnv struct {
	env  func(string) string
	read map[string]bool
	errs []string
}

func (e *peerEnv) get(name string) string {
	e.read[name] = true
	return e.env(name)
}

func (e *peerEnv) str(name, def string) string {
	if v := e.get(name); v != "" {
		return v
	}
	return def
}

func (e *peerEnv) flag(name string, def bool) bool {
	v := e.get(name)
	if v == "" {
		return def
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		e.errs = append(e.errs, fmt.Sprintf("%s=%q: must be true or false", name, v))
	}
	return b
}

func (e *peerEnv) addr(hostVar, hostDef, portVar, portDef string) string {
	port := e.str(portVar, portDef)
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		e.errs = append(e.errs, fmt.Sprintf("%s=%q: must be a port number", portVar, port))
	}
	return net.JoinHostPort(e.str(hostVar, hostDef), port)
}

// ratelimitSettings translates the peer's environment.
func ratelimitSettings(getenv func(string) string) ([]string, *ratelimitMode, error) {
	e := &peerEnv{env: getenv, read: map[string]bool{}}
	m := &ratelimitMode{}
	var flags []string
	set := func(name, value string) { flags = append(flags, "--"+name, value) }
	set("http-addr", e.addr("HOST", "0.0.0.0", "PORT", "8080"))
	if uds := e.get("GRPC_UDS"); uds != "" {
		set("grpc-addr", "unix:"+uds) // instead of GRPC_HOST:GRPC_PORT, as the peer
	} else {
		set("grpc-addr", e.addr("GRPC_HOST", "0.0.0.0", "GRPC_PORT", "8081"))
	}
	// An age of 0 is gRPC's "never", and then no grace applies.
	age, grace := e.duration("GRPC_MAX_CONNECTION_AGE", "24h"), e.duration("GRPC_MAX_CONNECTION_AGE_GRACE", "1h")
	set("grpc-max-connection-age", age.String())
	if age > 0 {
		set("grpc-max-connection-age-grace", grace.String())
	}
	ignoreDotFiles := false
	switch t := e.str("CONFIG_TYPE", "FILE"); t {
	case "FILE":
		set("envoy-config", filepath.Join(e.str("RUNTIME_ROOT", "/srv/runtime_data/current"),
			e.get("RUNTIME_SUBDIRECTORY"), e.str("RUNTIME_APPDIRECTORY", "config")))
		ignoreDotFiles = e.flag("RUNTIME_IGNOREDOTFILES", false)
	case "GRPC_XDS_SOTW":
		set("envoy-config", "") // the rules come from the xDS server: no SLUICE_ENVOY_CONFIG either
		var notes []string
		m.XDS, notes = peerXDS(e)
		m.notes = append(m.notes, notes...)
		m.ForceStart = e.flag("FORCE_START_WITHOUT_INITIAL_CONFIG", false)
	default:
		e.errs = append(e.errs, fmt.Sprintf("CONFIG_TYPE=%q: must be FILE or GRPC_XDS_SOTW", t))
	}
	set("log-level", peerLogLevel(e.str("LOG_LEVEL", "WARN")))
	set("log-format", strings.ToLower(e.str("LOG_FORMAT", "text")))
	m.DebugAddr = e.addr("DEBUG_HOST", "0.0.0.0", "DEBUG_PORT", "6070")
	for _, f := range peerStats(e, m) {
		set(f[0], f[1])
	}
	m.Load = envoyrls.LoadOptions{Tree: true, IgnoreDotFiles: ignoreDotFiles,
		MergeDomains: e.flag("MERGE_DOMAIN_CONFIG", false), QuotaMode: true}
	if m.XDS != nil {
		m.XDS.Load = m.Load
	}
	m.HealthyWithAtLeastOneConfig = e.flag("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", false)
	m.Answers = peerAnswers(e)
	if e.flag("TRACING_ENABLED", false) {
		e.errs = append(e.errs, "TRACING_ENABLED=true: sluice exports no OpenTelemetry traces; unset it (or set it to false) to run without them: "+
			"every call is counted in the metrics (/metrics, statsd) and refusals are logged with --log-level debug")
	}
	for _, f := range peerGRPCTLS(e, &m.notes) {
		set(f[0], f[1])
	}
	reportUnread(e, m)
	if len(e.errs) > 0 {
		return nil, nil, fmt.Errorf("%s", strings.Join(e.errs, "; "))
	}
	return flags, m, nil
}

// peerAnswers are the Envoy front's semantics: the peer's, its settings,
// and sluice's own opted back in with SLUICE_RLS_* variables.
func peerAnswers(e *peerEnv) envoyrls.Options {
	o := envoyrls.PeerOptions()
	o.StopIncrementWhenOverLimit = e.flag("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", false)
	o.GlobalShadowMode = e.flag("SHADOW_MODE", false)
	o.GlobalQuotaMode = e.flag("QUOTA_MODE", false)
	o.DynamicMetadata = e.flag("RESPONSE_DYNAMIC_METADATA", false)
	if e.flag("LIMIT_RESPONSE_HEADERS_ENABLED", false) {
		d := envoyrls.PeerHeaderNames
		o.LimitHeaders = &envoyrls.HeaderNames{Limit: e.str("LIMIT_LIMIT_HEADER", d.Limit),
			Remaining: e.str("LIMIT_REMAINING_HEADER", d.Remaining), Reset: e.str("LIMIT_RESET_HEADER", d.Reset)}
	}
	o.PerDescriptor = !e.flag("SLUICE_RLS_ALL_OR_NOTHING", false)
	o.WholeSecondReset = !e.flag("SLUICE_RLS_EXACT_RESET", false)
	o.IETFHeaders = e.flag("SLUICE_RLS_IETF_HEADERS", false)
	return o
}

// peerGRPCTLS is the gRPC port's TLS as the peer reads it (its
// GrpcServerTlsConfig): with GRPC_SERVER_USE_TLS, the certificate and key
// of GRPC_SERVER_TLS_CERT and _KEY, and, with GRPC_CLIENT_TLS_CACERT,
// client certificates required and verified against it, carrying
// GRPC_CLIENT_TLS_SAN when set. It returns the flags they become. A
// file that does not load, or TLS asked without a certificate, is an
// error naming the setting: never plaintext instead. Without
// GRPC_SERVER_USE_TLS the peer ignores the other four, and so does this,
// with a warning.
func peerGRPCTLS(e *peerEnv, notes *[]string) [][2]string {
	cert, key := e.get("GRPC_SERVER_TLS_CERT"), e.get("GRPC_SERVER_TLS_KEY")
	ca, san := e.get("GRPC_CLIENT_TLS_CACERT"), e.get("GRPC_CLIENT_TLS_SAN")
	if !e.flag("GRPC_SERVER_USE_TLS", false) {
		var set []string
		for _, v := range []struct{ name, value string }{{"GRPC_SERVER_TLS_CERT", cert}, {"GRPC_SERVER_TLS_KEY", key},
			{"GRPC_CLIENT_TLS_CACERT", ca}, {"GRPC_CLIENT_TLS_SAN", san}} {
			if v.value != "" {
				set = append(set, v.name)
			}
		}
		if len(set) > 0 {
			*notes = append(*notes, strings.Join(set, ", ")+" set without GRPC_SERVER_USE_TLS=true: ignored, as by envoyproxy/ratelimit; the gRPC port is plaintext")
		}
		return nil
	}
	if cert == "" || key == "" {
		e.errs = append(e.errs, "GRPC_SERVER_USE_TLS=true needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY (the gRPC port's PEM certificate and key): not set")
		return nil
	}
	if _, err := server.LoadKeyPair(cert, key); err != nil {
		e.errs = append(e.errs, fmt.Sprintf("GRPC_SERVER_TLS_CERT=%q, GRPC_SERVER_TLS_KEY=%q: %v", cert, key, err))
	}
	flags := [][2]string{{"grpc-tls-cert", cert}, {"grpc-tls-key", key}}
	if ca != "" {
		if _, err := server.LoadCAPool(ca); err != nil {
			e.errs = append(e.errs, fmt.Sprintf("GRPC_CLIENT_TLS_CACERT=%q: %v", ca, err))
		}
		flags = append(flags, [2]string{"grpc-tls-client-ca", ca})
	}
	if san != "" {
		if ca == "" {
			e.errs = append(e.errs, "GRPC_CLIENT_TLS_SAN needs GRPC_CLIENT_TLS_CACERT: without it no client certificate is asked for, so its name cannot be checked")
		}
		flags = append(flags, [2]string{"grpc-tls-client-san", san})
	}
	return flags
}

// peerStats reads the peer's stats settings (its runner's stats store):
// DISABLE_STATS turns every stat off; else statsd, on by default
// (USE_STATSD), to STATSD_HOST:STATSD_PORT over gostats' STATSD_PROTOCOL
// (tcp by default) every STATS_FLUSH_INTERVAL with EXTRA_TAGS, and the
// Prometheus port with USE_PROMETHEUS. It returns the flags they become.
func peerStats(e *peerEnv, m *ratelimitMode) [][2]string {
	m.NearLimitRatio = 0.8
	if e.flag("DISABLE_STATS", false) {
		m.DisableStats = true
		m.info = append(m.info, "DISABLE_STATS=true: no envoyproxy/ratelimit stats, neither to statsd nor on a Prometheus port")
		return nil
	}
	if r := e.get("NEAR_LIMIT_RATIO"); r != "" { // what counts as near_limit in the stats
		f, err := strconv.ParseFloat(r, 32)
		if err != nil || f < 0 || f > 1 {
			e.errs = append(e.errs, fmt.Sprintf("NEAR_LIMIT_RATIO=%q: must be a number between 0 and 1", r))
		}
		m.NearLimitRatio = f
	}
	if e.flag("USE_PROMETHEUS", false) {
		m.PrometheusAddr, m.PrometheusPath = e.str("PROMETHEUS_ADDR", ":9090"), e.str("PROMETHEUS_PATH", "/metrics")
	}
	m.ResponseTimeMillis = e.flag("PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS", false)
	if !e.flag("USE_STATSD", true) {
		return nil
	}
	flags := [][2]string{{"statsd-addr", e.addr("STATSD_HOST", "localhost", "STATSD_PORT", "8125")}}
	switch p := strings.ToLower(e.str("STATSD_PROTOCOL", "tcp")); p {
	case "tcp", "tcp4", "tcp6":
		flags = append(flags, [2]string{"statsd-protocol", "tcp"})
	case "udp", "udp4", "udp6":
		flags = append(flags, [2]string{"statsd-protocol", "udp"})
	default:
		e.errs = append(e.errs, fmt.Sprintf("STATSD_PROTOCOL=%q: must be tcp or udp", p))
	}
	if v := e.str("STATS_FLUSH_INTERVAL", "10s"); v != "" {
		if d, err := time.ParseDuration(v); err != nil || d <= 0 {
			e.errs = append(e.errs, fmt.Sprintf("STATS_FLUSH_INTERVAL=%q: must be a positive duration such as 10s", v))
		}
		flags = append(flags, [2]string{"statsd-flush-interval", v})
	}
	if v := e.get("EXTRA_TAGS"); v != "" {
		if _, err := envoyrls.ParseStatsdTags(v); err != nil {
			e.errs = append(e.errs, fmt.Sprintf("EXTRA_TAGS=%q: %v", v, err))
		}
		flags = append(flags, [2]string{"statsd-tags", v})
	}
	return flags
}

// peerLogLevel maps logrus's levels onto sluice's.
func peerLogLevel(v string) string {
	switch l := strings.ToLower(v); l {
	case "trace":
		return "debug"
	case "warning":
		return "warn"
	case "fatal", "panic":
		return "error"
	default:
		return l
	}
}
