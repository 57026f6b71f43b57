package main

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/server"
)

func noEnv(string) string { return "" }

func TestHashPassword(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"hash-password"}, noEnv, strings.NewReader("s3cret\n"), &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if got := strings.TrimSpace(out.String()); got != "1ec1c26b50d5d3c58d9583181af8076655fe00756bf7285940ba3670f99fcba0" { // sha256("s3cret")
		t.Fatalf("hash %q", got)
	}
	if code := run([]string{"hash-password"}, noEnv, strings.NewReader("\n"), &out, &errb); code != 2 {
		t.Fatalf("empty password: exit %d", code)
	}
}

func TestInvalidSettingsExit2(t *testing.T) {
	var out, errb bytes.Buffer
	code := run([]string{"--maxclients", "0"}, noEnv, nil, &out, &errb)
	if code != 2 || !strings.Contains(errb.String(), "--maxclients: must be between 1 and 1000000, got 0") {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
}

// TestBadFlagIsOneLine: a flag that is unknown or has a bad value gets one
// line naming it (as the docs write it), what it got and what it takes,
// and exit status 2 — never the whole usage.
func TestBadFlagIsOneLine(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--bogus"}, "sluice: unknown flag --bogus (see sluice --help)\n"},
		{[]string{"-bogus"}, "sluice: unknown flag --bogus (see sluice --help)\n"},
		{[]string{"--sync-interval", "5"}, "sluice: --sync-interval: \"5\" is not a duration; use 100ms, 1s, 2m\n"},
		{[]string{"--apply-timeout=soon"}, "sluice: --apply-timeout: \"soon\" is not a duration; use 100ms, 1s, 2m\n"},
		{[]string{"--max-buckets", "many"}, "sluice: --max-buckets: \"many\" is not a whole number\n"},
		{[]string{"--timeout", "forever"}, "sluice: --timeout: \"forever\" is not a number of seconds or a duration; use 30, 30s, 5m\n"},
		{[]string{"--pprof=maybe"}, "sluice: --pprof: \"maybe\" is not a boolean; use true or false\n"},
		{[]string{"--data-dir"}, "sluice: --data-dir needs a value\n"},
	} {
		var out, errb bytes.Buffer
		code := run(c.args, noEnv, nil, &out, &errb)
		if code != 2 || errb.String() != c.want || out.Len() != 0 {
			t.Errorf("%v: exit %d, stderr %q, want 2 and %q", c.args, code, errb.String(), c.want)
		}
	}
}

// TestTimeoutsTakeDurations: --timeout and --auth-timeout take whole
// seconds, as Redis's timeout does, or a Go duration.
func TestTimeoutsTakeDurations(t *testing.T) {
	for _, c := range []struct {
		arg  string
		want time.Duration
	}{{"30", 30 * time.Second}, {"30s", 30 * time.Second}, {"2m", 2 * time.Minute}, {"1500ms", 2 * time.Second}} {
		cfg, err := server.Load([]string{"--timeout", c.arg, "--auth-timeout", c.arg}, noEnv, io.Discard)
		if err != nil || cfg.Timeout != c.want || cfg.AuthTimeout != c.want {
			t.Errorf("--timeout %s: %v %v %v, want %v", c.arg, err, cfg.Timeout, cfg.AuthTimeout, c.want)
		}
	}
}

func TestHealthcheck(t *testing.T) {
	ready := false
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/readyz" && !ready {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	var out, errb bytes.Buffer
	if code := run([]string{"healthcheck", "--http-addr", addr}, noEnv, nil, &out, &errb); code != 0 {
		t.Fatalf("healthz: exit %d %s", code, errb.String())
	}
	if code := run([]string{"healthcheck", "--ready"}, func(k string) string {
		if k == "SLUICE_HTTP_ADDR" {
			return addr
		}
		return ""
	}, nil, &out, &errb); code != 1 {
		t.Fatalf("readyz before ready: exit %d", code)
	}
	ready = true
	if code := run([]string{"healthcheck", "--ready", "--http-addr", addr}, noEnv, nil, &out, &errb); code != 0 {
		t.Fatalf("readyz: exit %d", code)
	}
	if code := run([]string{"healthcheck", "--http-addr", "127.0.0.1:1"}, noEnv, nil, &out, &errb); code != 1 {
		t.Fatalf("nothing listening: exit %d", code)
	}
	// Nothing at SLUICE_HTTP_ADDR: a node run as ratelimit answers
	// /healthcheck on the peer's PORT.
	_, port, _ := net.SplitHostPort(addr)
	env := func(k string) string {
		return map[string]string{"SLUICE_HTTP_ADDR": "127.0.0.1:1", "PORT": port}[k]
	}
	if code := run([]string{"healthcheck"}, env, nil, &out, &errb); code != 0 || !strings.Contains(out.String(), "/healthcheck 200") {
		t.Fatalf("the drop-in's port: exit %d %s", code, errb.String())
	}
}

func TestHelpListsSubcommands(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}} {
		var out, errb bytes.Buffer
		if code := run(args, noEnv, nil, &out, &errb); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errb.String())
		}
		for _, want := range []string{"sluice version", "sluice hash-password", "sluice healthcheck", "-requirepass", "-resp-addr"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("%v: the help does not mention %q:\n%s", args, want, out.String())
			}
		}
	}
}

func TestHashPasswordHelp(t *testing.T) {
	for _, arg := range []string{"--help", "-h"} {
		var out, errb bytes.Buffer
		// stdin would block if it were read: a reader that fails the test.
		if code := run([]string{"hash-password", arg}, noEnv, failingReader{t}, &out, &errb); code != 0 {
			t.Fatalf("%s: exit %d: %s", arg, code, errb.String())
		}
		if !strings.Contains(out.String(), "Usage: sluice hash-password") {
			t.Errorf("%s: %q", arg, out.String())
		}
	}
	var out, errb bytes.Buffer
	if code := run([]string{"hash-password", "s3cret"}, noEnv, failingReader{t}, &out, &errb); code != 2 ||
		!strings.Contains(errb.String(), `unexpected argument "s3cret": the password is read from standard input`) {
		t.Fatalf("a password as an argument: exit %d: %s", code, errb.String())
	}
}

type failingReader struct{ t *testing.T }

func (r failingReader) Read([]byte) (int, error) {
	r.t.Error("stdin was read")
	return 0, io.EOF
}

func TestPlaceholderPasswordsRefused(t *testing.T) {
	dir := t.TempDir()
	conf := filepath.Join(dir, "n1.conf")
	if err := os.WriteFile(conf, []byte("requirepass change-me-to-a-long-random-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := func(vals map[string]string) func(string) string { return func(k string) string { return vals[k] } }
	for _, c := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"--requirepass", "change-me"}, nil, `--requirepass: "change-me" is a placeholder`},
		{nil, map[string]string{"SLUICE_REQUIREPASS": "Change_Me"}, `SLUICE_REQUIREPASS (--requirepass): "Change_Me" is a placeholder`},
		{[]string{"--config", conf}, nil, `requirepass in ` + conf + ` (--requirepass): "change-me-to-a-long-random-secret" is a placeholder`},
		{[]string{"--peer-password", "********"}, nil, `--peer-password: "********" is a placeholder`},
		// A flag overrides the file: the message names the flag.
		{[]string{"--config", conf, "--requirepass", "password"}, nil, `--requirepass: "password" is a placeholder`},
	} {
		var out, errb bytes.Buffer
		code := run(append(c.args, "--data-dir", dir), env(c.env), nil, &out, &errb)
		if code != 2 || !strings.Contains(errb.String(), c.want) || !strings.Contains(errb.String(), "openssl rand -hex 24") {
			t.Errorf("%v %v: exit %d, want 2 and %q:\n%s", c.args, c.env, code, c.want, errb.String())
		}
	}
}

// A node told that it needs a password (SLUICE_REQUIRE_AUTH, as
// docker-compose.yml's nodes are) and given none refuses to start in one
// line that names the fix, before it opens a port or its data directory;
// with a password or an ACL file the check lets it through.
func TestRequireAuthRefusesNoPassword(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	hint := "set SLUICE_PASSWORD to a long random secret"
	env := func(k string) string {
		return map[string]string{"SLUICE_REQUIRE_AUTH": hint, "SLUICE_REQUIREPASS": ""}[k]
	}
	var out, errb bytes.Buffer
	code := run([]string{"--data-dir", dir, "--resp-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"}, env, nil, &out, &errb)
	lines := strings.Split(strings.TrimSpace(errb.String()), "\n")
	if code != 2 || len(lines) != 1 || !strings.HasPrefix(lines[0], "sluice: no password") || !strings.HasSuffix(lines[0], ": "+hint) {
		t.Fatalf("exit %d, want 2 and one line ending %q:\n%s", code, hint, errb.String())
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the refused node created its data directory: %v", err)
	}

	for _, c := range []struct {
		cfg    server.Config
		env    string
		refuse bool
	}{
		{server.Config{}, "", false},
		{server.Config{}, "1", true},
		{server.Config{}, "true", true},
		{server.Config{RequirePass: "a-long-random-secret"}, hint, false},
		{server.Config{ACLFile: "/etc/sluice/acl"}, hint, false},
	} {
		err := checkRequireAuth(c.cfg, func(string) string { return c.env })
		if (err != nil) != c.refuse {
			t.Errorf("%+v with %q: refused %v, want %v", c.cfg, c.env, err, c.refuse)
		} else if err != nil && strings.HasSuffix(err.Error(), ": "+c.env) {
			t.Errorf("%+v with %q: the switch value is printed as a hint: %v", c.cfg, c.env, err)
		}
	}
}
