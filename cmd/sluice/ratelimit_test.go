package main

import (
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/envoyrls"
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
	want := "--http-addr 0.0.0.0:8080 --grpc-addr 0.0.0.0:8081 --envoy-config /srv/runtime_data/current/config --log-level warn --log-format text"
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
	if got, want := strings.Join(flags, " "), "--http-addr 0.0.0.0:8080 --grpc-addr 0.0.0.0:9 --envoy-config /r/sub/app --log-level debug --log-format text"; got != want {
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
	if strings.Join(m.ignored, ",") != "MEMCACHE_HOST_PORT,REDIS_URL" {
		t.Fatalf("ignored %v", m.ignored)
	}
}

func TestRatelimitBadVariables(t *testing.T) {
	for _, kv := range [][]string{{"PORT", "http"}, {"SHADOW_MODE", "maybe"}, {"CONFIG_TYPE", "GRPC_XDS_SOTW"}, {"NEAR_LIMIT_RATIO", "2"}} {
		if _, _, err := ratelimitSettings(envOf(kv...)); err == nil || !strings.Contains(err.Error(), kv[0]) {
			t.Errorf("%s=%s: %v", kv[0], kv[1], err)
		}
	}
}
