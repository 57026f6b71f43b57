package e2e

import (
	"context"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
)

// closeDur reports whether two durations a GCRA script computed from
// TIME differ by no more than the time between the two servers' calls:
// up to half a second on a loaded machine (CI saw 70 ms), still a
// twelfth of the 6 s a token of these limits stands for, so a figure off
// by a token cannot pass.
func closeDur(a, b time.Duration) bool {
	return math.Abs(float64(a-b)) <= float64(500*time.Millisecond)
}

// go-redis/redis_rate, unchanged, against one sluice node and one
// redis-server side by side: its documented Allow, AllowN and AllowAtMost
// give the same decisions and remaining counts from both, and retry and
// reset figures within the time between the two calls.
func TestRedisRateAsOnRedis(t *testing.T) {
	ctx := context.Background()
	redisAddr := startRedis(t)
	p := single(t)
	rr := redis.NewClient(&redis.Options{Addr: redisAddr, Protocol: 2})
	rs := redis.NewClient(&redis.Options{Addr: p.Resp, Protocol: 2})
	t.Cleanup(func() { rr.Close(); rs.Close() })
	lr, ls := redis_rate.NewLimiter(rr), redis_rate.NewLimiter(rs)
	limit := redis_rate.PerMinute(10)
	type step struct {
		name string
		do   func(l *redis_rate.Limiter, key string) (*redis_rate.Result, error)
	}
	steps := []step{}
	for range 12 {
		steps = append(steps, step{"Allow", func(l *redis_rate.Limiter, k string) (*redis_rate.Result, error) { return l.Allow(ctx, k, limit) }})
	}
	steps = append(steps,
		step{"AllowN 3", func(l *redis_rate.Limiter, k string) (*redis_rate.Result, error) {
			return l.AllowN(ctx, k+"n", limit, 3)
		}},
		step{"AllowN 8", func(l *redis_rate.Limiter, k string) (*redis_rate.Result, error) {
			return l.AllowN(ctx, k+"n", limit, 8)
		}},
		step{"AllowAtMost 8", func(l *redis_rate.Limiter, k string) (*redis_rate.Result, error) {
			return l.AllowAtMost(ctx, k+"n", limit, 8)
		}},
		step{"AllowAtMost 5", func(l *redis_rate.Limiter, k string) (*redis_rate.Result, error) {
			return l.AllowAtMost(ctx, k+"n", limit, 5)
		}},
	)
	for i, st := range steps {
		want, err := st.do(lr, "user:1")
		if err != nil {
			t.Fatalf("step %d %s on redis-server: %v", i, st.name, err)
		}
		got, err := st.do(ls, "user:1")
		if err != nil {
			t.Fatalf("step %d %s on sluice: %v", i, st.name, err)
		}
		if got.Allowed != want.Allowed || got.Remaining != want.Remaining || !closeDur(got.RetryAfter, want.RetryAfter) || !closeDur(got.ResetAfter, want.ResetAfter) {
			t.Errorf("step %d %s:\n sluice %+v\n  redis %+v", i, st.name, *got, *want)
		}
	}
	if err := ls.Reset(ctx, "user:1"); err != nil {
		t.Fatal(err)
	}
	if res, err := ls.Allow(ctx, "user:1", limit); err != nil || res.Remaining != 9 {
		t.Fatalf("after Reset: %+v %v", res, err)
	}
}

// Three instances of redis_rate, each connected to a different node of a
// cluster, share one limit: calls interleaved across them admit exactly
// the limit, as one Redis would.
func TestRedisRateExactAcrossThreeNodes(t *testing.T) {
	ctx := context.Background()
	ms, _ := threeNodes(t)
	var ls []*redis_rate.Limiter
	for _, m := range ms {
		c := redis.NewClient(&redis.Options{Addr: m.resp, Protocol: 2, MaxRetries: -1})
		t.Cleanup(func() { c.Close() })
		ls = append(ls, redis_rate.NewLimiter(c))
	}
	limit := redis_rate.PerHour(50)
	admitted, retries := 0, 0
	for i := 0; i < 90; {
		res, err := ls[i%3].Allow(ctx, "api:key", limit)
		if err != nil {
			// TRYAGAIN (an election, a member list not agreed on yet):
			// the call was not decided; ask again, a bounded number of
			// times.
			if retries++; retries > 500 {
				t.Fatalf("call %d through %s: %v (after %d retries)", i, ms[i%3].id, err, retries)
			}
			time.Sleep(20 * time.Millisecond)
			continue
		}
		admitted += res.Allowed
		i++
	}
	if admitted != 50 {
		t.Fatalf("admitted %d of 90 calls through three nodes, limit 50", admitted)
	}
}

// rate-limiter-flexible and rate-limit-redis (npm, SLUICE_NODE_MODULES),
// unchanged, against one sluice node and one redis-server: every call
// (consume, get, penalty, reward, delete, block; increment, decrement,
// resetKey) answers the same from both, times to the second.
func TestNodeRedisLibrariesAsOnRedis(t *testing.T) {
	run := nodeLibraries(t)
	redisAddr := startRedis(t)
	p := single(t)
	want, got := run("SLUICE_PORT="+port(redisAddr)), run("SLUICE_PORT="+port(p.Resp))
	if got != want {
		t.Fatalf("the libraries' answers differ:\n sluice %s\n  redis %s", got, want)
	}
	t.Logf("both answered %s", got)
}

// nodeLibraries returns a function that runs testdata/redislibs.js with
// an environment variable, and its output.
func nodeLibraries(t *testing.T) func(env string) string {
	t.Helper()
	node, dir := nodeModules(t)
	for _, pkg := range []string{"rate-limiter-flexible", "rate-limit-redis", "express-rate-limit", "express"} {
		if _, err := os.Stat(filepath.Join(dir, "node_modules", pkg, "package.json")); err != nil {
			msg := "npm package " + pkg + " is not installed in SLUICE_NODE_MODULES (.ci/run installs it)"
			unavailable(t, "%s", msg)
		}
	}
	return func(env string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, node, "testdata/redislibs.js")
		cmd.Env = append(os.Environ(), "NODE_PATH="+filepath.Join(dir, "node_modules"), env)
		out, err := cmd.CombinedOutput()
		if err != nil || strings.Contains(string(out), "FAIL") {
			t.Fatalf("redislibs.js with %s: %v\n%s", env, err, out)
		}
		return strings.TrimSpace(string(out))
	}
}

// Three instances of rate-limiter-flexible and of rate-limit-redis, each
// connected to a different node, share one limit of 50 exactly: 90 calls
// interleaved across them admit 50 (fixed windows, as both count).
func TestNodeRedisLibrariesExactAcrossThreeNodes(t *testing.T) {
	run := nodeLibraries(t)
	ms, _ := threeNodes(t)
	var ports []string
	for _, m := range ms {
		ports = append(ports, port(m.resp))
	}
	if got := run("SLUICE_PORTS=" + strings.Join(ports, ",")); got != `{"flexible":50,"redisStore":50,"express":50}` {
		t.Fatalf("admitted through three nodes: %s (want 50 of each)", got)
	}
}

// runLimits runs testdata/limits_py.py (Python's limits, from Debian's
// python3-limits) with an environment variable, and returns its output.
func runLimits(t *testing.T, env string) string {
	t.Helper()
	py := python(t)
	if err := exec.Command(py, "-c", "import limits").Run(); err != nil {
		msg := "Python's limits and redis-py are not installed (apt-get install python3-limits python3-redis; .ci/run does)"
		unavailable(t, "%s", msg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, "testdata/limits_py.py")
	cmd.Env = append(os.Environ(), env)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("limits_py.py with %s: %v\n%s", env, err, out)
	}
	return strings.TrimSpace(string(out))
}

// Python's limits (slowapi's and Flask-Limiter's engine), unchanged,
// against one sluice node and one redis-server: its fixed and moving
// windows' hits, tests, window stats and clears answer the same.
func TestPythonLimitsAsOnRedis(t *testing.T) {
	redisAddr := startRedis(t)
	p := single(t)
	want, got := runLimits(t, "SLUICE_PORT="+port(redisAddr)), runLimits(t, "SLUICE_PORT="+port(p.Resp))
	if got != want {
		t.Fatalf("limits answered differently:\n sluice %s\n  redis %s", got, want)
	}
	t.Logf("both answered %s", got)
}

// Three instances of limits, each on a different node, share one limit
// of 50 exactly, for the fixed and the moving window.
func TestPythonLimitsExactAcrossThreeNodes(t *testing.T) {
	ms, _ := threeNodes(t)
	var ports []string
	for _, m := range ms {
		ports = append(ports, port(m.resp))
	}
	if got := runLimits(t, "SLUICE_PORTS="+strings.Join(ports, ",")); got != `{"fixed": 50, "moving": 50}` {
		t.Fatalf("admitted through three nodes: %s (want 50 of each)", got)
	}
}

// A hand-written Lua token bucket (TIME, HMGET, HSET, PEXPIRE), run as
// applications run one (go-redis's Script: EVALSHA, then EVAL on
// NOSCRIPT) from three clients, each connected to a different node: calls
// interleaved across them admit exactly the bucket's capacity, as one
// Redis would. The bucket refills a token in about three hours, and it
// keeps whole tokens, so nothing refills while the test runs.
func TestHandWrittenTokenBucketExactAcrossThreeNodes(t *testing.T) {
	ctx := context.Background()
	ms, _ := threeNodes(t)
	bucket := redis.NewScript(tokenBucketLua)
	var cs []*redis.Client
	for _, m := range ms {
		c := redis.NewClient(&redis.Options{Addr: m.resp, Protocol: 2, MaxRetries: -1})
		t.Cleanup(func() { c.Close() })
		cs = append(cs, c)
	}
	admitted, retries := 0, 0
	for i := 0; i < 90; {
		v, err := bucket.Run(ctx, cs[i%3], []string{"tb:shared"}, 50, "0.0001", 1).Int64Slice()
		if err != nil {
			// TRYAGAIN (an election, a member list not agreed on yet):
			// the call was not decided; ask again, a bounded number of
			// times.
			if retries++; retries > 500 {
				t.Fatalf("call %d through %s: %v (after %d retries)", i, ms[i%3].id, err, retries)
			}
			time.Sleep(20 * time.Millisecond)
			continue
		}
		admitted += int(v[0])
		i++
	}
	if admitted != 50 {
		t.Fatalf("admitted %d of 90 calls through three nodes, capacity 50", admitted)
	}
}
