package deploy_test

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/sluice-rl/sluice/server"
)

func mustInterpolate(t *testing.T, where, s string, vars map[string]string) string {
	t.Helper()
	out, err := interpolate(s, vars)
	if err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	return out
}

func mergeSets(sets ...map[string]bool) map[string]bool {
	out := map[string]bool{}
	for _, s := range sets {
		maps.Copy(out, s)
	}
	return out
}

// composeVars are variables of docker-compose.yml itself: compose
// interpolates them, sluice never reads them.
var composeVars = map[string]bool{"SLUICE_PASSWORD": true}

// binaryVars are variables the binary reads that are no setting of a
// node: SLUICE_REQUIRE_AUTH (cmd/sluice) refuses to start a node without
// a password.
var binaryVars = map[string]bool{"SLUICE_REQUIRE_AUTH": true}

// composeTestEnv is the environment compose interpolates the file with in
// the tests that read a node's settings: a password, as `up` needs.
var composeTestEnv = map[string]string{"SLUICE_PASSWORD": "a-test-password-of-some-length"}

// compose is the part of docker-compose.yml the tests read.
type compose struct {
	Services map[string]composeService
	Networks map[string]struct {
		IPAM struct {
			Config []struct{ Subnet string }
		}
	}
	Volumes map[string]any
}

type composeService struct {
	Build           string
	Image           string
	Command         []string
	Environment     composeEnv
	Ports           []string
	Volumes         []string
	Networks        composeNetworks
	StopGracePeriod string `yaml:"stop_grace_period"`
	Profiles        []string

	env map[string]string // the container's environment, interpolated (loadComposeWith)
}

// composeEnv is a service's environment, written as a mapping or as a
// list of NAME=value.
type composeEnv map[string]string

func (e *composeEnv) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.MappingNode {
		return n.Decode((*map[string]string)(e))
	}
	var list []string
	if err := n.Decode(&list); err != nil {
		return err
	}
	*e = composeEnv{}
	for _, kv := range list {
		k, v, _ := strings.Cut(kv, "=")
		(*e)[k] = v
	}
	return nil
}

// composeNetworks are the networks a service is on, written as a mapping
// (with options such as ipv4_address) or as a list of names.
type composeNetworks map[string]struct {
	IPv4Address string `yaml:"ipv4_address"`
}

func (c *composeNetworks) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.MappingNode {
		return n.Decode((*map[string]struct {
			IPv4Address string `yaml:"ipv4_address"`
		})(c))
	}
	var names []string
	if err := n.Decode(&names); err != nil {
		return err
	}
	*c = composeNetworks{}
	for _, name := range names {
		(*c)[name] = struct {
			IPv4Address string `yaml:"ipv4_address"`
		}{}
	}
	return nil
}

// isSluice tells the services that run the image built here.
func (s composeService) isSluice() bool {
	return s.Build != "" || strings.HasPrefix(s.Image, "sluice")
}

// mounts returns a service's volumes as target → source (host paths
// relative to the repository, without "./").
func (s composeService) mounts(t *testing.T, where string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, v := range s.Volumes {
		f := strings.Split(v, ":")
		if len(f) < 2 {
			t.Fatalf("%s: volume %q has no target", where, v)
		}
		out[f[1]] = strings.TrimPrefix(f[0], "./")
	}
	return out
}

// portMapping is one published port.
type portMapping struct{ host, container string }

// published returns a service's published ports.
func (s composeService) published(t *testing.T, where string) []portMapping {
	t.Helper()
	var out []portMapping
	for _, p := range s.Ports {
		f := strings.Split(p, ":")
		if len(f) < 2 {
			t.Errorf("%s: port %q should be host:container", where, p)
			continue
		}
		out = append(out, portMapping{host: f[len(f)-2], container: strings.TrimSuffix(f[len(f)-1], "/tcp")})
	}
	return out
}

// composeNode is a sluice service with the settings its container runs.
type composeNode struct {
	service string
	svc     composeService
	args    []string
	cfg     server.Config
}

type composeFile struct {
	compose
	nodes []composeNode // sorted by service name
}

var interpRE = regexp.MustCompile(`\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}`)

// interpolate expands ${VAR}, ${VAR:-default} and $$ as compose does with
// the variables of vars set; ${VAR:?message} of an unset one is an error,
// as in compose.
func interpolate(s string, vars map[string]string) (string, error) {
	var err error
	out := interpRE.ReplaceAllStringFunc(s, func(m string) string {
		if m == "$$" {
			return "$"
		}
		g := interpRE.FindStringSubmatch(m)
		v, set := vars[g[1]]
		switch {
		case g[2] == ":-" && v == "" || g[2] == "-" && !set:
			return g[3]
		case g[2] == ":?" && v == "" || g[2] == "?" && !set:
			err = fmt.Errorf("%s is required: %s", g[1], g[3])
		}
		return v
	})
	return out, err
}

func loadCompose(t *testing.T) composeFile {
	t.Helper()
	return loadComposeWith(t, composeTestEnv)
}

// loadComposeWith reads docker-compose.yml as compose interpolates it with
// vars: the settings each node's container runs with.
func loadComposeWith(t *testing.T, vars map[string]string) composeFile {
	t.Helper()
	const name = "docker-compose.yml"
	var cf composeFile
	readYAML(t, name, &cf.compose)
	imageEnv := loadDockerfile(t).env
	for sname, svc := range cf.Services {
		if !svc.isSluice() {
			continue
		}
		env := maps.Clone(imageEnv) // the container's environment: the image's ENV, then compose's
		for k, v := range svc.Environment {
			env[k] = mustInterpolate(t, name+" services."+sname, v, vars)
		}
		var args []string
		for _, a := range svc.Command {
			args = append(args, mustInterpolate(t, name+" services."+sname, a, vars))
		}
		svc.env = env
		cf.nodes = append(cf.nodes, composeNode{service: sname, svc: svc, args: args,
			cfg: loadConfig(t, name+" services."+sname, args, env)})
	}
	sort.Slice(cf.nodes, func(i, j int) bool { return cf.nodes[i].service < cf.nodes[j].service })
	return cf
}

// staticIP returns the service's ipv4_address and the network it is on.
func staticIP(t *testing.T, where string, svc composeService) (ip net.IP, network string) {
	t.Helper()
	for name, n := range svc.Networks {
		if n.IPv4Address != "" {
			return net.ParseIP(n.IPv4Address), name
		}
	}
	t.Fatalf("%s: no network gives the node a fixed ipv4_address (its --raft-addr)", where)
	return nil, ""
}

// subnetOf returns the first ipam subnet of a compose network.
func (c compose) subnetOf(t *testing.T, name string) string {
	t.Helper()
	where := "docker-compose.yml networks." + name + ".ipam"
	if len(c.Networks[name].IPAM.Config) == 0 {
		t.Fatalf("%s: no config", where)
	}
	return c.Networks[name].IPAM.Config[0].Subnet
}

func TestCompose(t *testing.T) {
	src := read(t, "docker-compose.yml")
	checkFlags(t, "docker-compose.yml comments", hashComments(src), "build", "profile")
	checkEnvNames(t, "docker-compose.yml", src, mergeSets(composeVars, binaryVars))
	for v := range composeVars {
		if _, ok := envSettings()[v]; ok {
			t.Errorf("%s is both a compose variable and the variable of a setting", v)
		}
	}
	cf := loadCompose(t)
	if len(cf.nodes) != 3 {
		t.Fatalf("docker-compose.yml: want 3 sluice services, got %d", len(cf.nodes))
	}
	dfExposed := exposedPorts(loadDockerfile(t).stages[1])
	hostPorts := map[string]string{}
	dataVolumes := map[string]string{}
	peersOf := map[string]string{}
	for _, n := range cf.nodes {
		where := "docker-compose.yml services." + n.service
		cfg := n.cfg
		if n.svc.Build != "." {
			t.Errorf("%s: build should be the repository root (\".\"), got %q", where, n.svc.Build)
		}
		if cfg.ProtectedMode && cfg.RequirePass == "" && cfg.ACLFile == "" {
			t.Errorf("%s: no password: in protected mode the node would refuse every client from outside its container", where)
		}
		if cfg.NodeID == "" || cfg.BootstrapPeers == "" {
			t.Fatalf("%s: every node needs --node-id and --bootstrap-peers", where)
		}
		peersOf[n.service] = cfg.BootstrapPeers
		checkSelfInPeers(t, where, cfg)

		// Raft: the node's fixed address on the compose network.
		ip, netName := staticIP(t, where, n.svc)
		if !ip.Equal(net.ParseIP(hostOf(cfg.RaftAddr))) {
			t.Errorf("%s: --raft-addr %s is not the node's ipv4_address %s", where, cfg.RaftAddr, ip)
		}
		subnet := cf.subnetOf(t, netName)
		if _, cidr, err := net.ParseCIDR(subnet); err != nil || !cidr.Contains(ip) {
			t.Errorf("%s: ipv4_address %s is outside the network's subnet %s", where, ip, subnet)
		}
		// Peers and clients inside the network reach the node by its
		// service name.
		if hostOf(cfg.Advertise) != n.service || portOf(t, where, cfg.Advertise) != portOf(t, where, cfg.RespAddr) {
			t.Errorf("%s: --advertise %s should be %s:<resp port %s>", where, cfg.Advertise, n.service, portOf(t, where, cfg.RespAddr))
		}

		// Published ports: RESP and HTTP, each host port used once.
		published := map[string]bool{}
		for _, p := range n.svc.published(t, where) {
			if other, dup := hostPorts[p.host]; dup {
				t.Errorf("%s: host port %s is published by %s too", where, p.host, other)
			}
			hostPorts[p.host] = n.service
			published[p.container] = true
			if !slices.Contains(dfExposed, p.container) {
				t.Errorf("%s: publishes %s, which the Dockerfile does not EXPOSE", where, p.container)
			}
		}
		for _, want := range []string{portOf(t, where, cfg.RespAddr), portOf(t, where, cfg.HTTPAddr)} {
			if !published[want] {
				t.Errorf("%s: container port %s (RESP or HTTP) is not published", where, want)
			}
		}

		// One named volume per node, at its data-dir.
		vol, ok := n.svc.mounts(t, where)[cfg.DataDir]
		if _, isDeclared := cf.Volumes[vol]; !ok || !isDeclared {
			t.Errorf("%s: want a named volume (declared under volumes:) at the data-dir %s, got %q", where, cfg.DataDir, vol)
		} else if other, dup := dataVolumes[vol]; dup {
			t.Errorf("%s: shares volume %s with %s", where, vol, other)
		}
		dataVolumes[vol] = n.service

		if g := n.svc.StopGracePeriod; g != "" {
			if d, err := time.ParseDuration(g); err != nil || d <= cfg.ShutdownTimeout {
				t.Errorf("%s: stop_grace_period %s should exceed shutdown-timeout %v", where, g, cfg.ShutdownTimeout)
			}
		} else {
			t.Errorf("%s: set stop_grace_period above shutdown-timeout %v (compose's default is 10s)", where, cfg.ShutdownTimeout)
		}
	}

	// --bootstrap-peers: the identical list on every node, naming them all.
	first := peersOf[cf.nodes[0].service]
	for s, p := range peersOf {
		if p != first {
			t.Errorf("docker-compose.yml: --bootstrap-peers of %s differs from %s's:\n %s\n %s", s, cf.nodes[0].service, p, first)
		}
	}
	peers, err := server.ParsePeers(first)
	if err != nil {
		t.Fatal(err)
	}
	var ids, want []string
	for _, p := range peers {
		ids = append(ids, p.ID)
	}
	for _, n := range cf.nodes {
		want = append(want, n.cfg.NodeID)
	}
	sort.Strings(ids)
	sort.Strings(want)
	if !slices.Equal(ids, want) {
		t.Errorf("docker-compose.yml: --bootstrap-peers names %v, the nodes are %v", ids, want)
	}

	// The other services are optional (a profile), and what they mount
	// from the repository exists.
	for name, svc := range cf.Services {
		if !svc.isSluice() && !slices.Contains(svc.Profiles, "monitoring") {
			t.Errorf("docker-compose.yml services.%s: not in the monitoring profile", name)
		}
		for _, src := range svc.mounts(t, "services."+name) {
			if strings.Contains(src, "/") {
				if _, err := os.Stat(filepath.Join(root, src)); err != nil {
					t.Errorf("docker-compose.yml services.%s mounts %s: %v", name, src, err)
				}
			}
		}
	}
	for _, s := range []string{"prometheus", "grafana"} {
		if _, ok := cf.Services[s]; !ok {
			t.Errorf("docker-compose.yml: no %s service", s)
		}
	}
}

// service returns the compose service name, failing the test if there is
// none.
func (c compose) service(t *testing.T, name string) composeService {
	t.Helper()
	svc, ok := c.Services[name]
	if !ok {
		t.Fatalf("docker-compose.yml: no %s service", name)
	}
	return svc
}

// Compose v1 (Debian's docker-compose 1.29) validates docker-compose.yml
// against its own schema, which knows no top-level `name`: `config -q`
// reads, validates and resolves the file without a Docker engine. Compose
// v2 loads it in deploy/charttest (TestComposeLoadsInComposeV2). Without
// docker-compose the test is skipped, and fails when SLUICE_REQUIRE_TOOLS
// is set (as in CI, which installs it).
func TestComposeV1Config(t *testing.T) {
	bin, err := exec.LookPath("docker-compose")
	if err != nil {
		if os.Getenv("SLUICE_REQUIRE_TOOLS") != "" {
			t.Fatal("docker-compose is not installed (apt-get install docker-compose); SLUICE_REQUIRE_TOOLS is set")
		}
		t.Skip("docker-compose (Compose v1) is not installed")
	}
	for _, profile := range []string{"", "monitoring"} {
		args := []string{"-f", filepath.Join("..", "docker-compose.yml"), "--project-directory", "..", "-p", "sluice"}
		if profile != "" {
			args = append(args, "--profile", profile)
		}
		// With the password and without it: only starting a node needs it.
		for _, pw := range []string{"SLUICE_PASSWORD=a-test-password", ""} {
			cmd := exec.Command(bin, append(args, "config", "-q")...)
			cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "SLUICE_PASSWORD=") })
			if pw != "" {
				cmd.Env = append(cmd.Env, pw)
			}
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("docker-compose %s config (profile %q, %q): %v\n%s", strings.Join(args, " "), profile, pw, err, out)
			}
		}
	}
}

// Compose needs SLUICE_PASSWORD only to start nodes: the file
// interpolates with it unset (so ps, config, logs and down run without
// it), and a node started without it exits at once, in one line naming
// SLUICE_PASSWORD, instead of running in protected mode, where it would
// answer no client outside its container. The node is the real binary
// with the service's command and environment.
func TestComposeNeedsPasswordOnlyToStart(t *testing.T) {
	src := read(t, "docker-compose.yml")
	if strings.Contains(src, "${SLUICE_PASSWORD:?") || strings.Contains(src, "${SLUICE_PASSWORD?") {
		t.Error("docker-compose.yml: ${SLUICE_PASSWORD:?…} makes every compose command, even ps, refuse to run without it")
	}
	cf := loadComposeWith(t, nil)
	if len(cf.nodes) == 0 {
		t.Fatal("docker-compose.yml: no sluice services")
	}
	bin := sluiceBinary(t)
	for _, n := range cf.nodes {
		where := "docker-compose.yml services." + n.service
		if hint := n.svc.env["SLUICE_REQUIRE_AUTH"]; !strings.Contains(hint, "SLUICE_PASSWORD") {
			t.Errorf("%s: SLUICE_REQUIRE_AUTH should name SLUICE_PASSWORD as the fix, got %q", where, hint)
		}
		if n.cfg.RequirePass != "" {
			t.Fatalf("%s: a password with SLUICE_PASSWORD unset: %q", where, n.cfg.RequirePass)
		}
		// The container's settings with the data directory, and the
		// addresses, moved to this machine: the refusal comes before any
		// of them is used, and the test shows that.
		dir := filepath.Join(t.TempDir(), "data")
		cmd := exec.Command(bin, append(slices.Clone(n.args), "--data-dir", dir,
			"--resp-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--raft-addr", "127.0.0.1:0")...)
		cmd.Env = []string{}
		for k, v := range n.svc.env {
			if k != "SLUICE_DATA_DIR" && k != "SLUICE_RESP_ADDR" && k != "SLUICE_HTTP_ADDR" {
				cmd.Env = append(cmd.Env, k+"="+v)
			}
		}
		out, err := cmd.CombinedOutput()
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 2 || len(lines) != 1 || !strings.Contains(lines[0], "SLUICE_PASSWORD") {
			t.Errorf("%s without SLUICE_PASSWORD: %v, want exit 2 and one line naming SLUICE_PASSWORD:\n%s", where, err, out)
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("%s: the refused node created its data directory: %v", where, err)
		}
	}
}
