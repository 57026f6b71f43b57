package deploy_test

import (
	"encoding/json"
	"fmt"
	"net"
	"os/exec"
	"path"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/server"
)

// instr is one Dockerfile instruction.
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

// loadDockerfile splits the Dockerfile into instructions, by the
// Dockerfile reference's rules: one instruction per line, '\' continues a
// line, '#' starts a comment line. No Dockerfile parser library builds
// here without moving the binary's own dependencies (moby/buildkit
// upgrades go.etcd.io/bbolt), and instructions are all the checks need.
func loadDockerfile(t *testing.T) dockerfile {
	t.Helper()
	var df dockerfile
	var cur strings.Builder
	start, cont := 0, false
	for i, raw := range strings.Split(read(t, "Dockerfile"), "\n") {
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

// stageEnv returns the variables a stage's ENV instructions set.
func stageEnv(t *testing.T, stage []instr) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, in := range find(stage, "ENV") {
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
	return slices.IndexFunc(stage, match)
}

// execForm reads an instruction's JSON (exec) form, which Docker runs
// without a shell: the process gets the signals itself.
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

// exposedPorts returns the ports a stage EXPOSEs, without "/tcp".
func exposedPorts(stage []instr) []string {
	var out []string
	for _, in := range find(stage, "EXPOSE") {
		for _, p := range strings.Fields(in.args) {
			out = append(out, strings.TrimSuffix(p, "/tcp"))
		}
	}
	return out
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
	m := regexp.MustCompile(`^golang:(\d+\.\d+)(?:\.\d+)?(?:-\S+)?\s+(?i:as)\s+(\S+)$`).FindStringSubmatch(build[0].args)
	if m == nil {
		t.Fatalf("Dockerfile:%d: build stage must be FROM golang:<go.mod's release> AS <name>, got %q", build[0].line, build[0].args)
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
	exposed := exposedPorts(final)
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

// The Dockerfile builds with the classic builder as well as with BuildKit
// (Debian's docker.io has no buildx): no parser directive asking for a
// frontend image, no RUN options (--mount, --network, --security), no
// heredocs, and no COPY or ADD options but --from and --chown.
func TestDockerfileClassicBuilder(t *testing.T) {
	src := read(t, "Dockerfile")
	for i, line := range strings.Split(src, "\n") {
		if regexp.MustCompile(`^#\s*(?i:syntax|check)\s*=`).MatchString(line) {
			t.Errorf("Dockerfile:%d: %q needs BuildKit's frontend", i+1, line)
		}
	}
	df := loadDockerfile(t)
	for _, stage := range df.stages {
		for _, in := range stage {
			if strings.Contains(in.args, "<<") {
				t.Errorf("Dockerfile:%d: a heredoc needs BuildKit", in.line)
			}
			if in.cmd == "RUN" && strings.HasPrefix(in.args, "--") {
				t.Errorf("Dockerfile:%d: RUN %s needs BuildKit", in.line, strings.Fields(in.args)[0])
			}
			if in.cmd == "COPY" || in.cmd == "ADD" {
				opts, _, _ := copyArgs(in)
				for k := range opts {
					if k != "from" && k != "chown" {
						t.Errorf("Dockerfile:%d: %s --%s needs BuildKit", in.line, in.cmd, k)
					}
				}
			}
		}
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
