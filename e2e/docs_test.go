package e2e

// Executable docs: every ```console block of README.md and docs/*.md runs
// against the real binary, and what it prints must be what the block
// shows. CONTRIBUTING.md describes the placeholders (calendar ones in
// docclock_test.go) and DOCTEST_NOW. Comments right above a block,
// <!-- doctest: NAME: value -->, say what it needs:
//
//	fresh: [cluster] [port=N] [flag…]  new servers for this block and the file's next ones
//	aside: [cluster] [port=N] [flag…]  servers for this block alone
//	kill: n2 n3                        cluster nodes killed (SIGKILL) first
//	restart: n1 n2 n3                  cluster nodes stopped and started again on their data
//	term: held                         SIGTERM to the block's servers once they hold a call (WAIT)
//	setup: cmd                         a shell command run first
//	needs: go|python3-redis|node-modules|sluice-python|sluice-node|grpcurl  programs a machine may lack
//	skip: why                          the block does not run; counted and listed
//
// and above a code block of another language:
//
//	file: NAME [append | before: LINE]  the block is (or goes into) file NAME
//
// A cluster is grown from n1 with --join, so n1 leads it. If a block of a
// file fails after the cluster elected a leader on its own (a loaded
// machine), the file runs again from its start, up to three times.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// A docBlock is one ```console block.
type docBlock struct {
	file  string
	line  int      // of the opening fence
	lines []string // the block's content, fence indentation removed
	// From <!-- doctest: … --> comments right above the fence.
	skip    string   // why the block does not run; empty when it runs
	fresh   []string // start new servers first: ["cluster"|"port=N"|flag…]
	aside   []string // servers for this block alone, as fresh; the file's come back after it
	kill    []string // cluster nodes (n1…n3) to kill (SIGKILL) first; they stay down
	restart []string // cluster nodes to stop (if running) and start again on their data
	term    bool     // SIGTERM to the block's servers once one of them holds a call (WAIT)
	setup   []string // shell commands run first, in the file's directory
	writes  string   // not a console block: its content is written to this file
	before  string   // with writes: inserted into the file before its last line that is this
	appends bool     // with writes: added at the end of the file
	needs   []string // programs the block runs that a machine may lack (see docNeeds)
	hasDir  bool     // a doctest comment was present
}

var (
	fenceRE     = regexp.MustCompile("^( *)```(\\S*)\\s*$")
	directiveRE = regexp.MustCompile(`^\s*<!-- doctest: (.*?) -->\s*$`)
	promptRE    = regexp.MustCompile(`^(127\.0\.0\.1|localhost):(\d+)(?:\(TX\))?> (.*)$`)
	// A reply line's own annotation: two or more spaces, then "# …".
	annotationRE = regexp.MustCompile(`\S(\s{2,}# .*)$`)
	waitingRE    = regexp.MustCompile(`(?m)^sluice_waiting_clients (\d+)`)
	heredocRE    = regexp.MustCompile(`<<-?\s*'?(\w+)'?\s*$`)
	exportRE     = regexp.MustCompile(`^export (\w+)=(.*)$`)
	devTCPRE     = regexp.MustCompile(`/dev/tcp/[^/\s]+/\d+`)
	placeRE      = regexp.MustCompile(calendarRE.String() + `|<[^<>\s][^<>]*>|~-?\d+(?:\.\d+)?`)
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
			case "aside":
				b.aside = append(strings.Fields(val), "")
			case "kill":
				b.kill = strings.Fields(val)
			case "restart":
				b.restart = strings.Fields(val)
			case "term":
				if val != "held" {
					t.Errorf("%s:%d: doctest term: %q; the one form is term: held", b.file, j+1, val)
				}
				b.term = true
			case "setup":
				b.setup = append([]string{val}, b.setup...)
			case "file":
				b.writes, b.before, _ = strings.Cut(val, " before: ")
				if name, ok := strings.CutSuffix(b.writes, " append"); ok {
					b.writes, b.appends = name, true
				}
			case "needs":
				b.needs = strings.Fields(val)
			default:
				t.Errorf("%s:%d: unknown doctest directive %q", b.file, j+1, key)
			}
		}
		i = end
		if m[2] != "console" {
			if b.writes != "" {
				out = append(out, b) // a file the examples after it use
			} else if b.hasDir {
				t.Errorf("%s:%d: only a doctest file: directive goes above a %q block", b.file, b.line, m[2])
			}
			continue
		}
		if b.writes != "" {
			t.Errorf("%s:%d: a console block cannot be a doctest file", b.file, b.line)
		}
		out = append(out, b)
	}
	return out
}

// docEnv is where one file's blocks run: its servers, its directory, and
// the mapping from the ports the doc shows to the real ones.
type docEnv struct {
	t     *testing.T
	dir   string // working directory of the commands
	bin   string // the wrappers: redis-cli, sluice, curl
	srv   docServers
	files map[string]string // the files the doc wrote (file:), with the doc's ports
	extra []string          // environment the block's programs need (needs:)
	order []string          // their names, in the order written
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
	e := &docEnv{t: t, dir: t.TempDir(), bin: t.TempDir()}
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
	if py, err := exec.LookPath("python3"); err == nil {
		// needs: python3-redis picks the interpreter that has redis-py.
		scripts["python3"] = "#!/bin/sh\nexec \"${DOCTEST_PYTHON:-" + py + "}\" \"$@\"\n"
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
	if g, err := exec.LookPath("grpcurl"); err == nil {
		scripts["grpcurl"] = docWrapperCommon + `exec ` + g + ` "${args[@]}"
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

// docServers are the nodes a block runs against, and the mapping from
// the ports the doc shows to theirs.
type docServers struct {
	procs []*proc
	ports map[string]string
	nodes map[string]*proc    // a cluster's running nodes by id
	args  map[string][]string // a cluster's nodes' arguments by id
	term  string              // a cluster's term once n1 led it; "" when unknown
	pass  string              // --requirepass, for the harness's own checks
	vars  []string            // NAME=value exported by the examples run against these servers
	clock docClock            // their clock: DOCTEST_NOW when they started, or the real one
}

func (s *docServers) stop() {
	for _, p := range s.procs {
		p.stop()
	}
	s.procs = nil
}

// startServers replaces the file's servers (see launch).
func (e *docEnv) startServers(spec []string) {
	e.srv.stop()
	e.srv = e.launch(spec)
}

// launch starts one node on the doc's port (port=N, default 6380), or with
// "cluster" three nodes n1–n3 on N…N+2 (default 6491; Raft N+1000…, HTTP
// N+3000…); other words are flags for every node. A cluster is grown from
// n1 with --join, one node at a time, so that n1 leads it and every node
// has applied the same log, as the docs show.
func (e *docEnv) launch(spec []string) docServers {
	t := e.t
	t.Helper()
	srv := docServers{ports: map[string]string{}, nodes: map[string]*proc{}, args: map[string][]string{}, clock: newDocClock(t)}
	cluster, port := false, 6380
	var flags []string
	for _, w := range spec {
		switch {
		case w == "":
		case w == "cluster":
			cluster = true
			if port == 6380 {
				port = 6491
			}
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
		n = 3
	}
	for i := 0; i < n; i++ {
		// RESP, Raft, a gRPC listener if the flags ask for one, HTTP.
		for _, doc := range []int{port + i, port + 1000 + i, port + 2000 + i, port + 3000 + i} {
			srv.ports[strconv.Itoa(doc)] = freePort(t)
		}
	}
	for j, f := range flags {
		if j > 0 && flags[j-1] == "--requirepass" {
			srv.pass = f
		}
	}
	for attempt := 1; !e.grow(&srv, n, port, flags); attempt++ {
		// An election a loaded machine caused: n1 must lead, in its first
		// term, as the docs show.
		srv.stop()
		srv.nodes, srv.args = map[string]*proc{}, map[string][]string{}
		if attempt == 3 {
			t.Fatal("an election (another leader than n1, or n1 in a later term) came three times while the doc's cluster grew")
		}
		t.Logf("an election came while the doc's cluster grew; growing it again")
	}
	if cluster && srv.term == "" {
		srv.term = srv.info(t, srv.nodes["n1"])["term"]
	}
	return srv
}

// fileTLSFlag says whether a flag's value is a certificate, key or CA
// file (--tls-cert, --grpc-tls-client-ca …; not --grpc-tls-client-san).
func fileTLSFlag(flag string) bool {
	return (strings.HasPrefix(flag, "--tls-") || strings.HasPrefix(flag, "--grpc-tls-")) && !strings.HasSuffix(flag, "-san")
}

// grow starts the n nodes of srv; for a cluster (n > 1) one at a time,
// each joining n1 and waiting until it is a member and has applied what n1
// committed. It says false if another node took the lead meanwhile.
func (e *docEnv) grow(srv *docServers, n, port int, flags []string) bool {
	t := e.t
	t.Helper()
	cluster := n > 1
	addr := func(doc int) string { return "127.0.0.1:" + srv.ports[strconv.Itoa(doc)] }
	moved := false
	firstTerm := "" // n1's term once it leads: the docs show the cluster in it
	for i := 0; i < n; i++ {
		args := []string{"--resp-addr", addr(port + i), "--raft-addr", addr(port + 1000 + i),
			"--http-addr", addr(port + 3000 + i), "--data-dir", t.TempDir()}
		id := fmt.Sprintf("n%d", i+1)
		if cluster {
			args = append(args, "--node-id", id)
			if i > 0 {
				args = append(args, "--join", addr(port))
			}
		}
		for _, f := range flags {
			// A file's flag values (--acl-file users.acl, --envoy-config
			// rules.yaml, --grpc-tls-cert server.crt) are relative to its
			// directory.
			if f = srv.mapPorts(f); len(args) > 0 && strings.HasPrefix(args[len(args)-1], "--") &&
				(strings.HasSuffix(args[len(args)-1], "-file") || args[len(args)-1] == "--envoy-config" || fileTLSFlag(args[len(args)-1])) && !filepath.IsAbs(f) {
				f = filepath.Join(e.dir, f)
			}
			args = append(args, f)
		}
		p := startEnv(t, srv.clock.env, args...)
		srv.procs = append(srv.procs, p)
		srv.nodes[id], srv.args[id] = p, args
		// Ready: a leader is known and the log applied; in a cluster, the
		// node is a member and has applied what the leader committed.
		eventually(t, 30*time.Second, "the doc's servers to be ready", func() bool {
			out, err := exec.Command("curl", "-sf", "http://"+p.HTTP+"/readyz").CombinedOutput()
			if err != nil || len(out) == 0 {
				return false
			}
			if !cluster {
				return true
			}
			lead := srv.info(t, srv.nodes["n1"])
			if lead != nil && lead["leader_id"] != "" && lead["leader_id"] != "n1" {
				moved = true
				return true
			}
			if lead != nil && lead["role"] == "leader" {
				// An election n1 won again still moved the term the
				// examples show.
				if firstTerm == "" {
					firstTerm = lead["term"]
				} else if lead["term"] != firstTerm {
					moved = true
					return true
				}
			}
			return srv.settled(t, i+1)
		})
		if moved {
			return false
		}
	}
	srv.term = firstTerm
	return true
}

// info is RL.CLUSTER INFO of a node, nil when it does not answer.
func (s *docServers) info(t *testing.T, p *proc) map[string]string {
	c := redis.NewClient(&redis.Options{Addr: p.Resp, Password: s.pass, MaxRetries: -1})
	defer c.Close()
	inf, err := clusterInfo(c)
	if err != nil {
		return nil
	}
	return inf
}

// settled says whether the first n nodes are members led by n1 and have
// applied everything it committed.
func (s *docServers) settled(t *testing.T, n int) bool {
	lead := s.info(t, s.nodes["n1"])
	if lead == nil || lead["role"] != "leader" || lead["members"] != strconv.Itoa(n) {
		return false
	}
	for i := 2; i <= n; i++ {
		inf := s.info(t, s.nodes[fmt.Sprintf("n%d", i)])
		if inf == nil || inf["leader_id"] != "n1" || inf["applied_index"] != lead["commit_index"] {
			return false
		}
	}
	return true
}

// termMoved says whether a cluster's leadership changed since it started
// (an election the example did not ask for, as a loaded machine can
// cause): a mismatch then says nothing about the doc.
func (s *docServers) termMoved(t *testing.T) bool {
	if s.term == "" {
		return false
	}
	for _, p := range s.procs {
		if inf := s.info(t, p); inf != nil && inf["term"] != s.term {
			return true
		}
	}
	return false
}

// termWhenHeld sends SIGTERM to the servers once one of them reports a
// held call (sluice_waiting_clients), unless done closes first.
func (s *docServers) termWhenHeld(done <-chan struct{}) {
	procs := append([]*proc(nil), s.procs...)
	for {
		for _, p := range procs {
			resp, err := http.Get("http://" + p.HTTP + "/metrics")
			if err != nil {
				continue
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if m := waitingRE.FindSubmatch(body); m != nil && string(m[1]) != "0" {
				for _, q := range procs {
					q.cmd.Process.Signal(syscall.SIGTERM)
				}
				return
			}
		}
		select {
		case <-done:
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// killNodes kills cluster nodes by id, as kill -9 would; the leadership
// changes that follow are the example's.
func (s *docServers) killNodes(t *testing.T, ids []string) {
	for _, id := range ids {
		p := s.nodes[id]
		if p == nil {
			t.Fatalf("doctest kill: no running node %q", id)
		}
		p.cmd.Process.Kill()
		<-p.exited
		s.forget(id)
	}
	s.term = ""
}

func (s *docServers) forget(id string) {
	p := s.nodes[id]
	delete(s.nodes, id)
	for i, q := range s.procs {
		if q == p {
			s.procs = append(s.procs[:i], s.procs[i+1:]...)
			break
		}
	}
}

// restartNodes stops cluster nodes that run (SIGTERM) and starts them all
// again with their arguments and data directories, then waits until every
// running node knows the same leader and has applied what it committed.
func (s *docServers) restartNodes(t *testing.T, ids []string) {
	for _, id := range ids {
		if p := s.nodes[id]; p != nil {
			p.stop()
			s.forget(id)
		}
	}
	for _, id := range ids {
		if s.args[id] == nil {
			t.Fatalf("doctest restart: no node %q", id)
		}
		p := startEnv(t, s.clock.env, s.args[id]...)
		s.procs = append(s.procs, p)
		s.nodes[id] = p
	}
	s.term = ""
	eventually(t, 30*time.Second, "the restarted nodes to agree on a leader and its log", func() bool {
		var first map[string]string
		for _, p := range s.procs {
			inf := s.info(t, p)
			if inf == nil || inf["leader_id"] == "" || inf["applied_index"] != inf["commit_index"] ||
				(first != nil && (inf["leader_id"] != first["leader_id"] || inf["applied_index"] != first["applied_index"])) {
				return false
			}
			first = inf
		}
		return true
	})
}

// addFile notes a file block: the whole file, or (before:) lines inserted
// into one written earlier.
func (e *docEnv) addFile(b docBlock) {
	if e.files == nil {
		e.files = map[string]string{}
	}
	text := strings.Join(b.lines, "\n") + "\n"
	if b.appends {
		text = e.files[b.writes] + text
	} else if b.before != "" {
		old, ok := e.files[b.writes]
		lines := strings.Split(old, "\n")
		at := -1
		for i, l := range lines {
			if strings.TrimSpace(l) == b.before {
				at = i
			}
		}
		if !ok || at < 0 {
			e.t.Fatalf("%s:%d: doctest file: %s has no line %q to insert before", b.file, b.line, b.writes, b.before)
		}
		text = strings.Join(lines[:at], "\n") + "\n" + text + strings.Join(lines[at:], "\n")
	}
	if _, ok := e.files[b.writes]; !ok {
		e.order = append(e.order, b.writes)
	}
	e.files[b.writes] = text
}

// writeFiles writes the doc's files into its directory, the ports the doc
// shows in them (127.0.0.1:6380, port=6380) turned into the servers'.
func (e *docEnv) writeFiles() {
	for _, name := range e.order {
		text := e.files[name]
		for d, r := range e.srv.ports {
			text = regexp.MustCompile(`\b`+d+`\b`).ReplaceAllString(text, r)
		}
		path := filepath.Join(e.dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			e.t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			e.t.Fatal(err)
		}
	}
}

// sluiceSrc is this repository, the checkout the docs' Go examples use.
var sluiceSrc, _ = filepath.Abs("..")

// goEnv is what a doc's Go program needs to build from the module cache
// the tests were built with, or why it cannot.
var goEnv = sync.OnceValues(func() ([]string, string) {
	out, err := exec.Command("go", "env", "GOROOT", "GOPATH", "GOMODCACHE", "GOCACHE").Output()
	f := strings.Fields(string(out))
	if err != nil || len(f) != 4 {
		return nil, "go is not on PATH"
	}
	return []string{"PATH=" + filepath.Join(f[0], "bin"), "GOPATH=" + f[1], "GOMODCACHE=" + f[2], "GOCACHE=" + f[3],
		"SLUICE_SRC=" + sluiceSrc, "GOPROXY=off", "GOFLAGS=-mod=mod", "GOTOOLCHAIN=local", "GOSUMDB=off"}, ""
})

// sluiceNodeLink returns a folder where @sluice-rl/sluice is this
// checkout's clients/node, for NODE_PATH, or "" if it cannot be made.
var sluiceNodeLink = sync.OnceValue(func() string {
	dir, err := os.MkdirTemp("", "sluice-doc-node")
	if err != nil {
		return ""
	}
	if os.Mkdir(filepath.Join(dir, "@sluice-rl"), 0o755) != nil ||
		os.Symlink(filepath.Join(sluiceSrc, "clients", "node"), filepath.Join(dir, "@sluice-rl", "sluice")) != nil {
		return ""
	}
	return dir
})

// docNeeds returns the environment for programs a block runs (go,
// python3-redis, node-modules, and this checkout's client packages
// sluice-python and sluice-node), or what this machine lacks to run them.
func docNeeds(names []string) (env []string, missing string) {
	for _, n := range names {
		switch n {
		case "go":
			e, why := goEnv()
			if why != "" {
				return nil, why
			}
			env = append(env, e...)
		case "python3-redis":
			py := findPython()
			if py == "" {
				return nil, noPython
			}
			env = append(env, "DOCTEST_PYTHON="+py)
		case "sluice-python":
			// The package from this checkout (clients/python), with redis-py.
			py := findPython()
			if py == "" {
				return nil, noPython
			}
			env = append(env, "DOCTEST_PYTHON="+py, "PYTHONPATH="+filepath.Join(sluiceSrc, "clients", "python", "src"))
		case "sluice-node":
			// The package from this checkout (clients/node) as
			// @sluice-rl/sluice, with ioredis from SLUICE_NODE_MODULES.
			dir, link := findNodeModules(), sluiceNodeLink()
			if _, err := exec.LookPath("node"); err != nil {
				return nil, "node is not installed"
			}
			if dir == "" {
				return nil, noNodeModules
			}
			if link == "" {
				return nil, "cannot link clients/node as @sluice-rl/sluice"
			}
			env = append(env, "NODE_PATH="+link+":"+filepath.Join(dir, "node_modules"))
		case "grpcurl":
			if _, err := exec.LookPath("grpcurl"); err != nil {
				return nil, "grpcurl is not installed: go install github.com/fullstorydev/grpcurl/cmd/grpcurl@v1.9.3 (.ci/run does this)"
			}
		case "node-modules":
			dir := findNodeModules()
			if _, err := exec.LookPath("node"); err != nil {
				return nil, "node is not installed"
			}
			if dir == "" {
				return nil, noNodeModules
			}
			env = append(env, "NODE_PATH="+filepath.Join(dir, "node_modules"))
		default:
			panic("doctest needs: unknown " + n)
		}
	}
	return env, ""
}

// mapPorts turns the doc's ports in s into the real ones.
func (s *docServers) mapPorts(x string) string {
	for d, r := range s.ports {
		x = strings.ReplaceAll(x, ":"+d, ":"+r)
	}
	return x
}

// unmapPorts turns the real ports in s back into the doc's.
func (e *docEnv) unmapPorts(s string) string {
	for d, r := range e.srv.ports {
		s = regexp.MustCompile(`:`+r+`\b`).ReplaceAllString(s, ":"+d)
	}
	return s
}

func (e *docEnv) environ() []string {
	var pairs []string
	for d, r := range e.srv.ports {
		pairs = append(pairs, d+"="+r)
	}
	sort.Strings(pairs)
	env := []string{"PATH=" + e.bin + ":" + os.Getenv("PATH"), "DOCTEST_PORTS=" + strings.Join(pairs, " "),
		"HOME=" + e.dir, "TERM=dumb", "LANG=C.UTF-8", "TZ=UTC"}
	for _, v := range e.extra {
		if dir, ok := strings.CutPrefix(v, "PATH="); ok {
			env[0] = "PATH=" + e.bin + ":" + dir + ":" + os.Getenv("PATH") // the wrappers stay first
			continue
		}
		env = append(env, v)
	}
	return append(env, e.srv.vars...)
}

// shell runs one command line as a terminal would: under a pseudo-terminal
// (script(1)), so that redis-cli formats its replies as for a person, with
// standard error beside standard output.
func (e *docEnv) shell(cmdline string, stdin string) (string, error) {
	f := filepath.Join(e.dir, ".doctest-cmd")
	// bash's /dev/tcp/host/port is a port the doc shows, too.
	cmdline = devTCPRE.ReplaceAllStringFunc(cmdline, func(m string) string {
		i := strings.LastIndexByte(m, '/')
		if r, ok := e.srv.ports[m[i+1:]]; ok {
			return m[:i+1] + r
		}
		return m
	})
	if err := os.WriteFile(f, []byte(cmdline+"\n"), 0o644); err != nil {
		e.t.Fatal(err)
	}
	// A loaded machine stretches a loop of redis-cli runs: beside the
	// other packages' tests and two CPU hogs, docs/cluster.md's quota
	// loop (twenty-odd redis-cli runs and ten quiet seconds) outlasted
	// two minutes.
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	var cmd *exec.Cmd
	if stdin == "" {
		cmd = exec.CommandContext(ctx, "script", "-qec", "bash ./.doctest-cmd", "/dev/null")
		// script's input stays open (and silent) until the command has
		// exited: at end of input script(1) winds down on its own, and
		// could then miss the command's last output.
		pr, pw, err := os.Pipe()
		if err != nil {
			e.t.Fatal(err)
		}
		defer pr.Close()
		defer pw.Close()
		cmd.Stdin = pr
	} else {
		cmd = exec.CommandContext(ctx, "bash", "./.doctest-cmd")
		cmd.Stdin = strings.NewReader(stdin)
	}
	cmd.Dir = e.dir
	cmd.Env = e.environ()
	out, err := cmd.CombinedOutput()
	s := strings.ReplaceAll(string(out), "\r\n", "\n")
	if ctx.Err() != nil {
		s += fmt.Sprintf("(killed after %v)\n", cmdTimeout)
	}
	return e.unmapPorts(s), err
}

// cmdTimeout bounds one command of a doc block.
const cmdTimeout = 5 * time.Minute

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
	heredoc := ""
	for i, l := range b.lines {
		ln := b.line + 1 + i
		if heredoc != "" {
			// A here-document's lines are part of its command.
			steps[len(steps)-1].cmd += "\n" + l
			if l == heredoc {
				heredoc = ""
			}
			continue
		}
		if cmd, ok := strings.CutPrefix(l, "$ "); ok {
			if m := heredocRE.FindStringSubmatch(cmd); m != nil {
				heredoc = m[1]
			}
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

// A matchWindow is what time-dependent placeholders are matched against:
// the tolerance of ~N, and the servers' clock when the command started
// and ended, for calendar placeholders.
type matchWindow struct {
	tol           float64
	before, after time.Time
}

// lineMatches compares one line of output with the doc's: <…> stands for
// any text, ~N for a number that depends on time, within tol of N (or a
// fifth of N), and {ms to end of day …} for a calendar figure
// (docclock_test.go).
func lineMatches(want, got string, w matchWindow) bool {
	if !placeRE.MatchString(want) {
		return want == got
	}
	var re strings.Builder
	var approx []float64
	var cal []calendarPlace
	var calAt []int // the capture group of each calendar placeholder
	re.WriteString("^")
	last := 0
	for _, m := range placeRE.FindAllStringIndex(want, -1) {
		re.WriteString(regexp.QuoteMeta(want[last:m[0]]))
		p := want[m[0]:m[1]]
		if strings.HasPrefix(p, "{") {
			c, err := parseCalendar(p)
			if err != nil {
				return false
			}
			cal, calAt = append(cal, c), append(calAt, len(approx)+len(cal)+1)
			re.WriteString(`(-?\d+)`)
		} else if strings.HasPrefix(p, "~") {
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
	groups := 0
	for i := 1; i < len(m); i++ {
		v, _ := strconv.ParseFloat(m[i], 64)
		if len(calAt) > 0 && calAt[0] == i {
			if !cal[0].matches(v, w.before, w.after) {
				return false
			}
			cal, calAt = cal[1:], calAt[1:]
			continue
		}
		n := approx[groups]
		groups++
		if math.Abs(v-n) > max(w.tol, math.Abs(n)/5) {
			return false
		}
	}
	return true
}

// outputMatches matches got against want, where a line "…" stands for any
// number of lines.
func outputMatches(want, got []string, w matchWindow) bool {
	if len(want) == 0 {
		return len(got) == 0
	}
	if want[0] == "…" {
		for i := 0; i <= len(got); i++ {
			if outputMatches(want[1:], got[i:], w) {
				return true
			}
		}
		return false
	}
	return len(got) > 0 && lineMatches(want[0], got[0], w) && outputMatches(want[1:], got[1:], w)
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
		// redis-cli at a prompt notes a reply that took half a second or
		// more ("(0.62s)"): how long depends on the machine, and the docs
		// show none.
		if l = strings.TrimRight(l, " \t\r"); l != authWarning && !elapsedRE.MatchString(l) {
			lines = append(lines, l)
		}
	}
	for len(lines) > 0 && lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	return lines
}

// elapsedRE is redis-cli's note of a slow reply at its prompt.
var elapsedRE = regexp.MustCompile(`^\(\d+\.\d\ds\)$`)

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
			// A file whose cluster changed leader on its own (a loaded
			// machine) runs again from the start, at most three times.
			var r docRun
			for attempt := 1; attempt <= 3; attempt++ {
				r = runDocFile(t, blocks)
				if len(r.failures) == 0 || !r.termMoved {
					break
				}
				t.Logf("attempt %d: a cluster elected a new leader during the examples; running %s again", attempt, file)
			}
			for _, f := range r.failures {
				t.Error(f)
			}
			total += r.total
			ran += r.ran
			commands += r.commands
			for _, s := range r.skipped {
				skipped[s]++
			}
		})
	}
	var reasons []string
	for r := range skipped {
		reasons = append(reasons, r)
	}
	sort.Strings(reasons)
	summary := fmt.Sprintf("doc examples: %d console blocks; %d ran and matched, %d commands; %d marked not to run:\n  %s",
		total, ran, commands, len(reasons), strings.Join(reasons, "\n  "))
	t.Log(summary)
	if path := os.Getenv("DOCTEST_SUMMARY"); path != "" {
		// go test shows a passing test's log only with -v: CI prints this file.
		if err := os.WriteFile(path, []byte(summary+"\n"), 0o644); err != nil {
			t.Error(err)
		}
	}
}

// A docRun is what one run of a file's examples found.
type docRun struct {
	total, ran, commands int
	skipped              []string
	failures             []string
	termMoved            bool // a cluster's leader changed while examples failed
}

func runDocFile(t *testing.T, blocks []docBlock) (r docRun) {
	e := newDocEnv(t)
	defer e.srv.stop()
	for _, b := range blocks {
		if b.writes != "" {
			e.addFile(b)
			continue
		}
		r.total++
		if b.skip != "" {
			r.skipped = append(r.skipped, b.file+":"+strconv.Itoa(b.line)+" "+b.skip)
			continue
		}
		env, missing := docNeeds(b.needs)
		if missing != "" {
			if os.Getenv("SLUICE_REQUIRE_TOOLS") != "" {
				r.failures = append(r.failures, fmt.Sprintf("%s:%d: %s; SLUICE_REQUIRE_TOOLS is set", b.file, b.line, missing))
			} else {
				r.skipped = append(r.skipped, fmt.Sprintf("%s:%d not run here: %s", b.file, b.line, missing))
			}
			continue
		}
		e.extra = env
		if b.fresh != nil || e.srv.procs == nil {
			// The servers may be given the doc's files (--envoy-config
			// ratelimit.yaml); their ports are mapped again below.
			e.writeFiles()
			e.startServers(b.fresh)
		}
		var kept docServers
		if b.aside != nil {
			kept, e.srv = e.srv, e.launch(b.aside)
		}
		if b.kill != nil {
			e.srv.killNodes(t, b.kill)
		}
		if b.restart != nil {
			e.srv.restartNodes(t, b.restart)
		}
		e.writeFiles()
		ok := e.runBlock(b, &r)
		if !ok && e.srv.termMoved(t) {
			r.termMoved = true
		}
		if b.aside != nil {
			e.srv.stop()
			e.srv = kept
		}
		if ok {
			r.ran++
		}
	}
	return r
}

// runBlock runs one console block's setup and commands, and says whether
// every command printed what the block shows.
func (e *docEnv) runBlock(b docBlock, r *docRun) bool {
	t := e.t
	for _, s := range b.setup {
		if out, err := e.shell(s, ""); err != nil {
			t.Fatalf("%s:%d: setup %q: %v\n%s", b.file, b.line, s, err, out)
		}
	}
	began := time.Now()
	if b.term {
		// SIGTERM once the block's call is held, not after a guessed delay.
		done := make(chan struct{})
		defer close(done)
		go e.srv.termWhenHeld(done)
	}
	ok := true
	for _, s := range blockSteps(t, b) {
		r.commands++
		if m := exportRE.FindStringSubmatch(s.cmd); m != nil && len(s.want) == 0 {
			// As in a terminal, an exported variable holds for the
			// commands after it, as long as they talk to the same servers.
			e.srv.vars = append(e.srv.vars, m[1]+"="+strings.Trim(m[2], `'"`))
			continue
		}
		w := matchWindow{before: e.srv.clock.now()}
		out, _ := e.shell(s.cmd, s.stdin)
		w.after = e.srv.clock.now()
		got := outputLines(out)
		w.tol = float64(time.Since(began).Milliseconds()) + 50
		if !outputMatches(s.want, got, w) {
			ok = false
			reportMismatch(b.file, s, got)
			r.failures = append(r.failures, fmt.Sprintf("%s:%d: %s\nthe doc shows:\n%s\nthe server printed:\n%s%s", b.file, s.line,
				strings.TrimSpace(s.cmd+" "+strings.ReplaceAll(s.stdin, "\n", "; ")),
				strings.Join(s.want, "\n"), strings.Join(got, "\n"), calendarNote(s.want, w)))
		}
	}
	return ok
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
