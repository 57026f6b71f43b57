package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestBadBudgetsFileStopsTheNode: a --budgets file that does not parse
// stops the node before it serves, naming the file, the place and the
// reason, instead of starting with an empty tree.
func TestBadBudgetsFileStopsTheNode(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ name, content, want string }{
		{"syntax.json", "{\"budgets\": {\n  \"api\": {\"rate\": 10,, \"window\": \"minute\"}\n}}\n", "syntax.json:2:22: invalid character ','"},
		{"field.json", `{"budgets": {"api": {"sustained": {"rate": 10, "window": "minute"}, "bogus": 1}}}`, `field.json: budget 'api': budget config: unknown field "bogus"`},
		{"shape.json", `{"tree": {}}`, `shape.json: budget import: unknown field "tree"`},
	} {
		file := filepath.Join(dir, c.name)
		if err := writeFile(file, c.content); err != nil {
			t.Fatal(err)
		}
		out, err := runBinary("--resp-addr", "127.0.0.1:0", "--http-addr", "", "--raft-addr", "127.0.0.1:0",
			"--data-dir", t.TempDir(), "--budgets", file)
		ee, ok := err.(*exec.ExitError)
		if !ok || ee.ExitCode() == 0 || !strings.Contains(out, "--budgets "+dir+"/"+c.want) || strings.Contains(out, "msg=listening") {
			t.Errorf("%s: exit %v, want non-zero naming %q:\n%s", c.name, err, c.want, out)
		}
	}
}

// Rule files of the reload tests: the same descriptor refused always,
// then never limited, so that replies do not depend on the clock.
const (
	rulesDeny  = "domain: reload\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 0\n"
	rulesAllow = "domain: reload\ndescriptors:\n  - key: k\n    rate_limit:\n      unlimited: true\n"
	rulesBad   = "domain: reload\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 1\n"
)

// logCount returns how many lines of p's log contain s.
func logCount(p *proc, s string) int { return strings.Count(p.Log(), s) }

// TestSIGHUPReloadsEnvoyRulesOnTheLeader: kill -HUP of a 3-node cluster's
// leader re-reads its Envoy rule file: the node stays up and leader, the
// edited rules decide the next ShouldRateLimit call, and a file that no
// longer parses leaves the rules in force, logged at ERROR with the file
// and the reason.
func TestSIGHUPReloadsEnvoyRulesOnTheLeader(t *testing.T) {
	rules := filepath.Join(t.TempDir(), "rules.yaml")
	if err := writeFile(rules, rulesDeny); err != nil {
		t.Fatal(err)
	}
	ms, peerList := staticMembers(t, 3)
	for _, m := range ms {
		m.p = start(t, "--node-id", m.id, "--resp-addr", m.resp, "--raft-addr", m.raft, "--http-addr", "",
			"--data-dir", m.dir, "--bootstrap-peers", peerList,
			"--grpc-addr", "127.0.0.1:0", "--envoy-config", rules)
		m.c = client(t, m.resp)
	}
	l := leader(t, ms)
	term := l.info(t)["term"]
	r := dialRLS(t, l.p.GRPC)
	if got := r.must("reload", desc("k", "v")).OverallCode; got != over {
		t.Fatalf("before the edit: %v, want OVER_LIMIT", got)
	}

	// The edit, then SIGHUP.
	if err := writeFile(rules, rulesAllow); err != nil {
		t.Fatal(err)
	}
	hup := func() {
		t.Helper()
		if err := l.p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
	}
	hup()
	eventually(t, 10*time.Second, "the reload to be logged", func() bool {
		return strings.Contains(l.p.Log(), "msg=reloading signal=hangup") && strings.Contains(l.p.Log(), "msg=\"envoy configuration reloaded\"")
	})
	if got := r.must("reload", desc("k", "v")).OverallCode; got != ok {
		t.Fatalf("after the edit and SIGHUP: %v, want OK", got)
	}

	// A file that no longer parses: the rules in force stay.
	if err := writeFile(rules, rulesBad); err != nil {
		t.Fatal(err)
	}
	hup()
	eventually(t, 10*time.Second, "the refused reload to be logged", func() bool {
		log := l.p.Log()
		return strings.Contains(log, "level=ERROR msg=\"envoy configuration not reloaded: the rules in force stay\" path="+rules) &&
			strings.Contains(log, rules+":5: invalid rate limit unit 'fortnight'")
	})
	if got := r.must("reload", desc("k", "v")).OverallCode; got != ok {
		t.Fatalf("after a broken file: %v, want OK (the rules in force)", got)
	}

	// Still up, and still the leader: SIGHUP neither stopped the node nor
	// handed leadership over. (An election the machine's load causes
	// would show as a new term; none is caused by the signal.)
	select {
	case err := <-l.p.exited:
		t.Fatalf("the node exited on SIGHUP: %v", err)
	default:
	}
	for _, bad := range []string{"msg=stopping", "leadership transferred"} {
		if strings.Contains(l.p.Log(), bad) {
			t.Fatalf("SIGHUP made the node log %q", bad)
		}
	}
	if inf := l.info(t); inf["leader_id"] != l.id && inf["term"] == term {
		t.Fatalf("after SIGHUP the leader is %q in the same term %s", inf["leader_id"], term)
	}
}

// TestEnvoyRulesReloadWhenTheFileChanges: the rules are re-read when
// their files change on disk, also when a Kubernetes ConfigMap swaps the
// directory behind a symbolic link; a broken version is refused once and
// the rules in force stay.
func TestEnvoyRulesReloadWhenTheFileChanges(t *testing.T) {
	// A ConfigMap volume: rules.yaml -> ..data/rules.yaml, ..data -> a
	// timestamped directory that an update replaces.
	dir := t.TempDir()
	version := func(name, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := writeFile(filepath.Join(dir, name, "rules.yaml"), content); err != nil {
			t.Fatal(err)
		}
		tmp := filepath.Join(dir, "..data_tmp")
		os.Remove(tmp)
		if err := os.Symlink(name, tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil { // atomic, as kubelet does
			t.Fatal(err)
		}
	}
	version("..v1", rulesDeny)
	if err := os.Symlink("..data/rules.yaml", filepath.Join(dir, "rules.yaml")); err != nil {
		t.Fatal(err)
	}
	p := single(t, "--grpc-addr", "127.0.0.1:0", "--envoy-config", dir)
	r := dialRLS(t, p.GRPC)
	if got := r.must("reload", desc("k", "v")).OverallCode; got != over {
		t.Fatalf("v1: %v, want OVER_LIMIT", got)
	}
	version("..v2", rulesAllow)
	eventually(t, 15*time.Second, "the swapped rules to apply", func() bool {
		return r.must("reload", desc("k", "v")).OverallCode == ok
	})
	// The reload is logged as the new rules go into force; the log line
	// may reach the process's output a moment after the answer does.
	eventually(t, 15*time.Second, "the reload to be logged", func() bool {
		return strings.Contains(p.Log(), `msg="envoy configuration reloaded" path=`+dir+` trigger="file change"`)
	})
	version("..v3", rulesBad)
	eventually(t, 15*time.Second, "the broken version to be refused", func() bool {
		return logCount(p, "envoy configuration not reloaded") > 0
	})
	if got := r.must("reload", desc("k", "v")).OverallCode; got != ok {
		t.Fatalf("after a broken version: %v, want OK (the rules in force)", got)
	}
	// Polling does not repeat the same refusal every second.
	n := logCount(p, "envoy configuration not reloaded")
	version("..v4", rulesBad) // the same content under another directory
	version("..v5", rulesDeny)
	eventually(t, 15*time.Second, "the fixed rules to apply", func() bool {
		return r.must("reload", desc("k", "v")).OverallCode == over
	})
	if got := logCount(p, "envoy configuration not reloaded"); got != n {
		t.Fatalf("the same broken file was refused %d times in all, want %d", got, n)
	}
}

// TestOperatorLogs reads the logs of a real 3-node cluster: a normal start
// logs nothing above INFO and one line on each node naming the leader; a
// follower killed is reported by the leader once (at most twice a minute),
// not once per failed RPC, and once when it is back; a leadership change
// gives one INFO line on each node.
func TestOperatorLogs(t *testing.T) {
	ms, peerList := threeNodes(t)
	l := leader(t, ms)
	term := l.info(t)["term"]
	// One line on each node for this leader and term.
	lineFor := func(m *member, leaderID, term string) string {
		if m.id == leaderID {
			return "msg=\"became leader\" component=raft term=" + term + " leader_id=" + leaderID
		}
		return "msg=\"following leader\" component=raft term=" + term + " leader_id=" + leaderID
	}
	for _, m := range ms {
		want := lineFor(m, l.id, term)
		eventually(t, 10*time.Second, m.id+" to log the leader", func() bool { return logCount(m.p, want) == 1 })
		for _, bad := range []string{"level=WARN", "level=ERROR"} {
			if strings.Contains(m.p.Log(), bad) && l.info(t)["term"] == term {
				t.Fatalf("%s logged %s on a normal start:\n%s", m.id, bad, m.p.Log())
			}
		}
	}

	// Kill -9 a follower; watch the leader's log for a while.
	f := others(ms, l)[0]
	f.p.kill9()
	down := "peer=" + f.id + " raft=" + f.raft
	eventually(t, 10*time.Second, "the leader to report the peer down", func() bool {
		return logCount(l.p, "msg=\"peer unreachable\" component=raft "+down) == 1
	})
	// Raft retries the dead peer many times a second; over this window
	// the leader says so at most once more (the rule is: once, then at
	// most once a minute).
	window := time.Now().Add(15 * time.Second)
	for time.Now().Before(window) {
		time.Sleep(250 * time.Millisecond)
		if n := logCount(l.p, down); n > 2 {
			t.Fatalf("the leader logged the dead peer %d times:\n%s", n, l.p.Log())
		}
	}
	for _, m := range ms {
		if m != f && strings.Contains(m.p.Log(), "level=ERROR") {
			t.Fatalf("%s logged an ERROR for a dead follower:\n%s", m.id, m.p.Log())
		}
	}
	// Back: one line.
	f.start(t, peerList)
	if inf := l.info(t); inf["leader_id"] == l.id {
		eventually(t, 15*time.Second, "the leader to report the peer back", func() bool {
			return logCount(l.p, "msg=\"peer reachable again\" component=raft "+down) == 1 || l.info(t)["leader_id"] != l.id
		})
	}

	// A leadership change (the leader stops and hands over): one line on
	// each remaining node for the new leader and term.
	l = leader(t, ms)
	if err := l.p.stop(); err != nil {
		t.Fatal(err)
	}
	rest := others(ms, l)
	nl := leader(t, rest)
	nterm := nl.info(t)["term"]
	for _, m := range rest {
		want := lineFor(m, nl.id, nterm)
		eventually(t, 10*time.Second, m.id+" to log the new leader", func() bool { return logCount(m.p, want) == 1 })
	}
}
