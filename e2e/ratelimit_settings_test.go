package e2e

// The drop-in's settings (SPEC §11, issue #36): the ones envoyproxy/
// ratelimit's tests do not reach, against the binary run as `ratelimit`.
// cmd/sluice/peersettings_test.go holds every setting to its class; these
// check what the node does with a few of them once it runs.

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// GRPC_UDS: the gRPC listener is a Unix socket instead of GRPC_HOST:
// GRPC_PORT, which are named as ignored; Envoy's calls and health checks
// are answered there.
func TestRatelimitGRPCOnAUnixSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "ratelimit.sock")
	p, c := startRatelimit(t, nil, append(peerRuntime(t), "GRPC_UDS="+sock)...)
	if p.GRPC != "unix:"+sock {
		t.Fatalf("gRPC listens on %q, want unix:%s", p.GRPC, sock)
	}
	if fi, err := os.Stat(sock); err != nil || fi.Mode()&os.ModeSocket == 0 {
		t.Fatalf("no socket at %s: %v", sock, err)
	}
	c.waitServing()
	if got := peerStatus(c.must("checkout", desc("single_use", "x"))); got != "OK | OK 1/MINUTE left 0" {
		t.Fatalf("first call over the socket: %s", got)
	}
	if got := peerStatus(c.must("checkout", desc("single_use", "x"))); got != "OVER_LIMIT | OVER_LIMIT 1/MINUTE left 0" {
		t.Fatalf("second call over the socket: %s", got)
	}
	if log := p.Log(); !strings.Contains(log, "GRPC_UDS is set") || !strings.Contains(log, "GRPC_HOST, GRPC_PORT") {
		t.Fatalf("GRPC_HOST and GRPC_PORT beside GRPC_UDS not named as ignored:\n%s", log)
	}
}

// A setting sluice cannot honour stops the start with one line naming it
// (TRACING_ENABLED=true); so does a value its type does not take, for a
// setting that changes nothing here, as the peer refuses to start on it;
// and a rule file with a value the peer refuses (value: 1.5) is refused,
// leaving the node up as a bad file does, answering as the peer answers
// without rules.
func TestRatelimitSettingsRefusedAtStart(t *testing.T) {
	for _, c := range []struct{ env, want string }{
		{"TRACING_ENABLED=true", "TRACING_ENABLED=true: sluice exports no OpenTelemetry traces"},
		{"REDIS_POOL_SIZE=ten", `REDIS_POOL_SIZE="ten": must be an integer`},
		{"GRPC_MAX_CONNECTION_AGE=1day", `GRPC_MAX_CONNECTION_AGE="1day": must be a duration`},
	} {
		out, code := runRatelimit(t, append(peerRuntime(t), c.env)...)
		lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
		if code != 2 || len(lines) != 1 || !strings.HasPrefix(lines[0], "sluice ratelimit: ") || !strings.Contains(lines[0], c.want) {
			t.Errorf("%s: exit %d, printed\n%s\nwant exit 2 and one line with %q", c.env, code, out, c.want)
		}
	}
	root := t.TempDir()
	dir := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	rules := "domain: fractions\ndescriptors:\n  - key: plan\n    value: 1.5\n    rate_limit: {unit: minute, requests_per_unit: 2}\n"
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), []byte(rules), 0o644); err != nil {
		t.Fatal(err)
	}
	p, c := startRatelimit(t, nil, "RUNTIME_ROOT="+root, "RUNTIME_SUBDIRECTORY=ratelimit")
	c.waitServing()
	if !strings.Contains(p.Log(), "value must be a string, an integer or true/false, not 1.5") {
		t.Fatalf("value: 1.5 not refused:\n%s", p.Log())
	}
	// As the peer with no file loaded: every call is answered that.
	if _, err := c.call(&rlsv3.RateLimitRequest{Domain: "fractions", Descriptors: []*rlcommon.RateLimitDescriptor{desc("plan", "1.5")}}); err == nil ||
		!strings.Contains(err.Error(), "no rate limit configuration loaded") {
		t.Fatalf("with the refused file: %v", err)
	}
}
