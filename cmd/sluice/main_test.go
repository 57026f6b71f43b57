package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
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
	code = run([]string{"--no-such-flag"}, noEnv, nil, &out, &errb)
	if code != 2 || !strings.Contains(errb.String(), "flag provided but not defined: -no-such-flag") {
		t.Fatalf("exit %d: %s", code, errb.String())
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
}
