// Package deploy_test fails when the packaging drifts from the code: every
// flag and SLUICE_* variable that the Dockerfile, docker-compose.yml, the
// systemd unit and the example config use must be a real setting, the
// configurations they describe must load and validate, and every metric the
// Grafana dashboard and the Prometheus rules query must be one a running
// node exposes.
package deploy_test

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/resptest"
	"github.com/sluice-rl/sluice/internal/testkit"
	"github.com/sluice-rl/sluice/internal/testnode"
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

// composeVars are variables of docker-compose.yml itself: compose
// interpolates them, sluice never reads them.
var composeVars = map[string]bool{"SLUICE_PASSWORD": true}

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

// ---- Dockerfile ----

type instr struct {
	line int
	cmd  string // upper case
	args string // continuation lines joined
}

type dockerfile struct {
	stages   [][]instr
	comments string
	env      map[string]string // the final image's ENV
}

func loadDockerfile(t *testing.T) dockerfile {
	t.Helper()
	src := read(t, "Dockerfile")
	var df dockerfile
	var cur strings.Builder
	start, cont := 0, false
	for i, raw := range strings.Split(src, "\n") {
		line := strings.TrimSpace(raw)
		if strings.HasPrefix(line, "#") {
			df.comments += line + "\n"
			continue
		}
		if line == "" {
			continue
		}
		if !cont {
			start = i + 1
			cur.Reset()
		}
		if s, ok := strings.CutSuffix(line, `\`); ok {
			cur.WriteString(s + " ")
			cont = true
			continue
		}
		cur.WriteString(line)
		cont = false
		word, rest, _ := strings.Cut(cur.String(), " ")
		in := instr{line: start, cmd: strings.ToUpper(word), args: strings.TrimSpace(rest)}
		if in.cmd == "FROM" {
			df.stages = append(df.stages, nil)
		}
		if len(df.stages) == 0 {
			t.Fatalf("Dockerfile:%d: %s before the first FROM", in.line, in.cmd)
		}
		df.stages[len(df.stages)-1] = append(df.stages[len(df.stages)-1], in)
	}
	if len(df.stages) != 2 {
		t.Fatalf("Dockerfile: want two stages (build, final), got %d", len(df.stages))
	}
	df.env = stageEnv(t, df.stages[1])
	return df
}

func stageEnv(t *testing.T, stage []instr) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, in := range stage {
		if in.cmd != "ENV" {
			continue
		}
		fields := strings.Fields(in.args)
		if len(fields) > 0 && !strings.Contains(fields[0], "=") { // ENV key value
			env[fields[0]] = strings.TrimSpace(strings.TrimPrefix(in.args, fields[0]))
			continue
		}
		for _, f := range fields {
			k, v, ok := strings.Cut(f, "=")
			if !ok || strings.ContainsAny(v, `"'`) && !strings.HasPrefix(v, `"`) {
				t.Fatalf("Dockerfile:%d: cannot read ENV %q", in.line, f)
			}
			if uq, err := strconv.Unquote(v); err == nil {
				v = uq
			}
			env[k] = v
		}
	}
	return env
}

func find(stage []instr, cmd string) []instr {
	var out []instr
	for _, in := range stage {
		if in.cmd == cmd {
			out = append(out, in)
		}
	}
	return out
}

func indexOf(stage []instr, match func(instr) bool) int {
	for i, in := range stage {
		if match(in) {
			return i
		}
	}
	return -1
}

func execForm(t *testing.T, in instr, args string) []string {
	t.Helper()
	var out []string
	if err := json.Unmarshal([]byte(args), &out); err != nil || len(out) == 0 {
		t.Fatalf("Dockerfile:%d: %s must use the exec form [\"…\", …], got %s", in.line, in.cmd, args)
	}
	return out
}

// copyArgs splits COPY's arguments into options, sources and destination.
func copyArgs(in instr) (opts map[string]string, srcs []string, dst string) {
	opts = map[string]string{}
	fields := strings.Fields(in.args)
	for len(fields) > 0 && strings.HasPrefix(fields[0], "--") {
		k, v, _ := strings.Cut(strings.TrimPrefix(fields[0], "--"), "=")
		opts[k] = v
		fields = fields[1:]
	}
	if len(fields) < 2 {
		return opts, nil, ""
	}
	return opts, fields[:len(fields)-1], fields[len(fields)-1]
}

func goModVersion(t *testing.T) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindStringSubmatch(read(t, "go.mod"))
	if m == nil {
		t.Fatal("go.mod has no go directive")
	}
	return m[1]
}

func TestDockerfile(t *testing.T) {
	df := loadDockerfile(t)
	checkFlags(t, "Dockerfile comments", df.comments, "build-arg")
	checkEnvNames(t, "Dockerfile", read(t, "Dockerfile"), nil)
	build, final := df.stages[0], df.stages[1]

	// Build stage: the Go release of go.mod; modules in their own layer,
	// before the sources; a static, trimmed binary.
	m := regexp.MustCompile(`^golang:(\d+\.\d+)(?:\.\d+)?-bookworm\s+(?i:as)\s+(\S+)$`).FindStringSubmatch(build[0].args)
	if m == nil {
		t.Fatalf("Dockerfile:%d: build stage must be FROM golang:<go.mod's release>-bookworm AS <name>, got %q", build[0].line, build[0].args)
	}
	if want := goModVersion(t); m[1] != want {
		t.Errorf("Dockerfile:%d: builds with Go %s, go.mod asks for %s", build[0].line, m[1], want)
	}
	buildStage := m[2]
	iMod := indexOf(build, func(in instr) bool {
		_, srcs, _ := copyArgs(in)
		return in.cmd == "COPY" && slices.Equal(srcs, []string{"go.mod", "go.sum"})
	})
	iDownload := indexOf(build, func(in instr) bool { return in.cmd == "RUN" && strings.Contains(in.args, "go mod download") })
	iSources := indexOf(build, func(in instr) bool {
		_, srcs, _ := copyArgs(in)
		return in.cmd == "COPY" && slices.Equal(srcs, []string{"."})
	})
	iBuild := indexOf(build, func(in instr) bool { return in.cmd == "RUN" && strings.Contains(in.args, "go build") })
	if iMod < 0 || iDownload < iMod || iSources < iDownload || iBuild < iSources {
		t.Errorf("Dockerfile: want COPY go.mod go.sum, RUN go mod download, COPY . ., RUN go build in that order (found at %d, %d, %d, %d)",
			iMod, iDownload, iSources, iBuild)
	}
	if iBuild < 0 {
		t.FailNow()
	}
	run := build[iBuild].args
	if stageEnv(t, build)["CGO_ENABLED"] != "0" && !strings.Contains(run, "CGO_ENABLED=0") {
		t.Errorf("Dockerfile: the build must set CGO_ENABLED=0 (the final image has no libc)")
	}
	for _, want := range []string{"-trimpath", "-ldflags", "-s -w", "./cmd/sluice"} {
		if !strings.Contains(run, want) {
			t.Errorf("Dockerfile:%d: go build lacks %q", build[iBuild].line, want)
		}
	}
	out := regexp.MustCompile(`-o\s+(\S+)`).FindStringSubmatch(run)
	if out == nil {
		t.Fatalf("Dockerfile:%d: go build has no -o", build[iBuild].line)
	}
	if x := regexp.MustCompile(`-X\s+(\S+)=\$`).FindStringSubmatch(run); x == nil || x[1] != versionVar {
		t.Errorf("Dockerfile:%d: the version must be linked with -X %s=…, got %v", build[iBuild].line, versionVar, x)
	}
	if got, err := exec.Command(sluiceBinary(t), "version").Output(); err != nil || strings.TrimSpace(string(got)) != "sluice "+testVersion {
		t.Errorf("a binary linked with -X %s=%s reports %q (%v)", versionVar, testVersion, got, err)
	}

	// Final stage: distroless, nonroot, the binary as entrypoint.
	if !regexp.MustCompile(`^gcr\.io/distroless/static-debian\d+:nonroot$`).MatchString(final[0].args) {
		t.Errorf("Dockerfile:%d: final stage should be gcr.io/distroless/static-debian*:nonroot, got %q", final[0].line, final[0].args)
	}
	users := find(final, "USER")
	if len(users) == 0 || users[len(users)-1].args != "nonroot" {
		t.Errorf("Dockerfile: the final stage must end as USER nonroot")
	}
	entry := find(final, "ENTRYPOINT")
	if len(entry) != 1 {
		t.Fatalf("Dockerfile: want one ENTRYPOINT in the final stage")
	}
	ep := execForm(t, entry[0], entry[0].args)
	if len(ep) != 1 || path.Base(ep[0]) != "sluice" {
		t.Fatalf("Dockerfile:%d: ENTRYPOINT should be the binary alone (flags come as the command), got %q", entry[0].line, ep)
	}
	bin := ep[0]
	copied := func(from, src, dst, chown string) bool {
		for _, in := range find(final, "COPY") {
			opts, srcs, d := copyArgs(in)
			if opts["from"] == from && slices.Equal(srcs, []string{src}) && d == dst && opts["chown"] == chown {
				return true
			}
		}
		return false
	}
	if !copied(buildStage, out[1], bin, "") {
		t.Errorf("Dockerfile: no COPY --from=%s %s %s", buildStage, out[1], bin)
	}
	for _, c := range find(final, "CMD") {
		for _, a := range execForm(t, c, c.args) {
			checkFlags(t, fmt.Sprintf("Dockerfile:%d CMD", c.line), a)
		}
	}

	// ENV: real settings that load and validate; listening on all
	// interfaces, Raft left to the operator.
	for k := range df.env {
		if _, ok := envSettings()[k]; !ok {
			t.Errorf("Dockerfile: ENV %s is not the variable of any setting", k)
		}
	}
	if _, ok := df.env[server.EnvName("raft-addr")]; ok {
		t.Errorf("Dockerfile: ENV must not set %s: Raft needs an address peers reach, which only the deployment knows", server.EnvName("raft-addr"))
	}
	cfg := loadConfig(t, "Dockerfile ENV", nil, df.env)
	for _, a := range []struct{ name, addr string }{{"resp-addr", cfg.RespAddr}, {"http-addr", cfg.HTTPAddr}} {
		if ip := net.ParseIP(hostOf(a.addr)); ip == nil || !ip.IsUnspecified() {
			t.Errorf("Dockerfile: %s is %q; in a container it must listen on all interfaces", a.name, a.addr)
		}
	}

	// The data directory: a volume, owned by nonroot (65532 in distroless),
	// made in the build stage since the final image has no shell.
	vols := find(final, "VOLUME")
	if len(vols) != 1 || !slices.Equal(execForm(t, vols[0], vols[0].args), []string{cfg.DataDir}) {
		t.Errorf("Dockerfile: want VOLUME [%q] (the data-dir)", cfg.DataDir)
	}
	dataSrc := ""
	for _, in := range find(final, "COPY") {
		if opts, srcs, d := copyArgs(in); d == cfg.DataDir && opts["from"] == buildStage && opts["chown"] == "65532:65532" && len(srcs) == 1 {
			dataSrc = srcs[0]
		}
	}
	if dataSrc == "" {
		t.Errorf("Dockerfile: no COPY --from=%s --chown=65532:65532 <dir> %s", buildStage, cfg.DataDir)
	} else if i := indexOf(build, func(in instr) bool {
		return in.cmd == "RUN" && strings.Contains(in.args, "mkdir -p "+dataSrc) && strings.Contains(in.args, "chown 65532:65532 "+dataSrc)
	}); i < 0 {
		t.Errorf("Dockerfile: the build stage must mkdir and chown 65532:65532 %s", dataSrc)
	}

	// EXPOSE: the RESP, Raft and HTTP ports, no others.
	var exposed []string
	for _, in := range find(final, "EXPOSE") {
		for _, p := range strings.Fields(in.args) {
			exposed = append(exposed, strings.TrimSuffix(p, "/tcp"))
		}
	}
	want := []string{portOf(t, "resp-addr", cfg.RespAddr), portOf(t, "raft-addr", cfg.RaftAddr), portOf(t, "http-addr", cfg.HTTPAddr)}
	sort.Strings(exposed)
	sort.Strings(want)
	if !slices.Equal(exposed, want) {
		t.Errorf("Dockerfile: EXPOSE %v, want the RESP, Raft and HTTP ports %v", exposed, want)
	}

	// HEALTHCHECK: the binary's own probe, with flags it has.
	hc := dockerHealthcheck(t, df)
	if hc[0] != bin || len(hc) < 2 || hc[1] != "healthcheck" {
		t.Fatalf("Dockerfile: HEALTHCHECK should run [%q, \"healthcheck\", …], got %q", bin, hc)
	}
	hflags := healthcheckFlags(t)
	for _, a := range hc[2:] {
		name, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !strings.HasPrefix(a, "--") || !slices.Contains(hflags, name) {
			t.Errorf("Dockerfile: HEALTHCHECK argument %q is not a flag of sluice healthcheck %v", a, hflags)
		}
	}
	if s := find(final, "STOPSIGNAL"); len(s) > 0 && s[0].args != "SIGTERM" {
		t.Errorf("Dockerfile: STOPSIGNAL %s; sluice stops cleanly on SIGTERM", s[0].args)
	}
}

// dockerHealthcheck returns the HEALTHCHECK command of the final stage.
func dockerHealthcheck(t *testing.T, df dockerfile) []string {
	t.Helper()
	hcs := find(df.stages[1], "HEALTHCHECK")
	if len(hcs) != 1 {
		t.Fatalf("Dockerfile: want one HEALTHCHECK in the final stage")
	}
	_, cmd, ok := strings.Cut(hcs[0].args, "CMD ")
	if !ok {
		t.Fatalf("Dockerfile:%d: HEALTHCHECK without CMD", hcs[0].line)
	}
	return execForm(t, hcs[0], strings.TrimSpace(cmd))
}

// ---- .dockerignore ----

type ignorePattern struct {
	re      *regexp.Regexp
	exclude bool // false for '!' exceptions
}

// globRE turns a .dockerignore pattern into a regular expression over
// slash-separated paths relative to the context ('**' any directories).
func globRE(t *testing.T, p string) *regexp.Regexp {
	t.Helper()
	var b strings.Builder
	b.WriteString("^")
	for i := 0; i < len(p); i++ {
		switch c := p[i]; {
		case c == '*' && i+1 < len(p) && p[i+1] == '*':
			i++
			if i+1 < len(p) && p[i+1] == '/' {
				i++
				b.WriteString("(?:.*/)?")
			} else {
				b.WriteString(".*")
			}
		case c == '*':
			b.WriteString("[^/]*")
		case c == '?':
			b.WriteString("[^/]")
		case c == '[' || c == '\\':
			t.Fatalf(".dockerignore: pattern %q: character classes and escapes are not understood by this test", p)
		default:
			b.WriteString(regexp.QuoteMeta(string(c)))
		}
	}
	b.WriteString("$")
	return regexp.MustCompile(b.String())
}

func dockerignore(t *testing.T) func(rel string) bool {
	t.Helper()
	var pats []ignorePattern
	for _, line := range strings.Split(read(t, ".dockerignore"), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		p := ignorePattern{exclude: true}
		if s, ok := strings.CutPrefix(line, "!"); ok {
			line, p.exclude = s, false
		}
		line = strings.TrimPrefix(path.Clean(line), "/")
		p.re = globRE(t, line)
		pats = append(pats, p)
	}
	return func(rel string) bool {
		ignored := false
		for _, p := range pats {
			for q := rel; q != "." && q != "/"; q = path.Dir(q) {
				if p.re.MatchString(q) {
					ignored = p.exclude
					break
				}
			}
		}
		return ignored
	}
}

func TestDockerignore(t *testing.T) {
	ignored := dockerignore(t)
	for _, sanity := range []string{".git/HEAD", "sluice-data/raft/raft.db"} {
		if !ignored(sanity) {
			t.Errorf(".dockerignore: %s should stay out of the build context", sanity)
		}
	}
	cmd := exec.Command("go", "list", "-deps", "-json", "./cmd/sluice")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		t.Fatal(err)
	}
	needed := []string{"go.mod", "go.sum"}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for dec.More() {
		var p struct {
			Dir                 string
			GoFiles, EmbedFiles []string
			Module              *struct{ Main bool }
		}
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		if p.Module == nil || !p.Module.Main {
			continue
		}
		dir, err := filepath.Rel(abs, p.Dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range append(p.GoFiles, p.EmbedFiles...) {
			needed = append(needed, filepath.ToSlash(filepath.Join(dir, f)))
		}
	}
	if len(needed) < 4 {
		t.Fatalf("go list found no packages of the module: %q", needed)
	}
	for _, f := range needed {
		if ignored(f) {
			t.Errorf(".dockerignore leaves out %s, which the build of cmd/sluice needs", f)
		}
	}
}

// ---- A YAML subset: block mappings and lists, plain, quoted and
// [flow list] scalars, comments. Anything else fails loudly. ----

type yline struct {
	n      int
	indent int
	text   string
}

type yparser struct {
	t     *testing.T
	name  string
	lines []yline
	i     int
}

func parseYAML(t *testing.T, name, src string) any {
	t.Helper()
	p := &yparser{t: t, name: name}
	for i, raw := range strings.Split(src, "\n") {
		s := strings.TrimRight(raw, " \r")
		body := strings.TrimLeft(s, " ")
		if body == "" || strings.HasPrefix(body, "#") {
			continue
		}
		if strings.HasPrefix(body, "\t") {
			t.Fatalf("%s:%d: tab in indentation", name, i+1)
		}
		p.lines = append(p.lines, yline{n: i + 1, indent: len(s) - len(body), text: body})
	}
	if len(p.lines) == 0 {
		return nil
	}
	v := p.block(p.lines[0].indent)
	if p.i < len(p.lines) {
		p.fail(p.lines[p.i], "unexpected indentation")
	}
	return v
}

func (p *yparser) fail(l yline, msg string) {
	p.t.Helper()
	p.t.Fatalf("%s:%d: %s (this test reads a YAML subset)", p.name, l.n, msg)
}

func isItem(s string) bool { return s == "-" || strings.HasPrefix(s, "- ") }

var keyRE = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_.\-]*):(?:\s+(.*))?$`)

func splitKey(s string) (key, value string, ok bool) {
	m := keyRE.FindStringSubmatch(s)
	if m == nil {
		return "", "", false
	}
	if strings.HasPrefix(m[2], "#") {
		m[2] = ""
	}
	return m[1], m[2], true
}

func (p *yparser) block(indent int) any {
	if isItem(p.lines[p.i].text) {
		return p.list(indent)
	}
	return p.mapping(indent)
}

func (p *yparser) nested(parent yline) any {
	if p.i < len(p.lines) && p.lines[p.i].indent > parent.indent {
		return p.block(p.lines[p.i].indent)
	}
	return nil
}

func (p *yparser) list(indent int) []any {
	var out []any
	for p.i < len(p.lines) {
		l := p.lines[p.i]
		if l.indent < indent {
			break
		}
		if l.indent > indent || !isItem(l.text) {
			p.fail(l, "expected a list item")
		}
		rest := strings.TrimLeft(strings.TrimPrefix(l.text, "-"), " ")
		switch {
		case rest == "" || strings.HasPrefix(rest, "#"):
			p.i++
			out = append(out, p.nested(l))
		case keyRE.MatchString(rest):
			// A mapping whose first key shares the item's line.
			p.lines[p.i] = yline{n: l.n, indent: l.indent + len(l.text) - len(rest), text: rest}
			out = append(out, p.mapping(p.lines[p.i].indent))
		default:
			p.i++
			out = append(out, p.scalar(l, rest))
		}
	}
	return out
}

func (p *yparser) mapping(indent int) map[string]any {
	out := map[string]any{}
	for p.i < len(p.lines) {
		l := p.lines[p.i]
		if l.indent < indent {
			break
		}
		if l.indent > indent {
			p.fail(l, "unexpected indentation")
		}
		k, v, ok := splitKey(l.text)
		if !ok {
			p.fail(l, "expected key: value")
		}
		if _, dup := out[k]; dup {
			p.fail(l, "duplicate key "+k)
		}
		p.i++
		if v == "" {
			out[k] = p.nested(l)
		} else {
			out[k] = p.scalar(l, v)
		}
	}
	return out
}

func (p *yparser) scalar(l yline, v string) any {
	rest := ""
	switch {
	case strings.HasPrefix(v, `"`):
		q, err := strconv.QuotedPrefix(v)
		if err != nil {
			p.fail(l, "bad double-quoted string")
		}
		rest = v[len(q):]
		v, _ = strconv.Unquote(q)
	case strings.HasPrefix(v, "'"):
		end := 1
		for ; end < len(v); end++ {
			if v[end] == '\'' {
				if end+1 < len(v) && v[end+1] == '\'' {
					end++
					continue
				}
				break
			}
		}
		if end >= len(v) {
			p.fail(l, "unterminated single-quoted string")
		}
		rest = v[end+1:]
		v = strings.ReplaceAll(v[1:end], "''", "'")
	case strings.HasPrefix(v, "["):
		end := strings.Index(v, "]")
		if end < 0 {
			p.fail(l, "unterminated flow list")
		}
		if r := strings.TrimSpace(v[end+1:]); r != "" && !strings.HasPrefix(r, "#") {
			p.fail(l, "text after a flow list")
		}
		var out []any
		for _, item := range strings.Split(v[1:end], ",") {
			if item = strings.TrimSpace(item); item != "" {
				out = append(out, p.scalar(l, item))
			}
		}
		return out
	case strings.ContainsAny(v[:1], "{&*|>!%@`"):
		p.fail(l, "unsupported YAML: "+v)
	default:
		if i := strings.Index(v, " #"); i >= 0 {
			v = v[:i]
		}
		return strings.TrimSpace(v)
	}
	if r := strings.TrimSpace(rest); r != "" && !strings.HasPrefix(r, "#") {
		p.fail(l, "text after a quoted string")
	}
	return v
}

func asMap(t *testing.T, where string, v any) map[string]any {
	t.Helper()
	m, ok := v.(map[string]any)
	if !ok {
		t.Fatalf("%s: want a mapping, got %T", where, v)
	}
	return m
}

func asList(t *testing.T, where string, v any) []any {
	t.Helper()
	l, ok := v.([]any)
	if !ok {
		t.Fatalf("%s: want a list, got %T", where, v)
	}
	return l
}

func asString(t *testing.T, where string, v any) string {
	t.Helper()
	s, ok := v.(string)
	if !ok {
		t.Fatalf("%s: want a string, got %T", where, v)
	}
	return s
}

func asStrings(t *testing.T, where string, v any) []string {
	t.Helper()
	var out []string
	for i, item := range asList(t, where, v) {
		out = append(out, asString(t, fmt.Sprintf("%s[%d]", where, i), item))
	}
	return out
}

// ---- docker-compose.yml ----

type composeNode struct {
	service string
	svc     map[string]any
	args    []string
	cfg     server.Config
}

type composeFile struct {
	doc      map[string]any
	services map[string]map[string]any
	nodes    []composeNode // sorted by service name
}

var interpRE = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?[-?]([^}]*))?\}`)

// interpolate expands ${VAR:-default} as compose does with none of the
// variables set.
func interpolate(s string) string {
	return interpRE.ReplaceAllString(s, "$2")
}

// isSluice tells the services that run the image built here.
func isSluice(svc map[string]any) bool {
	_, build := svc["build"]
	img, _ := svc["image"].(string)
	return build || strings.HasPrefix(img, "sluice")
}

func loadCompose(t *testing.T) composeFile {
	t.Helper()
	const name = "docker-compose.yml"
	cf := composeFile{doc: asMap(t, name, parseYAML(t, name, read(t, name))), services: map[string]map[string]any{}}
	imageEnv := loadDockerfile(t).env
	for sname, v := range asMap(t, name+" services", cf.doc["services"]) {
		where := name + " services." + sname
		svc := asMap(t, where, v)
		cf.services[sname] = svc
		if !isSluice(svc) {
			continue
		}
		env := maps.Clone(imageEnv) // the container's environment: the image's ENV, then compose's
		switch e := svc["environment"].(type) {
		case map[string]any:
			for k, v := range e {
				env[k] = interpolate(asString(t, where+".environment."+k, v))
			}
		case []any:
			for _, kv := range asStrings(t, where+".environment", e) {
				k, v, _ := strings.Cut(kv, "=")
				env[k] = interpolate(v)
			}
		}
		var args []string
		if svc["command"] != nil {
			for _, a := range asStrings(t, where+".command", svc["command"]) {
				args = append(args, interpolate(a))
			}
		}
		cf.nodes = append(cf.nodes, composeNode{service: sname, svc: svc, args: args, cfg: loadConfig(t, where, args, env)})
	}
	sort.Slice(cf.nodes, func(i, j int) bool { return cf.nodes[i].service < cf.nodes[j].service })
	return cf
}

// mounts returns a service's volumes as target → source (host paths
// relative to the repository, without "./").
func mounts(t *testing.T, where string, svc map[string]any) map[string]string {
	t.Helper()
	out := map[string]string{}
	if svc["volumes"] == nil {
		return out
	}
	for _, v := range asStrings(t, where+".volumes", svc["volumes"]) {
		f := strings.Split(v, ":")
		if len(f) < 2 {
			t.Fatalf("%s: volume %q has no target", where, v)
		}
		out[f[1]] = strings.TrimPrefix(f[0], "./")
	}
	return out
}

// staticIP returns the service's ipv4_address and the network it is on.
func staticIP(t *testing.T, where string, svc map[string]any) (ip net.IP, network string) {
	t.Helper()
	nets, ok := svc["networks"].(map[string]any)
	if !ok {
		t.Fatalf("%s: networks must give the node a fixed ipv4_address (its --raft-addr)", where)
	}
	for name, v := range nets {
		if m, ok := v.(map[string]any); ok && m["ipv4_address"] != nil {
			return net.ParseIP(asString(t, where+".ipv4_address", m["ipv4_address"])), name
		}
	}
	t.Fatalf("%s: no network gives the node an ipv4_address", where)
	return nil, ""
}

// subnetOf returns the first ipam subnet of a compose network.
func subnetOf(t *testing.T, networks map[string]any, name string) string {
	t.Helper()
	where := "docker-compose.yml networks." + name + ".ipam"
	ipam := asMap(t, where, asMap(t, where, networks[name])["ipam"])
	configs := asList(t, where+".config", ipam["config"])
	if len(configs) == 0 {
		t.Fatalf("%s: no config", where)
	}
	return asString(t, where+".config[0].subnet", asMap(t, where+".config[0]", configs[0])["subnet"])
}

func TestCompose(t *testing.T) {
	src := read(t, "docker-compose.yml")
	checkFlags(t, "docker-compose.yml comments", hashComments(src), "build", "profile")
	checkEnvNames(t, "docker-compose.yml", src, composeVars)
	for v := range composeVars {
		if _, ok := envSettings()[v]; ok {
			t.Errorf("%s is both a compose variable and the variable of a setting", v)
		}
	}
	cf := loadCompose(t)
	if len(cf.nodes) != 3 {
		t.Fatalf("docker-compose.yml: want 3 sluice services, got %d", len(cf.nodes))
	}
	dfExposed := map[string]bool{}
	for _, in := range find(loadDockerfile(t).stages[1], "EXPOSE") {
		for _, p := range strings.Fields(in.args) {
			dfExposed[strings.TrimSuffix(p, "/tcp")] = true
		}
	}
	declared := asMap(t, "docker-compose.yml volumes", cf.doc["volumes"])
	networks := asMap(t, "docker-compose.yml networks", cf.doc["networks"])
	known := settingNames()
	hostPorts := map[string]string{}
	dataVolumes := map[string]string{}
	peersOf := map[string]string{}
	for _, n := range cf.nodes {
		where := "docker-compose.yml services." + n.service
		cfg := n.cfg
		if b, ok := n.svc["build"].(string); !ok || b != "." {
			t.Errorf("%s: build should be the repository root (\".\"), got %v", where, n.svc["build"])
		}
		for _, a := range n.args {
			name, _, ok := strings.Cut(strings.TrimPrefix(a, "--"), "=")
			if !strings.HasPrefix(a, "--") || !ok {
				t.Errorf("%s: command item %q: write each flag as one --name=value item", where, a)
			} else if !known[name] {
				t.Errorf("%s: --%s is not a sluice setting", where, name)
			}
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
		subnet := subnetOf(t, networks, netName)
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
		for _, p := range asStrings(t, where+".ports", n.svc["ports"]) {
			f := strings.Split(p, ":")
			if len(f) < 2 {
				t.Errorf("%s: port %q should be host:container", where, p)
				continue
			}
			host, cont := f[len(f)-2], strings.TrimSuffix(f[len(f)-1], "/tcp")
			if other, dup := hostPorts[host]; dup {
				t.Errorf("%s: host port %s is published by %s too", where, host, other)
			}
			hostPorts[host] = n.service
			published[cont] = true
			if !dfExposed[cont] {
				t.Errorf("%s: publishes %s, which the Dockerfile does not EXPOSE", where, cont)
			}
		}
		for _, want := range []string{portOf(t, where, cfg.RespAddr), portOf(t, where, cfg.HTTPAddr)} {
			if !published[want] {
				t.Errorf("%s: container port %s (RESP or HTTP) is not published", where, want)
			}
		}

		// One named volume per node, at its data-dir.
		vol, ok := mounts(t, where, n.svc)[cfg.DataDir]
		if _, isDeclared := declared[vol]; !ok || !isDeclared {
			t.Errorf("%s: want a named volume (declared under volumes:) at the data-dir %s, got %q", where, cfg.DataDir, vol)
		} else if other, dup := dataVolumes[vol]; dup {
			t.Errorf("%s: shares volume %s with %s", where, vol, other)
		}
		dataVolumes[vol] = n.service

		if g, ok := n.svc["stop_grace_period"].(string); ok {
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
	for name, svc := range cf.services {
		if !isSluice(svc) && !slices.Contains(profiles(svc), "monitoring") {
			t.Errorf("docker-compose.yml services.%s: not in the monitoring profile", name)
		}
		for _, src := range mounts(t, "services."+name, svc) {
			if strings.Contains(src, "/") {
				if _, err := os.Stat(filepath.Join(root, src)); err != nil {
					t.Errorf("docker-compose.yml services.%s mounts %s: %v", name, src, err)
				}
			}
		}
	}
	for _, s := range []string{"prometheus", "grafana"} {
		if cf.services[s] == nil {
			t.Errorf("docker-compose.yml: no %s service", s)
		}
	}
}

func profiles(svc map[string]any) []string {
	var out []string
	l, _ := svc["profiles"].([]any)
	for _, p := range l {
		if s, ok := p.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

// ---- Prometheus ----

// promSetup returns the parsed Prometheus configuration and the
// repository paths of its rule files, as docker-compose.yml mounts them.
func promSetup(t *testing.T, cf composeFile) (cfg map[string]any, rules []string) {
	t.Helper()
	svc := cf.services["prometheus"]
	if svc == nil {
		t.Fatal("docker-compose.yml: no prometheus service")
	}
	mnt := mounts(t, "services.prometheus", svc)
	file := "/etc/prometheus/prometheus.yml"
	if svc["command"] != nil {
		for _, a := range asStrings(t, "services.prometheus.command", svc["command"]) {
			if v, ok := strings.CutPrefix(a, "--config.file="); ok {
				file = v
			}
		}
	}
	src, ok := mnt[file]
	if !ok {
		t.Fatalf("docker-compose.yml: prometheus reads %s, which nothing mounts", file)
	}
	cfg = asMap(t, src, parseYAML(t, src, read(t, src)))
	if cfg["rule_files"] != nil {
		for _, r := range asStrings(t, src+" rule_files", cfg["rule_files"]) {
			rs, ok := mnt[r]
			if !ok {
				t.Fatalf("%s: rule file %s is not mounted into the prometheus service", src, r)
			}
			rules = append(rules, rs)
		}
	}
	return cfg, rules
}

type alertRule struct{ where, expr string }

func alertRules(t *testing.T, files []string) []alertRule {
	t.Helper()
	var out []alertRule
	for _, f := range files {
		doc := asMap(t, f, parseYAML(t, f, read(t, f)))
		for gi, g := range asList(t, f+" groups", doc["groups"]) {
			gm := asMap(t, fmt.Sprintf("%s groups[%d]", f, gi), g)
			for ri, r := range asList(t, fmt.Sprintf("%s groups[%d].rules", f, gi), gm["rules"]) {
				where := fmt.Sprintf("%s groups[%d].rules[%d]", f, gi, ri)
				rm := asMap(t, where, r)
				if a, ok := rm["alert"].(string); ok {
					where += " " + a
				} else if rec, ok := rm["record"].(string); ok {
					where += " " + rec
				} else {
					t.Errorf("%s: neither alert nor record", where)
				}
				out = append(out, alertRule{where, asString(t, where+".expr", rm["expr"])})
			}
		}
	}
	return out
}

func TestPrometheus(t *testing.T) {
	cf := loadCompose(t)
	cfg, ruleFiles := promSetup(t, cf)
	checkFlags(t, "deploy/prometheus.yml comments", hashComments(read(t, "deploy/prometheus.yml")))
	want := map[string]bool{}
	for _, n := range cf.nodes {
		want[n.service+":"+portOf(t, n.service, n.cfg.HTTPAddr)] = true
	}
	jobs := map[string]bool{}
	got := map[string]bool{}
	for i, sc := range asList(t, "scrape_configs", cfg["scrape_configs"]) {
		where := fmt.Sprintf("deploy/prometheus.yml scrape_configs[%d]", i)
		m := asMap(t, where, sc)
		job := asString(t, where+".job_name", m["job_name"])
		jobs[job] = true
		if p, ok := m["metrics_path"]; ok && p != "/metrics" {
			t.Errorf("%s: metrics_path %v; sluice serves /metrics", where, p)
		}
		for j, s := range asList(t, where+".static_configs", m["static_configs"]) {
			for _, target := range asStrings(t, fmt.Sprintf("%s.static_configs[%d].targets", where, j), asMap(t, where, s)["targets"]) {
				got[target] = true
			}
		}
	}
	if !maps.Equal(got, want) {
		t.Errorf("deploy/prometheus.yml scrapes %v; the nodes' HTTP listeners are %v", slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want)))
	}
	if len(ruleFiles) == 0 {
		t.Errorf("deploy/prometheus.yml loads no alerting rules")
	}
	jobRE := regexp.MustCompile(`\bjob\s*=\s*"([^"]*)"`)
	for _, r := range alertRules(t, ruleFiles) {
		for _, m := range jobRE.FindAllStringSubmatch(r.expr, -1) {
			if !jobs[m[1]] {
				t.Errorf("%s: job %q is not a scrape job of deploy/prometheus.yml", r.where, m[1])
			}
		}
	}
	for _, f := range ruleFiles {
		src := read(t, f)
		checkFlags(t, f, src)
		checkEnvNames(t, f, src, nil)
	}
}

// ---- Grafana ----

// dashboardFiles returns the repository paths of the dashboards Grafana is
// provisioned with, checking the provisioning on the way.
func dashboardFiles(t *testing.T, cf composeFile) []string {
	t.Helper()
	svc := cf.services["grafana"]
	if svc == nil {
		t.Fatal("docker-compose.yml: no grafana service")
	}
	mnt := mounts(t, "services.grafana", svc)
	prov, ok := mnt["/etc/grafana/provisioning"]
	if !ok {
		t.Fatal("docker-compose.yml: nothing is mounted at grafana's /etc/grafana/provisioning")
	}
	// Data sources: the compose Prometheus.
	ds, _ := filepath.Glob(filepath.Join(root, prov, "datasources", "*.yml"))
	if len(ds) == 0 {
		t.Errorf("%s/datasources: no data source", prov)
	}
	for _, f := range ds {
		rel, _ := filepath.Rel(root, f)
		for i, d := range asList(t, rel, asMap(t, rel, parseYAML(t, rel, read(t, rel)))["datasources"]) {
			m := asMap(t, fmt.Sprintf("%s datasources[%d]", rel, i), d)
			if m["type"] != "prometheus" {
				continue
			}
			u := asString(t, rel+" url", m["url"])
			host := hostOf(strings.TrimPrefix(u, "http://"))
			if cf.services[host] == nil {
				t.Errorf("%s: url %s names no compose service", rel, u)
			}
		}
	}
	// Dashboard providers: directories mounted into the container.
	var files []string
	provs, _ := filepath.Glob(filepath.Join(root, prov, "dashboards", "*.yml"))
	if len(provs) == 0 {
		t.Fatalf("%s/dashboards: no dashboard provider", prov)
	}
	for _, f := range provs {
		rel, _ := filepath.Rel(root, f)
		for i, p := range asList(t, rel+" providers", asMap(t, rel, parseYAML(t, rel, read(t, rel)))["providers"]) {
			where := fmt.Sprintf("%s providers[%d]", rel, i)
			dir := asString(t, where+".options.path", asMap(t, where+".options", asMap(t, where, p)["options"])["path"])
			src, ok := mnt[dir]
			if !ok {
				t.Errorf("%s: path %s is not mounted into the grafana service", where, dir)
				continue
			}
			found, _ := filepath.Glob(filepath.Join(root, src, "*.json"))
			for _, j := range found {
				r, _ := filepath.Rel(root, j)
				files = append(files, filepath.ToSlash(r))
			}
		}
	}
	if len(files) == 0 {
		t.Fatal("grafana is provisioned with no dashboard")
	}
	if env, ok := svc["environment"].(map[string]any); ok {
		if home, ok := env["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"].(string); ok {
			dir, file := path.Split(home)
			if src, ok := mnt[strings.TrimSuffix(dir, "/")]; !ok || !slices.Contains(files, path.Join(src, file)) {
				t.Errorf("docker-compose.yml grafana: the home dashboard %s is not a provisioned dashboard", home)
			}
		}
	}
	return files
}

type dashQuery struct {
	where, expr, legend string
}

func loadDashboard(t *testing.T, file string) map[string]any {
	t.Helper()
	var d map[string]any
	if err := json.Unmarshal([]byte(read(t, file)), &d); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return d
}

func allPanels(d map[string]any) []map[string]any {
	var out []map[string]any
	var walk func(v any)
	walk = func(v any) {
		l, _ := v.([]any)
		for _, p := range l {
			if m, ok := p.(map[string]any); ok {
				out = append(out, m)
				walk(m["panels"])
			}
		}
	}
	walk(d["panels"])
	return out
}

// dashboardQueries returns every PromQL expression of a dashboard: panel
// targets and template variable queries.
func dashboardQueries(t *testing.T, file string) []dashQuery {
	t.Helper()
	d := loadDashboard(t, file)
	var out []dashQuery
	for _, p := range allPanels(d) {
		targets, _ := p["targets"].([]any)
		for i, tg := range targets {
			m := asMap(t, file, tg)
			legend, _ := m["legendFormat"].(string)
			expr, _ := m["expr"].(string)
			out = append(out, dashQuery{fmt.Sprintf("%s panel %q target %d", file, p["title"], i), expr, legend})
		}
	}
	tpl, _ := d["templating"].(map[string]any)
	vars, _ := tpl["list"].([]any)
	for _, v := range vars {
		m, _ := v.(map[string]any)
		if m["type"] != "query" {
			continue
		}
		q := m["definition"]
		if qm, ok := m["query"].(map[string]any); ok {
			q = qm["query"]
		} else if qs, ok := m["query"].(string); ok {
			q = qs
		}
		s, _ := q.(string)
		out = append(out, dashQuery{fmt.Sprintf("%s variable %v", file, m["name"]), s, ""})
	}
	return out
}

const dsVar = "${DS_PROMETHEUS}"

func TestGrafanaDashboards(t *testing.T) {
	cf := loadCompose(t)
	for _, file := range dashboardFiles(t, cf) {
		d := loadDashboard(t, file)
		if v, _ := d["schemaVersion"].(float64); v < 36 {
			t.Errorf("%s: schemaVersion %v; want 36 or later", file, d["schemaVersion"])
		}
		if uid, _ := d["uid"].(string); uid == "" {
			t.Errorf("%s: no uid (provisioned dashboards need a stable one)", file)
		}
		vars := map[string]map[string]any{}
		tpl, _ := d["templating"].(map[string]any)
		list, _ := tpl["list"].([]any)
		for _, v := range list {
			m := asMap(t, file+" templating", v)
			vars[asString(t, file+" templating name", m["name"])] = m
		}
		if ds := vars["DS_PROMETHEUS"]; ds == nil || ds["type"] != "datasource" || ds["query"] != "prometheus" {
			t.Errorf("%s: want a DS_PROMETHEUS variable of type datasource for prometheus", file)
		}
		if inst := vars["instance"]; inst == nil || inst["type"] != "query" || !usesDS(inst["datasource"]) {
			t.Errorf("%s: want an instance query variable on %s", file, dsVar)
		}
		ids := map[float64]bool{}
		for _, p := range allPanels(d) {
			where := fmt.Sprintf("%s panel %q", file, p["title"])
			id, _ := p["id"].(float64)
			if ids[id] {
				t.Errorf("%s: id %v used twice", where, id)
			}
			ids[id] = true
			g, _ := p["gridPos"].(map[string]any)
			x, okx := g["x"].(float64)
			w, okw := g["w"].(float64)
			if !okx || !okw || x+w > 24 {
				t.Errorf("%s: gridPos %v should have x + w within 24", where, p["gridPos"])
			}
			if p["type"] == "row" {
				continue
			}
			if !usesDS(p["datasource"]) {
				t.Errorf("%s: datasource is not %s", where, dsVar)
			}
			targets, _ := p["targets"].([]any)
			if len(targets) == 0 {
				t.Errorf("%s: no targets", where)
			}
			for _, tg := range targets {
				m := asMap(t, where, tg)
				if ds, ok := m["datasource"]; ok && !usesDS(ds) {
					t.Errorf("%s: target datasource is not %s", where, dsVar)
				}
			}
		}
		for _, q := range dashboardQueries(t, file) {
			if q.expr == "" {
				t.Errorf("%s: empty query", q.where)
			} else if !strings.Contains(q.where, " variable ") && !strings.Contains(q.expr, "$instance") {
				t.Errorf("%s: %s ignores the $instance variable", q.where, q.expr)
			}
		}
	}
}

func usesDS(v any) bool {
	m, _ := v.(map[string]any)
	return m != nil && m["uid"] == dsVar && (m["type"] == nil || m["type"] == "prometheus")
}

// ---- systemd unit and example config ----

func parseUnit(t *testing.T, file string) map[string]map[string][]string {
	t.Helper()
	out := map[string]map[string][]string{}
	section := ""
	for i, line := range strings.Split(read(t, file), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = line[1 : len(line)-1]
			out[section] = map[string][]string{}
		case strings.HasSuffix(line, `\`):
			t.Fatalf("%s:%d: continued lines are not understood by this test", file, i+1)
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" {
				t.Fatalf("%s:%d: want Key=Value in a [Section]", file, i+1)
			}
			k = strings.TrimSpace(k)
			out[section][k] = append(out[section][k], strings.TrimSpace(v))
		}
	}
	return out
}

// systemdSeconds reads a systemd time span such as 20, 20s, 1min or 1min 30s.
func systemdSeconds(s string) (time.Duration, error) {
	if n, err := strconv.Atoi(s); err == nil {
		return time.Duration(n) * time.Second, nil
	}
	s = strings.NewReplacer(" ", "", "min", "m", "sec", "s").Replace(s)
	return time.ParseDuration(s)
}

func TestSystemdUnit(t *testing.T) {
	const file = "deploy/sluice.service"
	src := read(t, file)
	checkFlags(t, file+" comments", hashComments(src), "system", "no-create-home", "shell", "now")
	checkEnvNames(t, file, src, nil)
	u := parseUnit(t, file)
	svc := u["Service"]
	get := func(k string) string {
		if v := svc[k]; len(v) > 0 {
			return v[len(v)-1]
		}
		return ""
	}
	for k, want := range map[string]string{
		"Type": "simple", "Restart": "on-failure", "ProtectSystem": "strict", "CapabilityBoundingSet": "",
	} {
		if v, ok := svc[k]; !ok || get(k) != want {
			t.Errorf("%s: want %s=%s, got %q", file, k, want, v)
		}
	}
	for _, k := range []string{"NoNewPrivileges", "ProtectHome", "PrivateTmp"} {
		if v := get(k); v != "yes" && v != "true" {
			t.Errorf("%s: want %s=yes, got %q", file, k, v)
		}
	}
	if user := get("User"); user == "" || user == "root" || user == "0" {
		t.Errorf("%s: run as a dedicated user, not %q", file, user)
	}
	if v := get("PrivateNetwork"); v == "yes" || v == "true" {
		t.Errorf("%s: PrivateNetwork cuts the node off from clients and peers", file)
	}
	if af := get("RestrictAddressFamilies"); af != "" && !(strings.Contains(af, "AF_INET ") || strings.HasSuffix(af, "AF_INET")) {
		t.Errorf("%s: RestrictAddressFamilies=%s must allow AF_INET (and AF_INET6) for the listeners", file, af)
	}
	if len(u["Install"]["WantedBy"]) == 0 {
		t.Errorf("%s: no [Install] WantedBy", file)
	}

	// ExecStart: the binary with --config pointing at the example file; the
	// settings it yields load and validate.
	start := strings.Fields(get("ExecStart"))
	if len(start) == 0 || !filepath.IsAbs(start[0]) || path.Base(start[0]) != "sluice" {
		t.Fatalf("%s: ExecStart should start with the absolute path of sluice, got %q", file, start)
	}
	checkFlags(t, file+" ExecStart", strings.Join(start[1:], " "))
	var args []string
	for _, a := range start[1:] {
		if v, ok := strings.CutPrefix(a, "--config="); ok {
			args = append(args, "--config", v)
		} else {
			args = append(args, a)
		}
	}
	confAt := slices.Index(args, "--config") + 1
	if confAt == 0 || confAt == len(args) {
		confAt = -1
	}
	if confAt < 0 || path.Base(args[confAt]) != "sluice.conf" {
		t.Fatalf("%s: ExecStart should read --config …/sluice.conf (deploy/sluice.conf), got %q", file, args)
	}
	args[confAt] = filepath.Join(root, "deploy", "sluice.conf")
	env := map[string]string{}
	for _, e := range svc["Environment"] {
		for _, kv := range strings.Fields(e) {
			k, v, _ := strings.Cut(strings.Trim(kv, `"`), "=")
			env[k] = v
		}
	}
	cfg := loadConfig(t, file+" ExecStart", args, env)

	if sd := get("StateDirectory"); sd == "" || cfg.DataDir != "/var/lib/"+sd {
		t.Errorf("%s: StateDirectory=%s, but data-dir is %s; systemd makes /var/lib/<StateDirectory> writable", file, sd, cfg.DataDir)
	}
	if d, err := systemdSeconds(get("TimeoutStopSec")); err != nil || d < cfg.ShutdownTimeout+5*time.Second {
		t.Errorf("%s: TimeoutStopSec=%s should leave the node shutdown-timeout (%v) plus time to hand over Raft leadership", file, get("TimeoutStopSec"), cfg.ShutdownTimeout)
	}
	if n, err := strconv.Atoi(get("LimitNOFILE")); err != nil || n < cfg.MaxClients+1024 {
		t.Errorf("%s: LimitNOFILE=%s should exceed maxclients (%d) with room for Raft, peers and files", file, get("LimitNOFILE"), cfg.MaxClients)
	}
}

var commentedSettingRE = regexp.MustCompile(`^#([a-z][a-z0-9-]*)(?:\s+(.*))?$`)

func TestConfigFile(t *testing.T) {
	const file = "deploy/sluice.conf"
	src := read(t, file)
	checkEnvNames(t, file, src, nil)
	known := settingNames()
	defaults := defaultSettings(t)
	var prose strings.Builder
	for i, line := range strings.Split(src, "\n") {
		line = strings.TrimSpace(line)
		where := fmt.Sprintf("%s:%d", file, i+1)
		if line == "" {
			continue
		}
		// "#name value" is a setting left at its default; "# text" is prose.
		if m := commentedSettingRE.FindStringSubmatch(line); m != nil {
			if !known[m[1]] || m[1] == "config" {
				t.Errorf("%s: #%s is not a setting a config file may hold", where, m[1])
			} else if def := defaults[m[1]]; def != "" && strings.TrimSpace(m[2]) != def {
				t.Errorf("%s: #%s %s, but its default is %s", where, m[1], m[2], def)
			}
			continue
		}
		if strings.HasPrefix(line, "#") {
			prose.WriteString(line + "\n")
			continue
		}
		name, _, _ := strings.Cut(line, " ")
		if !known[name] || name == "config" {
			t.Errorf("%s: %q is not a setting a config file may hold", where, name)
		}
	}
	checkFlags(t, file+" comments", prose.String(), "help")

	cfg := loadConfig(t, file, []string{"--config", filepath.Join(root, file)}, nil)
	if !filepath.IsAbs(cfg.DataDir) {
		t.Errorf("%s: data-dir %q should be absolute", file, cfg.DataDir)
	}
	if cfg.RequirePass == "" && cfg.ACLFile == "" {
		t.Errorf("%s: a network-facing node needs requirepass or acl-file (protected mode refuses remote clients)", file)
	}
	if cfg.LogFormat != "json" {
		t.Errorf("%s: log-format %s; journald and log shippers want json", file, cfg.LogFormat)
	}
	checkSelfInPeers(t, file, cfg)
}

// ---- A running node: metrics, health ----

// startNode runs an in-process node on loopback ports chosen by the OS.
// maxclients is 1 so that a second client is refused and the rejection
// series exists.
func startNode(t *testing.T) *server.Node {
	t.Helper()
	n := testnode.Start(t, testnode.Options{Config: func(c *server.Config) { c.MaxClients = 1 }})
	// Ready once it has also recorded itself as a member: that write
	// would otherwise move the commit index under /readyz.
	testkit.WaitFor(t, 10*time.Second, "the node to be ready", func() bool {
		return len(n.Raft.State().Members) > 0 && n.Raft.Ready()
	})
	return n
}

// exposition is a parsed /metrics page.
type exposition struct {
	types  map[string]string                     // family → type
	help   map[string]string                     // family → help
	series map[string]map[string]map[string]bool // sample name → label → values
}

func parseExposition(t *testing.T, body string) exposition {
	t.Helper()
	e := exposition{types: map[string]string{}, help: map[string]string{}, series: map[string]map[string]map[string]bool{}}
	for _, line := range strings.Split(body, "\n") {
		if line == "" {
			continue
		}
		if rest, ok := strings.CutPrefix(line, "# TYPE "); ok {
			name, typ, _ := strings.Cut(rest, " ")
			e.types[name] = typ
			continue
		}
		if rest, ok := strings.CutPrefix(line, "# HELP "); ok {
			name, help, _ := strings.Cut(rest, " ")
			e.help[name] = help
			continue
		}
		if strings.HasPrefix(line, "#") {
			continue
		}
		end := strings.IndexAny(line, "{ ")
		if end < 0 {
			t.Fatalf("/metrics: cannot read %q", line)
		}
		name := line[:end]
		labels := e.series[name]
		if labels == nil {
			labels = map[string]map[string]bool{}
			e.series[name] = labels
		}
		if line[end] != '{' {
			continue
		}
		s := line[end+1:]
		for !strings.HasPrefix(s, "}") {
			k, v, ok := strings.Cut(s, `="`)
			if !ok {
				t.Fatalf("/metrics: cannot read labels of %q", line)
			}
			var val strings.Builder
			i := 0
			for ; i < len(v) && v[i] != '"'; i++ {
				if v[i] == '\\' && i+1 < len(v) {
					i++
				}
				val.WriteByte(v[i])
			}
			if labels[k] == nil {
				labels[k] = map[string]bool{}
			}
			labels[k][val.String()] = true
			s = strings.TrimPrefix(v[min(i+1, len(v)):], ",")
			if s == "" {
				t.Fatalf("/metrics: unterminated labels in %q", line)
			}
		}
	}
	return e
}

var (
	metricRE  = regexp.MustCompile(`\b((?:sluice|go|process)_[A-Za-z0-9_]+)\b\s*(\{[^}]*\})?`)
	matcherRE = regexp.MustCompile(`([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"`)
	groupRE   = regexp.MustCompile(`\b(?:by|without)\s*\(([^)]*)\)`)
	legendRE  = regexp.MustCompile(`\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}`)
	lvRE      = regexp.MustCompile(`label_values\(\s*([A-Za-z_:][A-Za-z0-9_:]*)\s*,\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)`)
	quantRE   = regexp.MustCompile(`histogram_quantile\(.*?\b([A-Za-z_:][A-Za-z0-9_:]*_bucket)\b`)
)

// targetLabels are added by Prometheus at scrape time, not by sluice.
var targetLabels = map[string]bool{"instance": true, "job": true}

// checkExpr checks the sluice, Go and process metrics of one PromQL
// expression against a node's exposition: names, label names, and the
// values of equality matchers. It returns the labels the result may carry.
func checkExpr(t *testing.T, e exposition, where, expr string) map[string]bool {
	t.Helper()
	labels := maps.Clone(targetLabels)
	for _, m := range metricRE.FindAllStringSubmatch(expr, -1) {
		name, sel := m[1], m[2]
		series, ok := e.series[name]
		if !ok {
			t.Errorf("%s: %s is not exposed by a running node (histograms are name_bucket, _sum, _count)", where, name)
			continue
		}
		for l := range series {
			labels[l] = true
		}
		for _, mm := range matcherRE.FindAllStringSubmatch(sel, -1) {
			l, op, v := mm[1], mm[2], mm[3]
			if targetLabels[l] {
				continue
			}
			vals, ok := series[l]
			if !ok {
				t.Errorf("%s: %s has no label %q", where, name, l)
			} else if op == "=" && !strings.Contains(v, "$") && !vals[v] {
				t.Errorf("%s: %s{%s=%q}: the node exposes %s values %v", where, name, l, v, l, slices.Sorted(maps.Keys(vals)))
			}
		}
	}
	for _, g := range groupRE.FindAllStringSubmatch(expr, -1) {
		for _, l := range strings.Split(g[1], ",") {
			if l = strings.TrimSpace(l); l != "" && !labels[l] {
				t.Errorf("%s: groups by %q, a label none of its metrics has", where, l)
			}
		}
	}
	for _, m := range lvRE.FindAllStringSubmatch(expr, -1) {
		if !labels[m[2]] {
			t.Errorf("%s: label_values of %q, a label %s does not have", where, m[2], m[1])
		}
	}
	for _, m := range quantRE.FindAllStringSubmatch(expr, -1) {
		if family := strings.TrimSuffix(m[1], "_bucket"); e.types[family] != "histogram" {
			t.Errorf("%s: histogram_quantile over %s, but %s is a %s", where, m[1], family, e.types[family])
		}
	}
	return labels
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func TestObservability(t *testing.T) {
	cf := loadCompose(t)
	dashboards := dashboardFiles(t, cf)
	_, ruleFiles := promSetup(t, cf)
	df := loadDockerfile(t)
	bin := sluiceBinary(t)

	n := startNode(t)
	// One admitted acquire, and one client over maxclients, so that the
	// labelled series the dashboards read exist.
	c := resptest.Dial(t, n.Server.RespAddr())
	if got := c.Do("RL.ACQUIRE", "deploy-test", "RATE", "10", "PER", "second"); !strings.HasPrefix(got, "[1 ") {
		t.Fatalf("RL.ACQUIRE: %s", got)
	}
	extra := resptest.Dial(t, n.Server.RespAddr())
	if got, err := extra.TryRead(5 * time.Second); err != nil || !strings.Contains(got, "max number of clients") {
		t.Fatalf("a client over maxclients 1: %q, %v", got, err)
	}

	for _, p := range []string{"/healthz", "/readyz"} {
		if code, body := httpGet(t, "http://"+n.Server.HTTPAddr()+p); code != http.StatusOK {
			t.Errorf("GET %s: %d %s", p, code, body)
		}
	}
	code, body := httpGet(t, "http://"+n.Server.HTTPAddr()+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("GET /metrics: %d\n%s", code, body)
	}
	e := parseExposition(t, body)

	t.Run("dashboards", func(t *testing.T) {
		used := map[string]bool{}
		for _, file := range dashboards {
			for _, q := range dashboardQueries(t, file) {
				labels := checkExpr(t, e, q.where, q.expr)
				for _, m := range legendRE.FindAllStringSubmatch(q.legend, -1) {
					if !labels[m[1]] {
						t.Errorf("%s: legend {{%s}} is not a label of its result", q.where, m[1])
					}
				}
				for _, m := range metricRE.FindAllStringSubmatch(q.expr, -1) {
					used[m[1]] = true
				}
			}
			checkRaftStateMappings(t, e, file)
		}
		for _, want := range []string{"sluice_acquire_total", "sluice_command_duration_seconds_bucket", "sluice_raft_state", "go_memstats_heap_alloc_bytes", "process_cpu_seconds_total"} {
			if !used[want] {
				t.Errorf("no dashboard shows %s", want)
			}
		}
	})

	t.Run("alert rules", func(t *testing.T) {
		for _, r := range alertRules(t, ruleFiles) {
			checkExpr(t, e, r.where, r.expr)
		}
	})

	// The image's HEALTHCHECK, run as the image runs it: the HTTP address
	// comes from the image's SLUICE_HTTP_ADDR (all interfaces).
	t.Run("healthcheck", func(t *testing.T) {
		hc := dockerHealthcheck(t, df)
		httpVar := server.EnvName("http-addr")
		run := func(httpAddr string, extra ...string) error {
			cmd := exec.Command(bin, append(slices.Clone(hc[1:]), extra...)...)
			for k, v := range df.env {
				cmd.Env = append(cmd.Env, k+"="+v)
			}
			cmd.Env = append(cmd.Env, httpVar+"="+httpAddr)
			out, err := cmd.CombinedOutput()
			if err != nil {
				return fmt.Errorf("%v: %s", err, out)
			}
			return nil
		}
		host := hostOf(df.env[httpVar])
		port := portOf(t, "http-addr", n.Server.HTTPAddr())
		if err := run(net.JoinHostPort(host, port)); err != nil {
			t.Errorf("HEALTHCHECK %q with %s=%s: %v", hc, httpVar, net.JoinHostPort(host, port), err)
		}
		if err := run(net.JoinHostPort(host, port), "--ready"); err != nil {
			t.Errorf("HEALTHCHECK %q --ready: %v", hc, err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		closed := ln.Addr().String()
		ln.Close()
		if err := run(net.JoinHostPort(host, portOf(t, "closed", closed))); err == nil {
			t.Errorf("HEALTHCHECK passes with no node listening")
		}
	})
}

// checkRaftStateMappings checks that the value mappings of panels showing
// sluice_raft_state, and comparisons such as sluice_raft_state == 2, agree
// with the metric's help text ("0 follower, 1 candidate, …").
func checkRaftStateMappings(t *testing.T, e exposition, file string) {
	t.Helper()
	roles := map[string]string{}
	for _, m := range regexp.MustCompile(`(\d+) ([a-z]+)`).FindAllStringSubmatch(e.help["sluice_raft_state"], -1) {
		roles[m[1]] = m[2]
	}
	if roles["2"] != "leader" {
		t.Fatalf("sluice_raft_state help %q does not say which value is leader", e.help["sluice_raft_state"])
	}
	cmpRE := regexp.MustCompile(`sluice_raft_state\b(?:\{[^}]*\})?\s*==\s*(\d+)`)
	d := loadDashboard(t, file)
	for _, p := range allPanels(d) {
		where := fmt.Sprintf("%s panel %q", file, p["title"])
		raw, _ := json.Marshal(p["targets"])
		exprs := string(raw)
		if !strings.Contains(exprs, "sluice_raft_state") {
			continue
		}
		for _, m := range cmpRE.FindAllStringSubmatch(exprs, -1) {
			if roles[m[1]] != "leader" {
				t.Errorf("%s: compares sluice_raft_state with %s, which is %q", where, m[1], roles[m[1]])
			}
		}
		fc, _ := p["fieldConfig"].(map[string]any)
		defs, _ := fc["defaults"].(map[string]any)
		mappings, _ := defs["mappings"].([]any)
		for _, mp := range mappings {
			opts, _ := asMap(t, where, mp)["options"].(map[string]any)
			for value, o := range opts {
				text, _ := asMap(t, where, o)["text"].(string)
				if roles[value] != strings.ToLower(text) {
					t.Errorf("%s: maps %s to %q; the node says %s is %q", where, value, text, value, roles[value])
				}
			}
		}
	}
}

// ---- deploy/README.md ----

func TestReadme(t *testing.T) {
	const file = "deploy/README.md"
	src := read(t, file)
	checkEnvNames(t, file, src, composeVars)
	other := append(healthcheckFlags(t), "build", "build-arg", "profile", "system", "no-create-home", "shell", "now")
	checkFlags(t, file, src, other...)

	// The table of the compose cluster's nodes.
	cf := loadCompose(t)
	rowRE := regexp.MustCompile(`(?m)^\| (\S+) \((\S+)\) \| localhost:(\d+) \| localhost:(\d+) \| (\S+) \|$`)
	rows := rowRE.FindAllStringSubmatch(src, -1)
	if len(rows) != len(cf.nodes) {
		t.Fatalf("%s: the node table has %d rows, docker-compose.yml %d nodes", file, len(rows), len(cf.nodes))
	}
	for _, r := range rows {
		svc := cf.services[r[1]]
		var n *composeNode
		for i := range cf.nodes {
			if cf.nodes[i].service == r[1] {
				n = &cf.nodes[i]
			}
		}
		if svc == nil || n == nil {
			t.Errorf("%s: %s is not a sluice service of docker-compose.yml", file, r[1])
			continue
		}
		published := map[string]string{} // container port → host port
		for _, p := range asStrings(t, r[1]+".ports", svc["ports"]) {
			f := strings.Split(p, ":")
			published[f[len(f)-1]] = f[len(f)-2]
		}
		resp, httpPort := portOf(t, file, n.cfg.RespAddr), portOf(t, file, n.cfg.HTTPAddr)
		if r[2] != n.cfg.NodeID || r[3] != published[resp] || r[4] != published[httpPort] || r[5] != n.cfg.RaftAddr {
			t.Errorf("%s: row %q; docker-compose.yml has %s (%s) on localhost:%s and localhost:%s, Raft %s",
				file, r[0], r[1], n.cfg.NodeID, published[resp], published[httpPort], n.cfg.RaftAddr)
		}
	}
}
