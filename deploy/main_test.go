// Package deploy_test fails when the packaging drifts from the code: every
// flag and SLUICE_* variable that the Dockerfile, docker-compose.yml, the
// systemd unit and the example config use must be a real setting, the
// configurations they describe must load and validate, and every metric the
// Grafana dashboard and the Prometheus rules query must be one a running
// node exposes.
//
// One file per artifact: dockerfile_test.go (with .dockerignore in
// dockerignore_test.go), compose_test.go, prometheus_test.go,
// grafana_test.go, systemd_test.go, config_test.go (deploy/sluice.conf),
// metrics_test.go (a running node against the dashboards and rules) and
// readme_test.go. YAML is read with a YAML library, the /metrics page with
// Prometheus' own parser.
package deploy_test

import (
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/sluice-rl/sluice/server"
)

// root is the repository root, seen from this package's directory.
const root = ".."

func TestMain(m *testing.M) {
	code := m.Run()
	if binary.dir != "" {
		os.RemoveAll(binary.dir)
	}
	os.Exit(code)
}

func read(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// readYAML decodes the YAML file rel (relative to the repository root)
// into v.
func readYAML(t *testing.T, rel string, v any) {
	t.Helper()
	if err := yaml.Unmarshal([]byte(read(t, rel)), v); err != nil {
		t.Fatalf("%s: %v", rel, err)
	}
}

// ---- Settings, flags and variables ----

func settingNames() map[string]bool {
	out := map[string]bool{}
	for _, n := range server.SettingNames() {
		out[n] = true
	}
	return out
}

func envSettings() map[string]string {
	out := map[string]string{}
	for _, n := range server.SettingNames() {
		out[server.EnvName(n)] = n
	}
	return out
}

var (
	flagRE = regexp.MustCompile("(?:^|[\\s(\\[\"'`])--([a-z][a-z0-9-]*)")
	envRE  = regexp.MustCompile(`\bSLUICE_[A-Z0-9_]+`)
)

// checkFlags fails for every --flag in text that is neither a setting nor
// one of other, the flags of other programs that the text shows.
func checkFlags(t *testing.T, where, text string, other ...string) {
	t.Helper()
	known := settingNames()
	for _, m := range flagRE.FindAllStringSubmatch(text, -1) {
		if !known[m[1]] && !slices.Contains(other, m[1]) {
			t.Errorf("%s: --%s is not a sluice setting (server.SettingNames)", where, m[1])
		}
	}
}

// checkEnvNames fails for every SLUICE_* name in text that is not the
// variable of a setting (or in allowed).
func checkEnvNames(t *testing.T, where, text string, allowed map[string]bool) {
	t.Helper()
	envs := envSettings()
	seen := map[string]bool{}
	for _, name := range envRE.FindAllString(text, -1) {
		if _, ok := envs[name]; !ok && !allowed[name] && !seen[name] {
			seen[name] = true
			t.Errorf("%s: %s is not the variable of any setting (server.EnvName)", where, name)
		}
	}
}

// hashComments returns the '#' comment lines of a file, one per line.
func hashComments(src string) string {
	var b strings.Builder
	for _, line := range strings.Split(src, "\n") {
		if l := strings.TrimSpace(line); strings.HasPrefix(l, "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// loadConfig loads settings from args and env exactly as the binary does,
// validates them and fills in the derived defaults.
func loadConfig(t *testing.T, where string, args []string, env map[string]string) server.Config {
	t.Helper()
	cfg, err := server.Load(args, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatalf("%s: settings do not load: %v", where, err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("%s: settings do not validate:\n%v", where, err)
	}
	return cfg.WithDefaults()
}

func defaultSettings(t *testing.T) map[string]string {
	t.Helper()
	cfg, err := server.Load(nil, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, kv := range cfg.Settings() {
		out[kv[0]] = kv[1]
	}
	return out
}

func portOf(t *testing.T, where, addr string) string {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("%s: %q is not host:port", where, addr)
	}
	return p
}

func hostOf(addr string) string {
	h, _, _ := net.SplitHostPort(addr)
	return h
}

// checkSelfInPeers checks that --bootstrap-peers lists this node with its
// own --raft-addr and --advertise.
func checkSelfInPeers(t *testing.T, where string, cfg server.Config) {
	t.Helper()
	if cfg.BootstrapPeers == "" {
		return
	}
	peers, err := server.ParsePeers(cfg.BootstrapPeers)
	if err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	for _, p := range peers {
		if p.ID == cfg.NodeID {
			if p.RaftAddr != cfg.RaftAddr || p.RespAddr != cfg.Advertise {
				t.Errorf("%s: --bootstrap-peers lists %s as %s=%s, but its --raft-addr is %s and --advertise %s",
					where, p.ID, p.RaftAddr, p.RespAddr, cfg.RaftAddr, cfg.Advertise)
			}
			return
		}
	}
	t.Errorf("%s: --bootstrap-peers does not list this node's --node-id %q", where, cfg.NodeID)
}

// ---- The binary ----

var binary struct {
	once sync.Once
	dir  string
	path string
	err  error
}

// testVersion is linked into the test binary the way the Dockerfile links
// a release's version.
const testVersion = "0.0.0-deploytest"

// versionVar is the -X target of the version, from the server package path.
var versionVar = reflect.TypeOf(server.Config{}).PkgPath() + ".Version"

var _ = &server.Version // -X can only set a package-level string variable

// sluiceBinary builds cmd/sluice as the Dockerfile does: static, trimmed,
// the version linked in.
func sluiceBinary(t *testing.T) string {
	t.Helper()
	binary.once.Do(func() {
		if binary.dir, binary.err = os.MkdirTemp("", "sluice-deploy"); binary.err != nil {
			return
		}
		binary.path = filepath.Join(binary.dir, "sluice")
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w -X "+versionVar+"="+testVersion,
			"-o", binary.path, "./cmd/sluice")
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			binary.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binary.err != nil {
		t.Fatal(binary.err)
	}
	return binary.path
}

// healthcheckFlags returns the flags of `sluice healthcheck`, from its usage.
func healthcheckFlags(t *testing.T) []string {
	t.Helper()
	out, _ := exec.Command(sluiceBinary(t), "healthcheck", "-h").CombinedOutput()
	var flags []string
	for _, m := range regexp.MustCompile(`(?m)^\s+-([a-z][a-z0-9-]*)`).FindAllStringSubmatch(string(out), -1) {
		flags = append(flags, m[1])
	}
	if !slices.Contains(flags, "http-addr") {
		t.Fatalf("sluice healthcheck -h shows no --http-addr:\n%s", out)
	}
	return flags
}
