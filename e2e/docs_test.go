package e2e

// Executable docs: every ```console block of README.md and docs/*.md runs
// against the real binary, and what it prints must be what the block
// shows. README.md describes the markers.

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// A docBlock is one ```console block.
type docBlock struct {
	file  string
	line  int      // of the opening fence
	lines []string // the block's content, fence indentation removed
	// From <!-- doctest: … --> comments right above the fence.
	skip   string   // why the block does not run; empty when it runs
	fresh  []string // start new servers first: ["cluster"|"port=N"|flag…]
	setup  []string // shell commands run first, in the file's directory
	hasDir bool     // a doctest comment was present
}

var (
	fenceRE     = regexp.MustCompile("^( *)```(\\S*)\\s*$")
	directiveRE = regexp.MustCompile(`^\s*<!-- doctest: (.*?) -->\s*$`)
	promptRE    = regexp.MustCompile(`^(127\.0\.0\.1|localhost):(\d+)(?:\(TX\))?> (.*)$`)
	// A reply line's own annotation: two or more spaces, then "# …".
	annotationRE = regexp.MustCompile(`\S(\s{2,}# .*)$`)
	placeRE      = regexp.MustCompile(`<[^<>\s][^<>]*>|~-?\d+(?:\.\d+)?`)
)

// docFiles are the files whose console blocks run.
func docFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(files)
	return append([]string{"../README.md"}, files...)
}

func parseDocBlocks(t *testing.T, file string) []docBlock {
	t.Helper()
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(src), "\n")
	var out []docBlock
	for i := 0; i < len(lines); i++ {
		m := fenceRE.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		indent := m[1]
		end := i + 1
		for end < len(lines) && strings.TrimSpace(lines[end]) != "```" {
			end++
		}
		if m[2] != "console" {
			i = end
			continue
		}
		b := docBlock{file: strings.TrimPrefix(file, "../"), line: i + 1}
		for _, l := range lines[i+1 : end] {
			b.lines = append(b.lines, strings.TrimPrefix(l, indent))
		}
		for j := i - 1; j >= 0; j-- {
			d := directiveRE.FindStringSubmatch(lines[j])
			if d == nil {
				break
			}
			b.hasDir = true
			key, val, _ := strings.Cut(d[1], ":")
			val = strings.TrimSpace(val)
			switch strings.TrimSpace(key) {
			case "skip":
				if val == "" {
					t.Errorf("%s:%d: doctest skip needs a reason", b.file, j+1)
				}
				b.skip = val
			case "fresh":
				b.fresh = append(strings.Fields(val), "") // non-nil even when empty
			case "setup":
				b.setup = append([]string{val}, b.setup...)
			default:
				t.Errorf("%s:%d: unknown doctest directive %q", b.file, j+1, key)
			}
		}
		out = append(out, b)
		i = end
	}
	return out
}

// docEnv is where one file's blocks run: its servers, its directory, and
// the mapping from the ports the doc shows to the real ones.
type docEnv struct {
	t     *testing.T
	dir   string // working directory of the commands
	bin   string // the wrappers: redis-cli, sluice, curl
	ports map[string]string
	procs []*proc
}

const docWrapperCommon = `#!/bin/bash
# Maps the ports the docs show to the ports of the test's servers.
map_arg() {
  local a="$1" pair d r
  for pair in $DOCTEST_PORTS; do
    d=${pair%%=*}; r=${pair#*=}
    [ "$a" = "$d" ] && { printf '%s' "$r"; return; }
    a=${a//:$d/:$r}
  done
  printf '%s' "$a"
}
args=()
for a in "$@"; do args+=("$(map_arg "$a")"); done
`

func newDocEnv(t *testing.T) *docEnv {
	t.Helper()
	e := &docEnv{t: t, dir: t.TempDir(), bin: t.TempDir(), ports: map[string]string{}}
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		cli = requireTool(t, "redis-cli")
	}
	curl, _ := exec.LookPath("curl")
	jq, _ := exec.LookPath("jq")
	scripts := map[string]string{
		// redis-cli without -p, -h or -u talks to the doc's default port.
		"redis-cli": docWrapperCommon + `case " $* " in *" -p "*|*" -h "*|*" -u "*) ;; *) args=(-p "$(map_arg 6380)" "${args[@]}");; esac
exec ` + cli + ` "${args[@]}"
`,
		"sluice": docWrapperCommon + `exec ` + binary + ` "${args[@]}"
`,
	}
	if jq != "" {
		// jq colours its output on a terminal; the docs show it plain.
		scripts["jq"] = "#!/bin/sh\nexec " + jq + ` -M "$@"
`
	}
	if curl != "" {
		scripts["curl"] = docWrapperCommon + `exec ` + curl + ` "${args[@]}"
`
	}
	for name, src := range scripts {
		if err := os.WriteFile(filepath.Join(e.bin, name), []byte(src), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(e.bin, "sluice"), filepath.Join(e.dir, "sluice")); err != nil {
		t.Fatal(err)
	}
	return e
}

// startServers replaces the file's servers: one node on the doc's port
// (port=N, default 6380), or with "cluster" three nodes n1–n3 on 6491–6493
// (Raft 7491–7493, HTTP 9491–9493); other words are flags for every node.
func (e *docEnv) startServers(spec []string) {
	t := e.t
	t.Helper()
	for _, p := range e.procs {
		p.stop()
	}
	e.procs = nil
	e.ports = map[string]string{}
	cluster, port := false, 6380
	var flags []string
	for _, w := range spec {
		switch {
		case w == "":
		case w == "cluster":
			cluster = true
		case strings.HasPrefix(w, "port="):
			n, err := strconv.Atoi(strings.TrimPrefix(w, "port="))
			if err != nil {
				t.Fatalf("doctest fresh: %q", w)
			}
			port = n
		default:
			flags = append(flags, w)
		}
	}
	n := 1
	if cluster {
		n, port = 3, 6491
	}
	var peers []string
	for i := 0; i < n; i++ {
		for _, doc := range []int{port + i, port + 1000 + i, port + 3000 + i} {
			e.ports[strconv.Itoa(doc)] = freePort(t)
		}
		if cluster {
			peers = append(peers, fmt.Sprintf("n%d=127.0.0.1:%s=127.0.0.1:%s", i+1, e.ports[strconv.Itoa(port+1000+i)], e.ports[strconv.Itoa(port+i)]))
		}
	}
	for i := 0; i < n; i++ {
		args := []string{"--resp-addr", "127.0.0.1:" + e.ports[strconv.Itoa(port+i)],
			"--raft-addr", "127.0.0.1:" + e.ports[strconv.Itoa(port+1000+i)],
			"--http-addr", "127.0.0.1:" + e.ports[strconv.Itoa(port+3000+i)],
			"--data-dir", t.TempDir()}
		if cluster {
			args = append(args, "--node-id", fmt.Sprintf("n%d", i+1), "--bootstrap-peers", strings.Join(peers, ","))
		}
		for _, f := range flags {
			args = append(args, e.mapPorts(f))
		}
		if !cluster {
			// A file's flag values (--acl-file users.acl) are relative to its directory.
			for j, a := range args {
				if j > 0 && strings.HasPrefix(args[j-1], "--") && strings.HasSuffix(args[j-1], "-file") && !filepath.IsAbs(a) {
					args[j] = filepath.Join(e.dir, a)
				}
			}
		}
		e.procs = append(e.procs, start(t, args...))
	}
	// Ready: a leader is known and the log applied.
	for _, p := range e.procs {
		eventually(t, 30*time.Second, "the doc's servers to be ready", func() bool {
			out, err := exec.Command("curl", "-sf", "http://"+p.HTTP+"/readyz").CombinedOutput()
			return err == nil && len(out) > 0
		})
	}
}

// mapPorts turns the doc's ports in s into the real ones.
func (e *docEnv) mapPorts(s string) string {
	for d, r := range e.ports {
		s = strings.ReplaceAll(s, ":"+d, ":"+r)
	}
	return s
}

// unmapPorts turns the real ports in s back into the doc's.
func (e *docEnv) unmapPorts(s string) string {
	for d, r := range e.ports {
		s = regexp.MustCompile(`:`+r+`\b`).ReplaceAllString(s, ":"+d)
	}
	return s
}

func (e *docEnv) environ() []string {
	var pairs []string
	for d, r := range e.ports {
		pairs = append(pairs, d+"="+r)
	}
	sort.Strings(pairs)
	env := []string{"PATH=" + e.bin + ":" + os.Getenv("PATH"), "DOCTEST_PORTS=" + strings.Join(pairs, " "),
		"HOME=" + e.dir, "TERM=dumb", "LANG=C.UTF-8", "TZ=UTC"}
	return env
}

// shell runs one command line as a terminal would: under a pseudo-terminal
// (script(1)), so that redis-cli formats its replies as for a person, with
// standard error beside standard output.
func (e *docEnv) shell(cmdline string, stdin string) (string, error) {
	f := filepath.Join(e.dir, ".doctest-cmd")
	if err := os.WriteFile(f, []byte(cmdline+"\n"), 0o644); err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var cmd *exec.Cmd
	if stdin == "" {
		cmd = exec.CommandContext(ctx, "script", "-qec", "bash ./.doctest-cmd", "/dev/null")
	} else {
		cmd = exec.CommandContext(ctx, "bash", "./.doctest-cmd")
		cmd.Stdin = strings.NewReader(stdin)
	}
	cmd.Dir = e.dir
	cmd.Env = e.environ()
	out, err := cmd.CombinedOutput()
	s := strings.ReplaceAll(string(out), "\r\n", "\n")
	return e.unmapPorts(s), err
}

// A docStep is one command of a block and the output the block shows.
type docStep struct {
	line  int // in the file
	cmd   string
	stdin string // redis-cli session commands, for prompt lines
	want  []string
	at    []int // the file line of each want line
}

func blockSteps(t *testing.T, b docBlock) []docStep {
	t.Helper()
	var steps []docStep
	for i, l := range b.lines {
		ln := b.line + 1 + i
		if cmd, ok := strings.CutPrefix(l, "$ "); ok {
			steps = append(steps, docStep{line: ln, cmd: cmd})
			continue
		}
		if m := promptRE.FindStringSubmatch(l); m != nil {
			// Prompt lines in a row share one connection, as in redis-cli's
			// interactive mode.
			if n := len(steps); n > 0 && steps[n-1].stdin != "" && steps[n-1].cmd == "redis-cli -p "+m[2]+" --no-raw" {
				steps[n-1].stdin += m[3] + "\n"
				continue
			}
			steps = append(steps, docStep{line: ln, cmd: "redis-cli -p " + m[2] + " --no-raw", stdin: m[3] + "\n"})
			continue
		}
		if len(steps) == 0 {
			t.Errorf("%s:%d: a console block must start with a command ($ or a redis-cli prompt), or be marked <!-- doctest: skip: why -->", b.file, ln)
			return nil
		}
		if m := annotationRE.FindStringSubmatchIndex(l); m != nil {
			l = l[:m[2]]
		}
		steps[len(steps)-1].want = append(steps[len(steps)-1].want, strings.TrimRight(l, " \t"))
		steps[len(steps)-1].at = append(steps[len(steps)-1].at, ln)
	}
	return steps
}

// lineMatches compares one line of output with the doc's: <…> stands for
// any text, ~N for a number that depends on time, within tol of N (or a
// fifth of N).
func lineMatches(want, got string, tol float64) bool {
	if !placeRE.MatchString(want) {
		return want == got
	}
	var re strings.Builder
	var approx []float64
	re.WriteString("^")
	last := 0
	for _, m := range placeRE.FindAllStringIndex(want, -1) {
		re.WriteString(regexp.QuoteMeta(want[last:m[0]]))
		p := want[m[0]:m[1]]
		if strings.HasPrefix(p, "~") {
			n, _ := strconv.ParseFloat(p[1:], 64)
			approx = append(approx, n)
			re.WriteString(`(-?\d+(?:\.\d+)?)`)
		} else {
			re.WriteString(`.+?`)
		}
		last = m[1]
	}
	re.WriteString(regexp.QuoteMeta(want[last:]) + "$")
	m := regexp.MustCompile(re.String()).FindStringSubmatch(got)
	if m == nil {
		return false
	}
	for i, n := range approx {
		v, _ := strconv.ParseFloat(m[i+1], 64)
		if math.Abs(v-n) > max(tol, math.Abs(n)/5) {
			return false
		}
	}
	return true
}

// outputMatches matches got against want, where a line "…" stands for any
// number of lines.
func outputMatches(want, got []string, tol float64) bool {
	if len(want) == 0 {
		return len(got) == 0
	}
	if want[0] == "…" {
		for i := 0; i <= len(got); i++ {
			if outputMatches(want[1:], got[i:], tol) {
				return true
			}
		}
		return false
	}
	return len(got) > 0 && lineMatches(want[0], got[0], tol) && outputMatches(want[1:], got[1:], tol)
}

var (
	// ansiRE matches terminal colour codes (redis-cli's hints, jq).
	ansiRE = regexp.MustCompile("\x1b\\[[0-9;]*m")
	// authWarning is what redis-cli writes to standard error for -a and
	// --pass; the docs leave it out.
	authWarning = "Warning: Using a password with '-a' or '-u' option on the command line interface may not be safe."
)

// outputLines splits a command's output into lines as a terminal shows
// them: colour codes and carriage returns dropped, trailing blanks
// trimmed, and without redis-cli's warning about passwords on the
// command line.
func outputLines(s string) []string {
	s = ansiRE.ReplaceAllString(s, "")
	var lines []string
	for _, l := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		if l = strings.TrimRight(l, " \t\r"); l != authWarning {
			lines = append(lines, l)
		}
	}
	for len(lines) > 0 && lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	return lines
}

func TestDocs(t *testing.T) {
	requireTool(t, "redis-cli")
	for _, tool := range []string{"script", "jq", "curl"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("SLUICE_REQUIRE_TOOLS") != "" {
				t.Fatalf("%s is not installed (apt-get install bsdutils jq curl); SLUICE_REQUIRE_TOOLS is set", tool)
			}
			t.Skipf("%s is not installed: the doc examples use it", tool)
		}
	}
	var total, ran, commands int
	skipped := map[string]int{}
	for _, file := range docFiles(t) {
		blocks := parseDocBlocks(t, file)
		if len(blocks) == 0 {
			continue
		}
		t.Run(strings.TrimPrefix(file, "../"), func(t *testing.T) {
			e := newDocEnv(t)
			defer func() {
				for _, p := range e.procs {
					p.stop()
				}
			}()
			for _, b := range blocks {
				total++
				if b.skip != "" {
					skipped[b.file+":"+strconv.Itoa(b.line)+" "+b.skip]++
					continue
				}
				if b.fresh != nil || e.procs == nil {
					e.startServers(b.fresh)
				}
				for _, s := range b.setup {
					if out, err := e.shell(s, ""); err != nil {
						t.Fatalf("%s:%d: setup %q: %v\n%s", b.file, b.line, s, err, out)
					}
				}
				began := time.Now()
				ok := true
				for _, s := range blockSteps(t, b) {
					commands++
					out, _ := e.shell(s.cmd, s.stdin)
					got := outputLines(out)
					tol := float64(time.Since(began).Milliseconds()) + 50
					if !outputMatches(s.want, got, tol) {
						ok = false
						reportMismatch(b.file, s, got)
						t.Errorf("%s:%d: %s\nthe doc shows:\n%s\nthe server printed:\n%s", b.file, s.line,
							strings.TrimSpace(s.cmd+" "+strings.ReplaceAll(s.stdin, "\n", "; ")),
							strings.Join(s.want, "\n"), strings.Join(got, "\n"))
					}
				}
				if ok {
					ran++
				}
			}
		})
	}
	var reasons []string
	for r := range skipped {
		reasons = append(reasons, r)
	}
	sort.Strings(reasons)
	t.Logf("doc examples: %d console blocks; %d ran and matched, %d commands; %d marked not to run:\n  %s",
		total, ran, commands, len(reasons), strings.Join(reasons, "\n  "))
}

// reportMismatch appends a mismatch to $DOCTEST_REPORT, one JSON object a
// line, for a person (or a script) updating the docs.
func reportMismatch(file string, s docStep, got []string) {
	path := os.Getenv("DOCTEST_REPORT")
	if path == "" {
		return
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	b, _ := json.Marshal(map[string]any{"file": file, "line": s.line, "cmd": s.cmd, "want": s.want, "at": s.at, "got": got})
	f.Write(append(b, '\n'))
}
