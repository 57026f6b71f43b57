package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"gopkg.in/yaml.v3"
)

// TestEnvoyComposeExample checks deploy/envoy, the Envoy + sluice compose
// stack of docs/envoy.md, short of running Envoy: envoy.yaml is a valid
// Envoy bootstrap (go-control-plane's types and validation rules), its
// rate limit cluster is the compose service on the drop-in's gRPC port,
// and the binary run as the compose file runs it (/bin/ratelimit, its
// environment, ratelimit.yaml where the volume puts it) answers the
// descriptor Envoy's route builds: 3 a minute per key, then OVER_LIMIT.
func TestEnvoyComposeExample(t *testing.T) {
	dir := filepath.Join("..", "deploy", "envoy")
	// envoy.yaml as Envoy reads it: YAML → JSON → the bootstrap proto.
	var doc any
	if err := yaml.Unmarshal(readFileT(t, filepath.Join(dir, "envoy.yaml")), &doc); err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	var boot bootstrapv3.Bootstrap
	if err := protojson.Unmarshal(js, &boot); err != nil {
		t.Fatalf("envoy.yaml is not an Envoy bootstrap: %v", err)
	}
	if err := boot.ValidateAll(); err != nil {
		t.Fatalf("envoy.yaml breaks Envoy's validation rules: %v", err)
	}
	var domain, key string
	for _, l := range boot.StaticResources.Listeners {
		if l.Name != "ingress" {
			continue
		}
		var hcm hcmv3.HttpConnectionManager
		if err := l.FilterChains[0].Filters[0].GetTypedConfig().UnmarshalTo(&hcm); err != nil {
			t.Fatal(err)
		}
		for _, f := range hcm.HttpFilters {
			var rl ratelimitv3.RateLimit
			if f.GetTypedConfig().UnmarshalTo(&rl) == nil {
				domain = rl.Domain
				if c := rl.GetRateLimitService().GetGrpcService().GetEnvoyGrpc().GetClusterName(); c != "ratelimit" {
					t.Fatalf("the rate limit filter calls cluster %q", c)
				}
			}
		}
		rt := hcm.GetRouteConfig().VirtualHosts[0].Routes[0].GetRoute()
		for _, a := range rt.GetRateLimits()[0].Actions {
			if h, ok := a.ActionSpecifier.(*routev3.RateLimit_Action_RequestHeaders_); ok {
				key = h.RequestHeaders.DescriptorKey
			}
		}
	}
	if domain == "" || key == "" {
		t.Fatalf("envoy.yaml: no ratelimit filter domain (%q) or request_headers descriptor key (%q) on the ingress route", domain, key)
	}
	for _, c := range boot.StaticResources.Clusters {
		if c.Name != "ratelimit" {
			continue
		}
		sa := c.LoadAssignment.Endpoints[0].LbEndpoints[0].GetEndpoint().Address.GetSocketAddress()
		if sa.Address != "ratelimit" || sa.GetPortValue() != 8081 {
			t.Fatalf("the ratelimit cluster points at %s:%d, want the compose service ratelimit on the drop-in's gRPC port 8081", sa.Address, sa.GetPortValue())
		}
	}

	// compose.yaml's ratelimit service, run here as it runs there.
	var comp struct {
		Services map[string]struct {
			Entrypoint  []string
			Environment map[string]string
			Volumes     []string
		}
	}
	if err := yaml.Unmarshal(readFileT(t, filepath.Join(dir, "compose.yaml")), &comp); err != nil {
		t.Fatal(err)
	}
	svc, found := comp.Services["ratelimit"]
	if !found || strings.Join(svc.Entrypoint, " ") != "/bin/ratelimit" {
		t.Fatalf("compose.yaml: the ratelimit service runs %v, want /bin/ratelimit", svc.Entrypoint)
	}
	root := t.TempDir()
	var env []string
	for k, v := range svc.Environment {
		if k == "RUNTIME_ROOT" {
			v = root + v
		}
		env = append(env, k+"="+v)
	}
	mounted := false
	for _, v := range svc.Volumes {
		src, dst, _ := strings.Cut(strings.TrimSuffix(v, ":ro"), ":")
		want := filepath.Join(svc.Environment["RUNTIME_ROOT"], svc.Environment["RUNTIME_SUBDIRECTORY"], "config")
		if filepath.Dir(dst) != want {
			t.Fatalf("compose.yaml mounts %s at %s, not in %s where the drop-in reads its rules", src, dst, want)
		}
		if err := os.MkdirAll(filepath.Join(root, filepath.Dir(dst)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, dst), readFileT(t, filepath.Join(dir, src)), 0o644); err != nil {
			t.Fatal(err)
		}
		mounted = true
	}
	if !mounted {
		t.Fatal("compose.yaml mounts no rule file into the ratelimit service")
	}
	clock, now := testClockAt(time.Date(2027, 1, 5, 10, 20, 1, 0, time.UTC))
	_, c := startRatelimit(t, nil, append(env, clock)...)
	awayFromMinuteEndAt(now, 20*time.Second)
	if got := codeList(c.sequence(4, domain, desc(key, "acme"))...); got != codeList(ok, ok, ok, over) {
		t.Fatalf("x-api-key: acme, four requests: %s, want three OK then OVER_LIMIT", got)
	}
	if got := c.must(domain, desc(key, "globex")).OverallCode; got != ok {
		t.Fatalf("another key: %v", got)
	}
}

func readFileT(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
