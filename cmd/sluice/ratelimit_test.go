package main

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/envoyrls"
	"github.com/sluice-rl/sluice/server"
)

func envOf(kv ...string) func(string) string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) string { return m[k] }
}

// The peer's defaults (src/settings/settings.go): HTTP 0.0.0.0:8080, gRPC
// 0.0.0.0:8081, debug 0.0.0.0:6070, rules in
// /srv/runtime_data/current/config, WARN, no headers.
func TestRatelimitDefaults(t *testing.T) {
	flags, m, err := ratelimitSettings(envOf())
	if err != nil {
		t.Fatal(err)
	}
	want := "--http-addr 0.0.0.0:8080 --grpc-addr 0.0.0.0:8081 --grpc-max-connection-age 24h0m0s --grpc-max-connection-age-grace 1h0m0s --envoy-config /srv/runtime_data/current/config --log-level warn --log-format text --statsd-addr localhost:8125 --statsd-protocol tcp --statsd-flush-interval 10s"
	if got := strings.Join(flags, " "); got != want {
		t.Fatalf("flags %s\nwant  %s", got, want)
	}
	if m.DebugAddr != "0.0.0.0:6070" || m.PrometheusAddr != "" || !m.Load.Tree || m.Load.IgnoreDotFiles || m.Load.MergeDomains {
		t.Fatalf("mode %+v", m.RatelimitMode)
	}
	if m.Answers != envoyrls.PeerOptions() {
		t.Fatalf("answers %+v, want the peer's", m.Answers)
	}
}

// Each variable lands where it belongs; the peer's variable (or its
// default) wins over SLUICE_* for the same setting.
func TestRatelimitVariables(t *testing.T) {
	flags, m, err := ratelimitSettings(envOf("RUNTIME_ROOT", "/r", "RUNTIME_SUBDIRECTORY", "sub", "RUNTIME_APPDIRECTORY", "app",
		"GRPC_PORT", "9", "SLUICE_HTTP_ADDR", "127.0.0.1:1", "LOG_LEVEL", "DEBUG", "LIMIT_RESPONSE_HEADERS_ENABLED", "true",
		"LIMIT_RESET_HEADER", "X-Reset", "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "true", "SHADOW_MODE", "true",
		"MERGE_DOMAIN_CONFIG", "true", "RUNTIME_IGNOREDOTFILES", "true", "USE_PROMETHEUS", "true",
		"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", "true", "SLUICE_RLS_ALL_OR_NOTHING", "true", "QUOTA_MODE", "true", "REDIS_URL", "x", "MEMCACHE_HOST_PORT", "y"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(flags, " "), "--http-addr 0.0.0.0:8080 --grpc-addr 0.0.0.0:9 --grpc-max-connection-age 24h0m0s --grpc-max-connection-age-grace 1h0m0s --envoy-config /r/sub/app --log-level debug --log-format text --statsd-addr localhost:8125 --statsd-protocol tcp --statsd-flush-interval 10s"; got != want {
		t.Fatalf("flags %s\nwant  %s", got, want)
	}
	a := m.Answers
	if !a.StopIncrementWhenOverLimit || !a.GlobalShadowMode || !a.GlobalQuotaMode || !m.Load.QuotaMode || a.PerDescriptor || a.LimitHeaders == nil ||
		*a.LimitHeaders != (envoyrls.HeaderNames{Limit: "RateLimit-Limit", Remaining: "RateLimit-Remaining", Reset: "X-Reset"}) {
		t.Fatalf("answers %+v %+v", a, a.LimitHeaders)
	}
	if !m.Load.MergeDomains || !m.Load.IgnoreDotFiles || !m.HealthyWithAtLeastOneConfig || m.PrometheusAddr != ":9090" || m.PrometheusPath != "/metrics" {
		t.Fatalf("mode %+v", m.RatelimitMode)
	}
	if len(m.info) != 1 || !strings.HasSuffix(m.info[0], "): MEMCACHE_HOST_PORT, REDIS_URL") {
		t.Fatalf("ignored %q", m.info)
	}
}

func TestRatelimitBadVariables(t *testing.T) {
	for _, kv := range [][]string{{"PORT", "http"}, {"SHADOW_MODE", "maybe"}, {"CONFIG_TYPE", "REDIS"}, {"NEAR_LIMIT_RATIO", "2"},
		{"FORCE_START_WITHOUT_INITIAL_CONFIG", "yes"}} {
		if _, _, err := ratelimitSettings(envOf(kv...)); err == nil || !strings.Contains(err.Error(), kv[0]) {
			t.Errorf("%s=%s: %v", kv[0], kv[1], err)
		}
	}
}

// CONFIG_TYPE=GRPC_XDS_SOTW: the peer's xDS variables with its defaults,
// and no rule directory.
func TestRatelimitXDSDefaults(t *testing.T) {
	flags, m, err := ratelimitSettings(envOf("CONFIG_TYPE", "GRPC_XDS_SOTW", "MERGE_DOMAIN_CONFIG", "true"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(flags, " "), "--http-addr 0.0.0.0:8080 --grpc-addr 0.0.0.0:8081 --grpc-max-connection-age 24h0m0s --grpc-max-connection-age-grace 1h0m0s --envoy-config  --log-level warn --log-format text --statsd-addr localhost:8125 --statsd-protocol tcp --statsd-flush-interval 10s"; got != want {
		t.Fatalf("flags %s\nwant  %s", got, want)
	}
	x := m.XDS
	if x == nil || m.ForceStart {
		t.Fatalf("mode %+v", m.RatelimitMode)
	}
	want := envoyrls.XDSBackoff{Initial: 10 * time.Second, Max: 60 * time.Second, Factor: 0.5, Jitter: true}
	if x.ServerURL != "localhost:18000" || x.NodeID != "default" || len(x.NodeMetadata) != 0 || x.Headers != nil || x.TLS != nil ||
		x.ConnectRetry != 3*time.Second || x.MaxRecvMsgSize != 0 || x.Backoff != want || !x.Load.MergeDomains || !x.Load.QuotaMode {
		t.Fatalf("xds settings %+v", x)
	}
}

func TestRatelimitXDSVariables(t *testing.T) {
	_, m, err := ratelimitSettings(envOf("CONFIG_TYPE", "GRPC_XDS_SOTW", "FORCE_START_WITHOUT_INITIAL_CONFIG", "true",
		"CONFIG_GRPC_XDS_SERVER_URL", "xds.example:9000", "CONFIG_GRPC_XDS_NODE_ID", "rl-1",
		"CONFIG_GRPC_XDS_NODE_METADATA", "zone=a,team=edge=x,bad", "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "Authorization:Bearer t,x-env:prod",
		"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "250ms", "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "1s",
		"XDS_CLIENT_BACKOFF_MAX_INTERVAL", "5s", "XDS_CLIENT_BACKOFF_RANDOM_FACTOR", "2", "XDS_CLIENT_BACKOFF_JITTER", "false",
		"XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "1048576", "CONFIG_GRPC_XDS_SERVER_USE_TLS", "true", "CONFIG_GRPC_XDS_SERVER_TLS_SAN", "xds.internal"))
	if err != nil {
		t.Fatal(err)
	}
	x := m.XDS
	if !m.ForceStart || x.ServerURL != "xds.example:9000" || x.NodeID != "rl-1" || x.NodeMetadata["zone"] != "a" || x.NodeMetadata["team"] != "edge=x" ||
		len(x.NodeMetadata) != 2 || x.Headers["authorization"] != "Bearer t" || x.Headers["x-env"] != "prod" || x.ConnectRetry != 250*time.Millisecond ||
		x.Backoff != (envoyrls.XDSBackoff{Initial: time.Second, Max: 5 * time.Second, Factor: 2}) || x.MaxRecvMsgSize != 1<<20 ||
		x.TLS == nil || x.TLS.ServerName != "xds.internal" {
		t.Fatalf("xds settings %+v", x)
	}
	if len(m.notes) != 1 || !strings.Contains(m.notes[0], "CONFIG_GRPC_XDS_NODE_METADATA") || !strings.Contains(m.notes[0], "bad") {
		t.Fatalf("notes %q", m.notes)
	}
}

// A bad xDS variable is named, with the form it takes.
func TestRatelimitXDSBadVariables(t *testing.T) {
	for _, c := range []struct {
		kv   []string
		want string
	}{
		{[]string{"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "ten"}, "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL=\"ten\": must be a duration"},
		{[]string{"XDS_CLIENT_BACKOFF_RANDOM_FACTOR", "-1"}, "XDS_CLIENT_BACKOFF_RANDOM_FACTOR"},
		{[]string{"XDS_CLIENT_BACKOFF_JITTER", "sometimes"}, "XDS_CLIENT_BACKOFF_JITTER"},
		{[]string{"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "3"}, "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL"},
		{[]string{"XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "1MB"}, "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES"},
		{[]string{"CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "token"}, "the form is name:value,name:value"},
		{[]string{"CONFIG_GRPC_XDS_SERVER_USE_TLS", "true", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "/c.pem"}, "set both"},
		{[]string{"CONFIG_GRPC_XDS_SERVER_USE_TLS", "true", "CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "/nonexistent/ca.pem"}, "CONFIG_GRPC_XDS_SERVER_TLS_CACERT"},
	} {
		_, _, err := ratelimitSettings(envOf(append([]string{"CONFIG_TYPE", "GRPC_XDS_SOTW"}, c.kv...)...))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v; want %q", c.kv, err, c.want)
		}
	}
}

// Rules come from one place: --envoy-config beside CONFIG_TYPE=GRPC_XDS_SOTW
// is refused at start, naming both.
func TestRatelimitXDSWithEnvoyConfig(t *testing.T) {
	var stdout, stderr strings.Builder
	code := ratelimit([]string{"--envoy-config", "/etc/rules", "--data-dir", t.TempDir()}, envOf("CONFIG_TYPE", "GRPC_XDS_SOTW"), &stdout, &stderr)
	if code != 2 || !strings.Contains(stderr.String(), "--envoy-config: cannot be used with CONFIG_TYPE=GRPC_XDS_SOTW") {
		t.Fatalf("exit %d, stderr %q", code, stderr.String())
	}
}

// The peer's stats settings: statsd on by default (gostats' TCP),
// USE_STATSD=false without it, DISABLE_STATS every stat off, the ones
// not honoured named at INFO, a bad value refused naming it.
func TestRatelimitStats(t *testing.T) {
	flags, _, err := ratelimitSettings(envOf("STATSD_HOST", "stats", "STATSD_PORT", "9125", "STATSD_PROTOCOL", "udp",
		"STATS_FLUSH_INTERVAL", "1s", "EXTRA_TAGS", "a:b,c:d"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(flags[14:], " "), "--statsd-addr stats:9125 --statsd-protocol udp --statsd-flush-interval 1s --statsd-tags a:b,c:d"; got != want {
		t.Fatalf("flags %s\nwant  %s", got, want)
	}
	flags, m, err := ratelimitSettings(envOf("USE_STATSD", "false", "USE_PROMETHEUS", "true", "PROMETHEUS_MAPPER_YAML", "/m.yaml"))
	if err != nil || strings.Contains(strings.Join(flags, " "), "statsd") || m.PrometheusAddr != ":9090" || len(m.info) != 1 || !strings.Contains(m.info[0], "PROMETHEUS_MAPPER_YAML") {
		t.Fatalf("USE_STATSD=false: %v %v %+v", flags, err, m.info)
	}
	flags, m, err = ratelimitSettings(envOf("DISABLE_STATS", "true", "USE_PROMETHEUS", "true"))
	if err != nil || strings.Contains(strings.Join(flags, " "), "statsd") || !m.DisableStats || m.PrometheusAddr != "" {
		t.Fatalf("DISABLE_STATS: %v %v %+v", flags, err, m)
	}
	for _, env := range [][]string{{"STATSD_PROTOCOL", "sctp"}, {"STATS_FLUSH_INTERVAL", "10"}, {"EXTRA_TAGS", "novalue"}, {"STATSD_PORT", "x"}} {
		if _, _, err := ratelimitSettings(envOf(env...)); err == nil || !strings.Contains(err.Error(), env[0]) {
			t.Errorf("%s=%s: %v", env[0], env[1], err)
		}
	}
}

// GRPC_MAX_CONNECTION_AGE=0 is gRPC's "never", as for the peer: no grace
// is passed, so the node starts (a grace needs an age).
func TestRatelimitConnectionAgeZero(t *testing.T) {
	flags, _, err := ratelimitSettings(envOf("GRPC_MAX_CONNECTION_AGE", "0"))
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(flags, " ")
	if !strings.Contains(got, "--grpc-max-connection-age 0s") || strings.Contains(got, "grace") {
		t.Fatalf("flags %s", got)
	}
	cfg, err := server.Load(flags, func(string) string { return "" }, io.Discard)
	if err == nil {
		err = cfg.Validate()
	}
	if err != nil {
		t.Fatalf("the flags of GRPC_MAX_CONNECTION_AGE=0 do not start a node: %v", err)
	}
}
