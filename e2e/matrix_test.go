package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// The client matrix: every Redis client the registries here serve, each
// with its default options, against the real binary with a password and
// an ACL user. Each connects, authenticates both ways, sends an inline and
// a budget RL.ACQUIRE, CL.THROTTLE, a 100-call pipeline and a transaction,
// and gets an error reply as the client's own error type. The Node.js and
// Python clients run scripts in testdata/; .ci/run installs them.

const (
	matrixPass    = "hunter2"
	matrixUser    = "gateway" // role limiter, as an application would have
	matrixUserPwd = "gw-secret"
)

// matrixServer starts a node with a password and an ACL user, and the
// budget node acme/api (100 a minute per user).
func matrixServer(t *testing.T) *proc {
	t.Helper()
	h := sha256.Sum256([]byte(matrixUserPwd))
	acl := filepath.Join(t.TempDir(), "users.acl")
	if err := os.WriteFile(acl, []byte("user "+matrixUser+" limiter "+hex.EncodeToString(h[:])+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := single(t, "--requirepass", matrixPass, "--acl-file", acl)
	admin := redis.NewClient(&redis.Options{Addr: p.Resp, Password: matrixPass, MaxRetries: -1, ReadTimeout: 10 * time.Second})
	defer admin.Close()
	if err := admin.Do(context.Background(), "RL.BUDGET", "SET", "acme/api", "RATE", 100, "PER", "minute", "SCOPE", "user").Err(); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestMatrixGoRedis(t *testing.T) {
	p := matrixServer(t)
	ctx := context.Background()
	// Default options: RESP3 (HELLO 3 with AUTH), CLIENT SETINFO.
	def := redis.NewClient(&redis.Options{Addr: p.Resp, Password: matrixPass})
	defer def.Close()
	if who, err := def.Do(ctx, "ACL", "WHOAMI").Text(); err != nil || who != "default" {
		t.Fatalf("AUTH with the password: %q %v", who, err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: p.Resp, Username: matrixUser, Password: matrixUserPwd})
	defer rdb.Close()
	ci, err := rdb.ClientInfo(ctx).Result()
	if err != nil {
		t.Fatalf("CLIENT INFO does not parse: %v", err)
	}
	if ci.Resp != 3 || ci.User != matrixUser || !strings.HasPrefix(ci.LibName, "go-redis") {
		t.Fatalf("not the RESP3 path: %+v", ci)
	}
	name := "go-redis"
	want := func(what string, got any, err error, w string) {
		t.Helper()
		if err != nil || fmt.Sprint(got) != w {
			t.Fatalf("%s: %v %v, want %s", what, got, err, w)
		}
	}
	v, err := rdb.Do(ctx, "RL.ACQUIRE", name+":k", "RATE", 10, "BURST", 10).Slice()
	want("inline RL.ACQUIRE", v, err, "[1 9 10 0 100 go-redis:k]")
	v, err = rdb.Do(ctx, "RL.ACQUIRE", "acme/api", "KEY", name).Slice()
	want("budget RL.ACQUIRE", v, err, "[1 99 100 0 600 acme/api#go-redis]")
	cell, err := rdb.Do(ctx, "CL.THROTTLE", name+":cell", 15, 30, 60).Int64Slice()
	want("CL.THROTTLE", cell, err, "[0 16 15 -1 2]")
	cmds, err := rdb.Pipelined(ctx, func(pp redis.Pipeliner) error {
		for i := 0; i < 100; i++ {
			pp.Do(ctx, "RL.ACQUIRE", name+":pipe", "RATE", 1, "PER", "hour", "BURST", 60)
		}
		return nil
	})
	if err != nil || len(cmds) != 100 || admitted(cmds) != 60 {
		t.Fatalf("pipeline: %d replies, %d admitted, %v", len(cmds), admitted(cmds), err)
	}
	cmds, err = rdb.TxPipelined(ctx, func(pp redis.Pipeliner) error {
		for i := 0; i < 3; i++ {
			pp.Do(ctx, "RL.ACQUIRE", name+":tx", "RATE", 2, "PER", "hour")
		}
		return nil
	})
	if err != nil || len(cmds) != 3 {
		t.Fatalf("TxPipelined: %v %v", cmds, err)
	}
	var got []string
	for _, c := range cmds {
		v, err := c.(*redis.Cmd).Slice()
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprint(v[:3]))
	}
	if strings.Join(got, " ") != "[1 1 2] [1 0 2] [0 0 2]" {
		t.Fatalf("TxPipelined replies %v", got)
	}
	err = rdb.Do(ctx, "RL.ACQUIRE", name+":k", "RATE", 0).Err()
	var rerr redis.Error
	if !errors.As(err, &rerr) || err.Error() != "ERR RATE must be an integer between 1 and 1000000000000" {
		t.Fatalf("error reply: %T %v", err, err)
	}
	// Replies that are maps in Redis are maps in RESP3.
	q, err := rdb.Do(ctx, "RL.QUOTA", name+":q", "QUOTA", 5, "PER", "day").Result()
	if m, ok := q.(map[any]any); err != nil || !ok || m["remaining"] != int64(5) {
		t.Fatalf("RL.QUOTA in RESP3: %#v %v", q, err)
	}
	bad := redis.NewClient(&redis.Options{Addr: p.Resp, Password: "wrong"})
	defer bad.Close()
	if err := bad.Ping(ctx).Err(); err == nil || !strings.HasPrefix(err.Error(), "WRONGPASS") {
		t.Fatalf("wrong password: %v", err)
	}
}

func admitted(cmds []redis.Cmder) int {
	n := 0
	for _, c := range cmds {
		if v, err := c.(*redis.Cmd).Slice(); err == nil && v[0] == int64(1) {
			n++
		}
	}
	return n
}

func TestMatrixRueidis(t *testing.T) {
	p := matrixServer(t)
	ctx := context.Background()
	// Default options: RESP3 with client-side caching (CLIENT TRACKING ON
	// OPTIN at connect), no AlwaysRESP2, no DisableCache.
	def, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{p.Resp}, Password: matrixPass})
	if err != nil {
		t.Fatalf("rueidis with the password: %v", err)
	}
	defer def.Close()
	if who, err := def.Do(ctx, def.B().Arbitrary("ACL", "WHOAMI").Build()).ToString(); err != nil || who != "default" {
		t.Fatalf("ACL WHOAMI: %q %v", who, err)
	}
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{p.Resp}, Username: matrixUser, Password: matrixUserPwd})
	if err != nil {
		t.Fatalf("rueidis with an ACL user: %v", err)
	}
	defer c.Close()
	name := "rueidis"
	cmd := func(args ...string) rueidis.Completed { return c.B().Arbitrary(args[0]).Args(args[1:]...).Build() }
	render := func(r rueidis.RedisResult) string {
		msgs, err := r.ToArray()
		if err != nil {
			return "error: " + err.Error()
		}
		var out []string
		for _, m := range msgs {
			if n, err := m.AsInt64(); err == nil {
				out = append(out, fmt.Sprint(n))
			} else if s, err := m.ToString(); err == nil {
				out = append(out, s)
			}
		}
		return "[" + strings.Join(out, " ") + "]"
	}
	for _, tc := range []struct{ args, want string }{
		{"RL.ACQUIRE rueidis:k RATE 10 BURST 10", "[1 9 10 0 100 rueidis:k]"},
		{"RL.ACQUIRE acme/api KEY rueidis", "[1 99 100 0 600 acme/api#rueidis]"},
		{"CL.THROTTLE rueidis:cell 15 30 60", "[0 16 15 -1 2]"},
	} {
		if got := render(c.Do(ctx, cmd(strings.Fields(tc.args)...))); got != tc.want {
			t.Fatalf("%s: %s, want %s", tc.args, got, tc.want)
		}
	}
	info, err := c.Do(ctx, cmd("CLIENT", "INFO")).ToString()
	if err != nil || !strings.Contains(info, " resp=3 ") || !strings.Contains(info, " flags=t ") || !strings.Contains(info, " lib-name=rueidis") {
		t.Fatalf("not the RESP3 path with tracking: %q %v", info, err)
	}
	var pipe rueidis.Commands
	for i := 0; i < 100; i++ {
		pipe = append(pipe, cmd("RL.ACQUIRE", name+":pipe", "RATE", "1", "PER", "hour", "BURST", "60"))
	}
	n := 0
	for _, r := range c.DoMulti(ctx, pipe...) {
		if strings.HasPrefix(render(r), "[1 ") {
			n++
		}
	}
	if n != 60 {
		t.Fatalf("pipeline admitted %d, want 60", n)
	}
	err = c.Dedicated(func(d rueidis.DedicatedClient) error {
		rs := d.DoMulti(ctx, d.B().Multi().Build(),
			cmd("RL.ACQUIRE", name+":tx", "RATE", "2", "PER", "hour"),
			cmd("RL.ACQUIRE", name+":tx", "RATE", "2", "PER", "hour"),
			cmd("RL.ACQUIRE", name+":tx", "RATE", "2", "PER", "hour"),
			d.B().Exec().Build())
		exec, err := rs[4].ToArray()
		if err != nil || len(exec) != 3 {
			return fmt.Errorf("EXEC: %v %v", exec, err)
		}
		var firsts []int64
		for _, m := range exec {
			a, _ := m.AsIntSlice()
			if len(a) == 0 {
				vs, _ := m.ToArray()
				v, _ := vs[0].AsInt64()
				firsts = append(firsts, v)
				continue
			}
			firsts = append(firsts, a[0])
		}
		if fmt.Sprint(firsts) != "[1 1 0]" {
			return fmt.Errorf("EXEC replies %v", firsts)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("transaction: %v", err)
	}
	err = c.Do(ctx, cmd("RL.ACQUIRE", name+":k", "RATE", "0")).Error()
	// (rueidis drops the ERR code from the text.)
	if re, ok := rueidis.IsRedisErr(err); !ok || re.Error() != "RATE must be an integer between 1 and 1000000000000" {
		t.Fatalf("error reply: %T %v", err, err)
	}
	// Client-side caching of a sluice reply is refused, clearly, and
	// nothing is cached: the next DoCache asks the server again.
	peek := rueidis.Cacheable(cmd("RL.PEEK", name+":k", "COST", "0"))
	for i := 0; i < 2; i++ {
		err := c.DoCache(ctx, peek, time.Minute).Error()
		if re, ok := rueidis.IsRedisErr(err); !ok || !strings.HasPrefix(re.Error(), "sluice replies cannot be cached client-side") {
			t.Fatalf("DoCache %d: %v", i, err)
		}
	}
	if _, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{p.Resp}, Password: "wrong"}); err == nil || !strings.Contains(err.Error(), "WRONGPASS") {
		t.Fatalf("wrong password: %v", err)
	}
}

const noNodeModules = "the npm packages redis and ioredis are not installed: npm install --prefix DIR redis ioredis, then SLUICE_NODE_MODULES=DIR (.ci/run does this)"

// findNodeModules returns the folder holding node_modules with redis and
// ioredis (SLUICE_NODE_MODULES, set by .ci/run), or "".
func findNodeModules() string {
	dir := os.Getenv("SLUICE_NODE_MODULES")
	for _, pkg := range []string{"redis", "ioredis"} {
		if _, err := os.Stat(filepath.Join(dir, "node_modules", pkg, "package.json")); dir == "" || err != nil {
			return ""
		}
	}
	return dir
}

// nodeModules returns node and findNodeModules' folder.
func nodeModules(t *testing.T) (node, dir string) {
	t.Helper()
	node = requireTool(t, "node")
	if dir = findNodeModules(); dir == "" {
		unavailable(t, "%s", noNodeModules)
	}
	return node, dir
}

// runScript runs a matrix script and fails the test with its output
// unless every check passed.
func runScript(t *testing.T, p *proc, env []string, name string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), append(env, "SLUICE_PORT="+port(p.Resp), "SLUICE_PASSWORD="+matrixPass,
		"SLUICE_ACL_USER="+matrixUser, "SLUICE_ACL_PASS="+matrixUserPwd)...)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "ok ") || strings.Contains(string(out), "FAIL") {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
	t.Logf("%s", out)
}

func TestMatrixNodeRedis(t *testing.T) {
	node, dir := nodeModules(t)
	p := matrixServer(t)
	runScript(t, p, []string{"NODE_PATH=" + filepath.Join(dir, "node_modules"), "SLUICE_CLIENT=node-redis"}, node, "testdata/clients.js")
}

func TestMatrixIORedis(t *testing.T) {
	node, dir := nodeModules(t)
	p := matrixServer(t)
	runScript(t, p, []string{"NODE_PATH=" + filepath.Join(dir, "node_modules"), "SLUICE_CLIENT=ioredis"}, node, "testdata/clients.js")
}

const noPython = "no python3 with redis-py (apt-get install python3-redis, or SLUICE_PYTHON)"

// findPython returns an interpreter that imports redis, or "" (Debian's
// python3-redis is under /usr/bin/python3, which another python3 on PATH
// may hide).
var findPython = sync.OnceValue(func() string {
	for _, py := range []string{os.Getenv("SLUICE_PYTHON"), "/usr/bin/python3", "python3"} {
		if py != "" && exec.Command(py, "-c", "import redis").Run() == nil {
			return py
		}
	}
	return ""
})

// python returns findPython's interpreter.
func python(t *testing.T) string {
	t.Helper()
	py := findPython()
	if py == "" {
		unavailable(t, "%s", noPython)
	}
	return py
}

func TestMatrixRedisPy(t *testing.T) {
	py := python(t)
	p := matrixServer(t)
	runScript(t, p, nil, py, "testdata/clients.py")
}

func TestMatrixRedisCLI(t *testing.T) {
	cli := requireTool(t, "redis-cli")
	p := matrixServer(t)
	run := func(stdin string, args ...string) string {
		t.Helper()
		cmd := exec.Command(cli, append([]string{"-p", port(p.Resp), "--no-auth-warning"}, args...)...)
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("redis-cli %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	if got := run("", "-a", matrixPass, "ACL", "WHOAMI"); got != "default" {
		t.Fatalf("AUTH with the password: %s", got)
	}
	user := []string{"--user", matrixUser, "--pass", matrixUserPwd}
	for _, tc := range []struct{ args, want string }{
		{"ACL WHOAMI", matrixUser},
		{"RL.ACQUIRE cli:k RATE 10 BURST 10", "1\n9\n10\n0\n100\ncli:k"},
		{"RL.ACQUIRE acme/api KEY cli", "1\n99\n100\n0\n600\nacme/api#cli"},
		{"CL.THROTTLE cli:cell 15 30 60", "0\n16\n15\n-1\n2"},
		{"RL.ACQUIRE cli:k RATE 0", "ERR RATE must be an integer between 1 and 1000000000000"},
	} {
		if got := run("", append(user, strings.Fields(tc.args)...)...); got != tc.want {
			t.Fatalf("%s:\n%s\nwant\n%s", tc.args, got, tc.want)
		}
	}
	if got := run("", "-a", "wrong", "PING"); !strings.Contains(got, "WRONGPASS") {
		t.Fatalf("wrong password: %s", got)
	}
	// A 100-call pipeline (--pipe sends the commands in one stream) and a
	// transaction (commands from stdin go over one connection).
	var pipe strings.Builder
	for i := 0; i < 100; i++ {
		pipe.WriteString("RL.ACQUIRE cli:pipe RATE 1 PER hour BURST 60\r\n")
	}
	if got := run(pipe.String(), append(user, "--pipe")...); !strings.Contains(got, "errors: 0, replies: 100") {
		t.Fatalf("--pipe: %s", got)
	}
	if got := run("", append(user, "RL.PEEK", "cli:pipe", "COST", "0")...); !strings.HasPrefix(got, "1\n0\n60\n") {
		t.Fatalf("after the pipeline: %s", got)
	}
	tx := "MULTI\nRL.ACQUIRE cli:tx RATE 2 PER hour\nRL.ACQUIRE cli:tx RATE 2 PER hour\nRL.ACQUIRE cli:tx RATE 2 PER hour\nEXEC\n"
	if got := run(tx, user...); !strings.HasPrefix(got, "OK\nQUEUED\nQUEUED\nQUEUED\n1\n1\n2\n0\n") || !strings.Contains(got, "\n0\n0\n2\n") {
		t.Fatalf("transaction:\n%s", got)
	}

	// --scan lists the live buckets, --pattern filters them. (A bucket
	// that refilled is forgotten within seconds: cli:k and cli:cell may be
	// gone; cli:pipe and cli:tx refill in an hour.)
	admin := []string{"-a", matrixPass}
	run("", append(user, "RL.ACQUIRE", "acme/api", "KEY", "cli-scan", "COST", "100")...) // refills in a minute
	seen := map[string]int{}
	for _, k := range strings.Fields(run("", append(admin, "--scan", "--pattern", "cli:*")...)) {
		seen[k]++
		if !strings.HasPrefix(k, "cli:") || seen[k] > 1 {
			t.Fatalf("--scan --pattern cli:* returned %q (%d times)", k, seen[k])
		}
	}
	if seen["cli:pipe"] != 1 || seen["cli:tx"] != 1 {
		t.Fatalf("--scan: %v", seen)
	}
	if got := run("", append(admin, "--scan", "--pattern", "acme/*")...); !strings.Contains(got, "acme/api#cli-scan") {
		t.Fatalf("--scan budget buckets: %q", got)
	}

	// --stat reads INFO: keys from # Keyspace, blocked from blocked_clients.
	// Buckets may be forgotten meanwhile: keys lies between DBSIZE before
	// and after.
	before := run("", append(admin, "DBSIZE")...)
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	stat := []string{cli, "-p", port(p.Resp), "-a", matrixPass, "--no-auth-warning", "--stat", "-i", "0.2"}
	if sb, err := exec.LookPath("stdbuf"); err == nil {
		stat = append([]string{sb, "-oL"}, stat...) // line by line, not a block at exit
	}
	out, _ := exec.CommandContext(ctx, stat[0], stat[1:]...).CombinedOutput()
	after := run("", append(admin, "DBSIZE")...)
	lo, hi := atoi(t, after), atoi(t, before)
	rows := regexp.MustCompile(`(?m)^(\d+)\s+([\d.]+[KMG]?)\s+(\d+)\s+(\d+)\s+(\d+) \(`).FindAllStringSubmatch(string(out), -1)
	if len(rows) == 0 || !strings.Contains(string(out), "keys") {
		t.Fatalf("--stat:\n%s", out)
	}
	for _, row := range rows {
		if k := atoi(t, row[1]); k < lo || k > hi || row[4] != "0" {
			t.Fatalf("--stat row %q: keys not within DBSIZE %d…%d, or blocked not 0:\n%s", row[0], lo, hi, out)
		}
	}

	// Hints: redis-cli builds them from COMMAND DOCS' arguments. Its help
	// (interactive, under a terminal) prints the same text, which must be
	// each command's syntax.
	docs := run("", append(admin, "COMMAND", "DOCS", "RL.ACQUIRE")...)
	for _, w := range []string{"arguments", "RATE", "pure-token", "DRYRUN", "optional"} {
		if !strings.Contains(docs, w) {
			t.Fatalf("COMMAND DOCS RL.ACQUIRE lacks %q:\n%s", w, docs)
		}
	}
	if script, err := exec.LookPath("script"); err == nil {
		// TERM=dumb: linenoise then reads plain lines instead of asking
		// the terminal where its cursor is (which nothing would answer).
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		help := exec.CommandContext(ctx, script, "-qec", cli+" -p "+port(p.Resp)+" -a "+matrixPass+" --no-auth-warning", "/dev/null")
		help.Env = append(os.Environ(), "TERM=dumb")
		help.Stdin = strings.NewReader("help RL.ACQUIRE\nhelp CL.THROTTLE\nquit\n")
		raw, err := help.CombinedOutput()
		out := regexp.MustCompile(`\x1b\[[0-9;]*m`).ReplaceAll(raw, nil)
		for _, w := range []string{
			"RL.ACQUIRE key RATE n [PER unit] [BURST n] [ALGO name] [QUOTA n PER period [TZ zone]] [COST n] [WAIT ms] [DRYRUN]|path [KEY subject] [COST n] [WAIT ms] [DRYRUN]",
			"CL.THROTTLE key max_burst count_per_period period [quantity]",
			"group: module",
		} {
			if !strings.Contains(string(out), w) {
				t.Fatalf("redis-cli help (under a terminal) lacks %q: %v\n%s", w, err, out)
			}
		}
	} else {
		t.Log("no script(1) to give redis-cli a terminal: hints checked through COMMAND DOCS only")
	}
}

func TestMatrixRedisBenchmark(t *testing.T) {
	bench := requireTool(t, "redis-benchmark")
	p := matrixServer(t)
	for _, args := range [][]string{
		{"-a", matrixPass, "-t", "ping", "-n", "2000", "-c", "4"},
		{"--user", matrixUser, "-a", matrixUserPwd, "-n", "5000", "-c", "10", "-r", "100000", "RL.ACQUIRE", "bench:__rand_int__", "RATE", "100"},
		{"--user", matrixUser, "-a", matrixUserPwd, "-n", "5000", "-c", "10", "-P", "100", "-r", "1000", "RL.ACQUIRE", "acme/api", "KEY", "u:__rand_int__"},
		{"--user", matrixUser, "-a", matrixUserPwd, "-n", "5000", "-c", "10", "-P", "100", "-r", "1000", "CL.THROTTLE", "bench:cell:__rand_int__", "15", "30", "60"},
	} {
		out, err := exec.Command(bench, append([]string{"-p", port(p.Resp), "-q"}, args...)...).CombinedOutput()
		s := strings.ReplaceAll(string(out), "\r", "\n")
		if err != nil || !strings.Contains(s, "requests per second") || strings.Contains(s, "ERR") || strings.Contains(s, "rror") {
			t.Fatalf("redis-benchmark %v: %v\n%s", args, err, s)
		}
	}
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	var n int
	if _, err := fmt.Sscan(strings.TrimPrefix(s, "(integer) "), &n); err != nil {
		t.Fatalf("not a number: %q", s)
	}
	return n
}
