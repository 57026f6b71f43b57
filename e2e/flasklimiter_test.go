package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// flaskLimiter returns a function that runs testdata/flask_limiter_py.py
// (Flask-Limiter from Debian's python3-flask-limiter, over its
// python3-limits) with an environment variable, and returns what it
// printed. Without Flask-Limiter the test is skipped, saying why, or
// fails when SLUICE_REQUIRE_TOOLS is set, as runLimits does.
func flaskLimiter(t *testing.T) func(env string) string {
	t.Helper()
	py := python(t)
	if err := exec.Command(py, "-c", "import flask_limiter").Run(); err != nil {
		msg := "Flask-Limiter is not installed (apt-get install python3-flask-limiter; .ci/run does)"
		unavailable(t, "%s", msg)
	}
	return func(env string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, py, "testdata/flask_limiter_py.py")
		cmd.Env = append(os.Environ(), env)
		// Only stdout is the answer: a warning Python writes to stderr
		// is not part of it.
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("flask_limiter_py.py with %s: %v\n%s%s", env, err, out, stderr.Bytes())
		}
		return strings.TrimSpace(string(out))
	}
}

// Flask-Limiter, unchanged, configured as its documentation does (a
// default limit, decorated limits, a shared limit, a cost, a deduction on
// a 400, an exempt route; the fixed, moving and elastic fixed windows;
// X-RateLimit headers), against one sluice node and one redis-server side
// by side: every request gets the same status and headers from both.
func TestFlaskLimiterAsOnRedis(t *testing.T) {
	run := flaskLimiter(t)
	redisAddr := startRedis(t)
	p := single(t)
	want, got := run("SLUICE_PORT="+port(redisAddr)), run("SLUICE_PORT="+port(p.Resp))
	if got != want {
		t.Fatalf("Flask-Limiter answered differently:\n sluice %s\n  redis %s", got, want)
	}
	t.Logf("both answered %s", got)
}

// Three instances of a Flask app, each with its Flask-Limiter on a
// different node, share one limit of 50 an hour: 90 requests taking turns
// across them admit exactly 50, for the fixed and the moving window.
func TestFlaskLimiterExactAcrossThreeNodes(t *testing.T) {
	run := flaskLimiter(t)
	ms, _ := threeNodes(t)
	var ports []string
	for _, m := range ms {
		ports = append(ports, port(m.resp))
	}
	if got := run("SLUICE_PORTS=" + strings.Join(ports, ",")); got != `{"fixed-window": 50, "moving-window": 50}` {
		t.Fatalf("admitted through three nodes: %s (want 50 of each)", got)
	}
}
