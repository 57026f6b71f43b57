package e2e

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	sl "github.com/sluice-rl/sluice/clients/go"
	"github.com/sluice-rl/sluice/clients/go/httplimit"
)

// The net/http middleware on the real binary, as a user mounts it: a
// limit of 3 a minute per client admits 3 with the rate-limit headers
// counting down, then answers 429 with Retry-After; a skipped request
// passes without a decision or headers and counts against nothing; with
// the node stopped, FailOpen(true) lets requests through without headers,
// the client's fail-closed policy answers 503 with Retry-After, and a
// request the middleware cannot decide (no key) passes with FailOpen(true)
// and is answered 503 with Retry-After under FailOpen(false).
func TestHTTPLimitMiddlewareOnTheBinary(t *testing.T) {
	p := single(t)
	rdb := redis.NewClient(&redis.Options{Addr: p.Resp, ContextTimeoutEnabled: true})
	defer rdb.Close()
	served := 0
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { served++ })
	skip := func(r *http.Request) bool { return r.URL.Path == "/healthz" }
	key := "httplimit:client"
	mount := func(c *sl.Client, open bool) *httptest.Server {
		return httptest.NewServer(httplimit.New(c, httplimit.Inline(func(*http.Request) string { return key },
			sl.Limit{Rate: 3, Per: time.Minute}), httplimit.Skip(skip), httplimit.FailOpen(open),
			httplimit.ErrorHandler(func(*http.Request, error) {}))(app))
	}
	get := func(srv *httptest.Server, path string) *http.Response {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	gw := mount(sl.New(rdb, sl.Timeout(2*time.Second)), true)
	defer gw.Close()
	for i := 0; i < 3; i++ {
		resp := get(gw, "/api")
		if resp.StatusCode != 200 || resp.Header.Get("X-Ratelimit-Limit") != "3" ||
			resp.Header.Get("X-Ratelimit-Remaining") != strconv.Itoa(2-i) || resp.Header.Get("Ratelimit-Policy") != `"burst";q=3;w=60` {
			t.Fatalf("request %d: %d %v", i+1, resp.StatusCode, resp.Header)
		}
		// A skipped request in between: no decision, no headers.
		if resp := get(gw, "/healthz"); resp.StatusCode != 200 || resp.Header.Get("X-Ratelimit-Limit") != "" {
			t.Fatalf("skipped: %d %v", resp.StatusCode, resp.Header)
		}
	}
	resp := get(gw, "/api")
	ra, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
	if resp.StatusCode != 429 || ra < 1 || ra > 20 || resp.Header.Get("X-Ratelimit-Remaining") != "0" ||
		resp.Header.Get("Content-Type") != httplimit.ProblemContentType {
		t.Fatalf("fourth request: %d %v", resp.StatusCode, resp.Header)
	}
	if served != 6 {
		t.Fatalf("the app served %d requests, want 3 admitted and 3 skipped", served)
	}
	// (Had the skipped requests counted, the second request to /api would
	// have been refused.)

	if err := p.stop(); err != nil && err.Error() != "signal: interrupt" {
		t.Logf("stop: %v", err)
	}
	down := func(policy sl.FailurePolicy) *sl.Client {
		return sl.New(redis.NewClient(&redis.Options{Addr: p.Resp, MaxRetries: -1, DialTimeout: 50 * time.Millisecond}),
			sl.Timeout(200*time.Millisecond), sl.OnFailure(policy))
	}
	for _, c := range []struct {
		what   string
		c      *sl.Client
		key    string
		open   bool
		status int
	}{
		{"the client's fail-open policy", down(sl.FailOpen), key, false, 200},
		{"the client's fail-closed policy", down(sl.FailClosed), key, true, 503},
		{"no key, FailOpen(true)", down(sl.FailClosed), "", true, 200},
		{"no key, FailOpen(false)", down(sl.FailOpen), "", false, 503},
	} {
		key = c.key
		srv := mount(c.c, c.open)
		resp := get(srv, "/api")
		srv.Close()
		if resp.StatusCode != c.status || resp.Header.Get("X-Ratelimit-Limit") != "" {
			t.Fatalf("%s: %d %v", c.what, resp.StatusCode, resp.Header)
		}
		if ra, _ := strconv.Atoi(resp.Header.Get("Retry-After")); c.status == 503 && ra < 1 {
			t.Fatalf("%s: 503 without Retry-After: %v", c.what, resp.Header)
		}
	}
}
