package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"testing"
	"time"

	client "github.com/sluice-rl/sluice/clients/go"
	"github.com/sluice-rl/sluice/clients/go/httplimit"
)

func TestSetHeaders(t *testing.T) {
	for _, c := range []struct {
		what   string
		d      client.Decision
		window time.Duration
		want   http.Header
	}{
		{"allowed", client.Decision{Allowed: true, Remaining: 47, Limit: 100, ResetAfter: 530 * time.Millisecond}, time.Minute, http.Header{
			"Ratelimit-Policy": {`"burst";q=100;w=60`}, "Ratelimit": {`"burst";r=47;t=1`},
			"X-Ratelimit-Limit": {"100"}, "X-Ratelimit-Remaining": {"47"}, "X-Ratelimit-Reset": {"1"}}},
		{"reset rounds up", client.Decision{Allowed: true, Remaining: 0, Limit: 2, ResetAfter: 30001 * time.Millisecond}, time.Minute, http.Header{
			"Ratelimit-Policy": {`"burst";q=2;w=60`}, "Ratelimit": {`"burst";r=0;t=31`},
			"X-Ratelimit-Limit": {"2"}, "X-Ratelimit-Remaining": {"0"}, "X-Ratelimit-Reset": {"31"}}},
		{"full bucket, window under a second", client.Decision{Allowed: true, Remaining: 5, Limit: 5}, 250 * time.Millisecond, http.Header{
			"Ratelimit-Policy": {`"burst";q=5;w=1`}, "Ratelimit": {`"burst";r=5;t=0`},
			"X-Ratelimit-Limit": {"5"}, "X-Ratelimit-Remaining": {"5"}, "X-Ratelimit-Reset": {"0"}}},
		{"window 1h30m, 2.5 s", client.Decision{Allowed: true, Remaining: 1, Limit: 3, ResetAfter: 2500 * time.Millisecond}, 90 * time.Minute, http.Header{
			"Ratelimit-Policy": {`"burst";q=3;w=5400`}, "Ratelimit": {`"burst";r=1;t=3`},
			"X-Ratelimit-Limit": {"3"}, "X-Ratelimit-Remaining": {"1"}, "X-Ratelimit-Reset": {"3"}}},
		{"degraded: remaining 0", client.Decision{Allowed: true, Degraded: true, Remaining: 3, Limit: 10, RetryAfter: time.Second, ResetAfter: 7 * time.Second}, time.Hour, http.Header{
			"Ratelimit-Policy": {`"burst";q=10;w=3600`}, "Ratelimit": {`"burst";r=0;t=7`},
			"X-Ratelimit-Limit": {"10"}, "X-Ratelimit-Remaining": {"0"}, "X-Ratelimit-Reset": {"7"}}},
		{"window unknown", client.Decision{Remaining: 0, Limit: 10, RetryAfter: time.Second, ResetAfter: 7 * time.Second}, 0, http.Header{
			"Ratelimit":         {`"burst";r=0;t=7`},
			"X-Ratelimit-Limit": {"10"}, "X-Ratelimit-Remaining": {"0"}, "X-Ratelimit-Reset": {"7"}}},
		{"unlimited", client.Decision{Allowed: true, Remaining: -1, Limit: -1}, time.Minute, http.Header{}},
	} {
		h := http.Header{}
		httplimit.SetHeaders(h, c.d, c.window)
		if !reflect.DeepEqual(h, c.want) {
			t.Errorf("%s:\n got %v\nwant %v", c.what, h, c.want)
		}
	}
}

func TestWriteDenied(t *testing.T) {
	for _, c := range []struct {
		what       string
		d          client.Decision
		retryAfter []string
		body       string
	}{
		{"30 s", client.Decision{Limit: 2, RetryAfter: 30 * time.Second, LimitedBy: "api"}, []string{"30"},
			`{"type":"https://sluice.dev/problems/rate-limited","title":"Too Many Requests","status":429,"detail":"rate limit exceeded at api; retry in 30 s","limited_by":"api","retry_after_ms":30000}` + "\n"},
		{"1 ms is 1 s", client.Decision{Limit: 2, RetryAfter: time.Millisecond, LimitedBy: "a/b#u1"}, []string{"1"},
			`{"type":"https://sluice.dev/problems/rate-limited","title":"Too Many Requests","status":429,"detail":"rate limit exceeded at a/b#u1; retry in 1 s","limited_by":"a/b#u1","retry_after_ms":1}` + "\n"},
		{"1001 ms is 2 s", client.Decision{Limit: 2, RetryAfter: 1001 * time.Millisecond, LimitedBy: "k"}, []string{"2"},
			`{"type":"https://sluice.dev/problems/rate-limited","title":"Too Many Requests","status":429,"detail":"rate limit exceeded at k; retry in 2 s","limited_by":"k","retry_after_ms":1001}` + "\n"},
		{"never", client.Decision{Limit: 2, RetryAfter: client.Never, LimitedBy: "api"}, nil,
			`{"type":"https://sluice.dev/problems/rate-limited","title":"Too Many Requests","status":429,"detail":"rate limit exceeded at api; the request costs more than the limit's capacity and can never be admitted","limited_by":"api","retry_after_ms":-1}` + "\n"},
		{"escaping", client.Decision{RetryAfter: 2 * time.Second, LimitedBy: "k\"<&>\\\n"}, []string{"2"},
			`{"type":"https://sluice.dev/problems/rate-limited","title":"Too Many Requests","status":429,"detail":"rate limit exceeded at k\"<&>\\\n; retry in 2 s","limited_by":"k\"<&>\\\n","retry_after_ms":2000}` + "\n"},
	} {
		w := httptest.NewRecorder()
		httplimit.WriteDenied(w, c.d)
		if w.Code != 429 || w.Body.String() != c.body {
			t.Errorf("%s: %d\n got %s\nwant %s", c.what, w.Code, w.Body.String(), c.body)
		}
		if got := w.Header().Values("Retry-After"); !reflect.DeepEqual(got, c.retryAfter) {
			t.Errorf("%s: Retry-After %q, want %q", c.what, got, c.retryAfter)
		}
		if ct := w.Header().Get("Content-Type"); ct != "application/problem+json" {
			t.Errorf("%s: Content-Type %q", c.what, ct)
		}
		if cl := w.Header().Get("Content-Length"); cl != itoa(len(c.body)) {
			t.Errorf("%s: Content-Length %q, body %d bytes", c.what, cl, len(c.body))
		}
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

func TestRemoteIP(t *testing.T) {
	for addr, want := range map[string]string{
		"192.0.2.1:1234": "192.0.2.1", "[2001:db8::1]:443": "2001:db8::1", "@": "@", "": "",
	} {
		r := &http.Request{RemoteAddr: addr}
		if got := httplimit.RemoteIP(r); got != want {
			t.Errorf("RemoteIP(%q) = %q, want %q", addr, got, want)
		}
	}
}

func TestNewPanicsWithoutATarget(t *testing.T) {
	defer func() {
		if r := recover(); r != "httplimit: New needs Path, KeyFunc or Inline to know what to limit" {
			t.Fatalf("recovered %v", r)
		}
	}()
	httplimit.New(client.New(nopDoer{}))
}

type nopDoer struct{ client.Doer }
