package clienttest

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	client "github.com/sluice-rl/sluice/clients/go"
	"github.com/sluice-rl/sluice/clients/go/httplimit"
)

// limitHeaders are the headers the middleware may set.
var limitHeaders = []string{"RateLimit-Policy", "RateLimit", "X-RateLimit-Limit", "X-RateLimit-Remaining",
	"X-RateLimit-Reset", "Retry-After", "Content-Type"}

// app is the handler behind the middleware: it says whether it ran and
// what decision it found.
type app struct {
	mu   sync.Mutex
	last *client.Decision
	runs int
}

func (a *app) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	d, ok := httplimit.FromContext(r.Context())
	a.mu.Lock()
	a.runs++
	a.last = nil
	if ok {
		a.last = &d
	}
	a.mu.Unlock()
	if ok && d.Degraded {
		w.Write([]byte("degraded"))
		return
	}
	w.Write([]byte("ok"))
}

// request sends one GET from remote (host:port) through h.
func request(h http.Handler, remote string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodGet, "http://gateway.test/v1/items", nil)
	if remote != "" {
		r.RemoteAddr = remote
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// check compares status, body and every header of limitHeaders (absent
// ones must be absent).
func check(t *testing.T, what string, w *httptest.ResponseRecorder, status int, body string, headers map[string]string) {
	t.Helper()
	if w.Code != status {
		t.Errorf("%s: status %d, want %d", what, w.Code, status)
	}
	if got := w.Body.String(); got != body {
		t.Errorf("%s: body\n got %q\nwant %q", what, got, body)
	}
	for _, h := range limitHeaders {
		got := w.Header().Values(h)
		ok := len(got) > 0
		want, wantOK := headers[h]
		if h == "Content-Type" && !wantOK {
			continue // the app's own
		}
		switch {
		case wantOK && (len(got) != 1 || got[0] != want):
			t.Errorf("%s: %s = %q, want %q", what, h, got, want)
		case !wantOK && ok:
			t.Errorf("%s: %s = %q, want none", what, h, got)
		}
	}
}

func headers(policy, limit string, remaining, reset int) map[string]string {
	h := map[string]string{
		"RateLimit":             `"burst";r=` + strconv.Itoa(remaining) + ";t=" + strconv.Itoa(reset),
		"X-RateLimit-Limit":     limit,
		"X-RateLimit-Remaining": strconv.Itoa(remaining),
		"X-RateLimit-Reset":     strconv.Itoa(reset),
	}
	if policy != "" {
		h["RateLimit-Policy"] = policy
	}
	return h
}

// denied adds what a 429 carries to h.
func denied(h map[string]string, retryAfter string) map[string]string {
	if h == nil {
		h = map[string]string{}
	}
	h["Content-Type"] = "application/problem+json"
	if retryAfter != "" {
		h["Retry-After"] = retryAfter
	}
	return h
}

// errorLog collects what the middleware reports.
type errorLog struct {
	mu   sync.Mutex
	errs []error
}

func (l *errorLog) handler(r *http.Request, err error) {
	l.mu.Lock()
	l.errs = append(l.errs, err)
	l.mu.Unlock()
}

func (l *errorLog) take() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.errs
	l.errs = nil
	return out
}

func (l *errorLog) none(t *testing.T) {
	t.Helper()
	if errs := l.take(); len(errs) > 0 {
		t.Fatalf("unexpected errors: %v", errs)
	}
}

const problemPrefix = `{"type":"https://sluice.dev/problems/rate-limited","title":"Too Many Requests","status":429,`

func TestAllowedThenDenied(t *testing.T) {
	s := startSluice(t)
	s.set(t, "api", "RATE", 2, "PER", "minute", "SCOPE", "ip")
	var errs errorLog
	a := &app{}
	h := httplimit.New(s.client(), httplimit.Path("api"), httplimit.ErrorHandler(errs.handler))(a)
	const alice, bob = "192.0.2.1:1234", "198.51.100.7:5555"
	pol := `"burst";q=2;w=60`

	// Token bucket, 2 per minute: a token comes back every 30 s. The
	// server's clock stands still unless the test moves it.
	check(t, "first", request(h, alice), 200, "ok", headers(pol, "2", 1, 30))
	if a.last == nil || *a.last != (client.Decision{Allowed: true, Remaining: 1, Limit: 2, ResetAfter: 30 * time.Second, LimitedBy: "api#192.0.2.1"}) {
		t.Fatalf("decision in the context: %+v", a.last)
	}
	check(t, "second", request(h, alice), 200, "ok", headers(pol, "2", 0, 60))
	check(t, "third", request(h, alice), 429,
		problemPrefix+`"detail":"rate limit exceeded at api#192.0.2.1; retry in 30 s","limited_by":"api#192.0.2.1","retry_after_ms":30000}`+"\n",
		denied(headers(pol, "2", 0, 60), "30"))
	if a.runs != 2 {
		t.Fatalf("the app ran %d times, want 2 (not for the refusal)", a.runs)
	}
	// Scope ip: another address has its own bucket.
	check(t, "another address", request(h, bob), 200, "ok", headers(pol, "2", 1, 30))

	// 29.5 s later: 500 ms to wait, which Retry-After rounds up to 1.
	s.clock.Advance(29500 * time.Millisecond)
	check(t, "after 29.5s", request(h, alice), 429,
		problemPrefix+`"detail":"rate limit exceeded at api#192.0.2.1; retry in 1 s","limited_by":"api#192.0.2.1","retry_after_ms":500}`+"\n",
		denied(headers(pol, "2", 0, 31), "1"))
	s.clock.Advance(500 * time.Millisecond)
	check(t, "after 30s", request(h, alice), 200, "ok", headers(pol, "2", 0, 60))
	errs.none(t)
}

func TestCostAboveCapacityIsNeverAdmitted(t *testing.T) {
	s := startSluice(t)
	s.set(t, "api", "RATE", 2, "PER", "minute")
	var errs errorLog
	a := &app{}
	h := httplimit.New(s.client(), httplimit.ErrorHandler(errs.handler),
		httplimit.KeyFunc(func(r *http.Request) (string, string, int64, error) {
			return "api", "", 5, nil
		}))(a)
	check(t, "COST 5 on a burst of 2", request(h, ""), 429,
		problemPrefix+`"detail":"rate limit exceeded at api; the request costs more than the limit's capacity and can never be admitted","limited_by":"api","retry_after_ms":-1}`+"\n",
		denied(headers(`"burst";q=2;w=60`, "2", 2, 0), ""))
	if a.runs != 0 {
		t.Fatal("the app ran for a refused request")
	}
	errs.none(t)
}

func TestDegraded(t *testing.T) {
	s := startSluice(t)
	s.set(t, "deg", "RATE", 1, "PER", "minute", "STRATEGY", "degrade")
	var errs errorLog
	a := &app{}
	h := httplimit.New(s.client(), httplimit.Path("deg"), httplimit.ErrorHandler(errs.handler))(a)
	pol := `"burst";q=1;w=60`
	check(t, "within the limit", request(h, ""), 200, "ok", headers(pol, "1", 0, 60))
	check(t, "over the limit", request(h, ""), 200, "degraded", headers(pol, "1", 0, 60))
	if a.last == nil || !a.last.Degraded || !a.last.Allowed || a.last.RetryAfter != time.Minute {
		t.Fatalf("decision in the context: %+v", a.last)
	}
	errs.none(t)
}

func TestResponseHeadersFalseAndHeadersOption(t *testing.T) {
	s := startSluice(t)
	s.set(t, "quiet", "RATE", 1, "PER", "minute", "RESPONSE_HEADERS", "no")
	s.set(t, "loud", "RATE", 1, "PER", "minute")
	var errs errorLog
	l := s.client()
	a := &app{}
	h := httplimit.New(l, httplimit.Path("quiet"), httplimit.ErrorHandler(errs.handler))(a)
	check(t, "quiet, allowed", request(h, ""), 200, "ok", nil)
	check(t, "quiet, denied", request(h, ""), 429,
		problemPrefix+`"detail":"rate limit exceeded at quiet; retry in 60 s","limited_by":"quiet","retry_after_ms":60000}`+"\n",
		denied(nil, "60"))

	h = httplimit.New(l, httplimit.Path("loud"), httplimit.Headers(false), httplimit.ErrorHandler(errs.handler))(a)
	check(t, "Headers(false), allowed", request(h, ""), 200, "ok", nil)
	check(t, "Headers(false), denied", request(h, ""), 429,
		problemPrefix+`"detail":"rate limit exceeded at loud; retry in 60 s","limited_by":"loud","retry_after_ms":60000}`+"\n",
		denied(nil, "60"))
	errs.none(t)
}

func TestUnlimitedPath(t *testing.T) {
	s := startSluice(t)
	s.set(t, "free", "{}")
	var errs errorLog
	a := &app{}
	h := httplimit.New(s.client(), httplimit.Path("free"), httplimit.ErrorHandler(errs.handler))(a)
	for i := 0; i < 3; i++ {
		check(t, "unlimited", request(h, ""), 200, "ok", nil)
	}
	if a.last == nil || a.last.Limit != -1 || a.last.Remaining != -1 || !a.last.Unlimited() {
		t.Fatalf("decision in the context: %+v", a.last)
	}
	errs.none(t)
}

func TestInlineLimit(t *testing.T) {
	s := startSluice(t)
	var errs errorLog
	a := &app{}
	l := s.client()
	byIP := func(r *http.Request) string { return "inline:" + httplimit.RemoteIP(r) }
	h := httplimit.New(l, httplimit.Path("ignored"), httplimit.ErrorHandler(errs.handler),
		httplimit.Inline(byIP, client.Limit{Rate: 3, Per: time.Minute}))(a)
	pol := `"burst";q=3;w=60`
	check(t, "first", request(h, ""), 200, "ok", headers(pol, "3", 2, 20))
	check(t, "second", request(h, ""), 200, "ok", headers(pol, "3", 1, 40))
	check(t, "third", request(h, ""), 200, "ok", headers(pol, "3", 0, 60))
	check(t, "fourth", request(h, ""), 429,
		problemPrefix+`"detail":"rate limit exceeded at inline:192.0.2.1; retry in 20 s","limited_by":"inline:192.0.2.1","retry_after_ms":20000}`+"\n",
		denied(headers(pol, "3", 0, 60), "20"))

	// Per 0 is a second; a window under a second is w=1.
	h = httplimit.New(l, httplimit.Inline(func(*http.Request) string { return "per-second" }, client.Limit{Rate: 4}))(a)
	check(t, "Per 0", request(h, ""), 200, "ok", headers(`"burst";q=4;w=1`, "4", 3, 1))
	h = httplimit.New(l, httplimit.Inline(func(*http.Request) string { return "fast" }, client.Limit{Rate: 10, Per: 250 * time.Millisecond, Burst: 20}))(a)
	check(t, "Per 250ms", request(h, ""), 200, "ok", headers(`"burst";q=20;w=1`, "20", 19, 1))
	errs.none(t)
}

// An implicit child takes its headers from its deepest configured
// ancestor; a level named by limited_by that is an ancestor gives its own
// window.
func TestImplicitChildAndAncestorLevels(t *testing.T) {
	s := startSluice(t)
	s.set(t, "org", "RATE", 6, "PER", "hour", "SHARING", "inherit")
	s.set(t, "hush", "RATE", 6, "PER", "hour", "SHARING", "inherit", "RESPONSE_HEADERS", "no")
	s.set(t, "pool", `{"budget":{"mode":"shared","total":5},"sustained":{"window":"minute"}}`)
	var errs errorLog
	a := &app{}
	l := s.client()
	team := func(prefix string) httplimit.Option {
		return httplimit.KeyFunc(func(r *http.Request) (string, string, int64, error) {
			return prefix + "/" + r.Header.Get("X-Team"), "", 0, nil
		})
	}
	get := func(h http.Handler, teamName string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.Header.Set("X-Team", teamName)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}

	h := httplimit.New(l, team("org"), httplimit.ErrorHandler(errs.handler))(a)
	check(t, "org/red", get(h, "red"), 200, "ok", headers(`"burst";q=6;w=3600`, "6", 5, 600))
	check(t, "org/red again", get(h, "red"), 200, "ok", headers(`"burst";q=6;w=3600`, "6", 4, 1200))
	check(t, "org/blue, its own bucket", get(h, "blue"), 200, "ok", headers(`"burst";q=6;w=3600`, "6", 5, 600))
	if a.last == nil || a.last.LimitedBy != "org/blue" {
		t.Fatalf("decision: %+v", a.last)
	}

	h = httplimit.New(l, team("hush"), httplimit.ErrorHandler(errs.handler))(a)
	check(t, "hush/red: the ancestor says no headers", get(h, "red"), 200, "ok", nil)

	// A shared pool with no limit of its own: the children draw on it and
	// limited_by names the pool, whose window is its total's.
	h = httplimit.New(l, team("pool"), httplimit.ErrorHandler(errs.handler))(a)
	check(t, "pool/red", get(h, "red"), 200, "ok", headers(`"burst";q=5;w=60`, "5", 4, 12))
	if a.last == nil || a.last.LimitedBy != "pool" {
		t.Fatalf("decision: %+v", a.last)
	}
	errs.none(t)
}

func TestFailOpenAndClosed(t *testing.T) {
	s := startSluice(t)
	s.set(t, "api", "RATE", 1, "PER", "minute")
	var errs errorLog
	a := &app{}
	l := s.client()
	open := httplimit.New(l, httplimit.Path("api"), httplimit.ErrorHandler(errs.handler))(a)
	closed := httplimit.New(l, httplimit.Path("api"), httplimit.FailOpen(false), httplimit.ErrorHandler(errs.handler))(a)
	check(t, "before the stop", request(open, ""), 200, "ok", headers(`"burst";q=1;w=60`, "1", 0, 60))
	errs.none(t)

	// A path with no budget node: no decision.
	nobudget := httplimit.New(l, httplimit.Path("nowhere"), httplimit.ErrorHandler(errs.handler))(a)
	check(t, "no budget node", request(nobudget, ""), 200, "ok", nil)
	if got := errs.take(); len(got) != 1 || !client.IsNoBudget(got[0]) ||
		got[0].Error() != "httplimit: RL.ACQUIRE nowhere: NOBUDGET no budget node on path 'nowhere'" {
		t.Fatalf("errors: %v", got)
	}

	s.node.Close()
	a.last = &client.Decision{}
	check(t, "server stopped, fail open", request(open, ""), 200, "ok", nil)
	if a.last != nil {
		t.Fatalf("a decision in the context without one: %+v", a.last)
	}
	if got := errs.take(); len(got) != 1 || !strings.HasPrefix(got[0].Error(), "httplimit: RL.ACQUIRE api: ") {
		t.Fatalf("errors: %v", got)
	}
	runs := a.runs
	check(t, "server stopped, fail closed", request(closed, ""), 503,
		`{"type":"https://sluice.dev/problems/limiter-unavailable","title":"Service Unavailable","status":503,"detail":"rate limiting is unavailable; try again later"}`+"\n",
		map[string]string{"Content-Type": "application/problem+json", "Retry-After": "1"}) // no decision says when: soon
	if a.runs != runs {
		t.Fatal("the app ran although the middleware fails closed")
	}
	if got := errs.take(); len(got) != 1 {
		t.Fatalf("errors: %v", got)
	}
}

// With the server's real clock, only the rounded values are asserted, in
// bounds that hold however slow the machine is.
func TestRealClockRounding(t *testing.T) {
	s := startSluiceClock(t, false)
	s.set(t, "api", "RATE", 2, "PER", "minute")
	var errs errorLog
	h := httplimit.New(s.client(), httplimit.Path("api"), httplimit.ErrorHandler(errs.handler))(&app{})
	pol := `"burst";q=2;w=60`

	// The first call finds a full bucket and takes one token: the reset is
	// one token's refill, 30 000 ms exactly, whenever the call runs.
	start := time.Now()
	check(t, "first", request(h, ""), 200, "ok", headers(pol, "2", 1, 30))

	// The second call, e ms after the first (e ≤ elapsed), leaves 2 − e/30000
	// tokens missing: reset 60 000 − e ms, rounded up: 60 − ⌊elapsed⌋ … 60.
	w := request(h, "")
	elapsed := time.Since(start)
	lo := 60 - int(elapsed/time.Second)
	reset, _ := strconv.Atoi(w.Header().Get("X-RateLimit-Reset"))
	if w.Code != 200 || reset < lo || reset > 60 || w.Header().Get("RateLimit") != `"burst";r=0;t=`+strconv.Itoa(reset) {
		t.Fatalf("second: %d, reset %d not in [%d, 60], RateLimit %q", w.Code, reset, lo, w.Header().Get("RateLimit"))
	}

	// The third is refused: retry 30 000 − e ms (e since the first call),
	// Retry-After 30 − ⌊elapsed⌋ … 30, and the body says the same.
	w = request(h, "")
	elapsed = time.Since(start)
	lo = 30 - int(elapsed/time.Second)
	retry, _ := strconv.Atoi(w.Header().Get("Retry-After"))
	if w.Code != 429 || retry < max(lo, 1) || retry > 30 ||
		!strings.Contains(w.Body.String(), `"detail":"rate limit exceeded at api; retry in `+strconv.Itoa(retry)+` s"`) {
		t.Fatalf("third: %d, Retry-After %d not in [%d, 30], body %s", w.Code, retry, lo, w.Body.String())
	}
	errs.none(t)
}

func TestKeyFuncErrors(t *testing.T) {
	s := startSluice(t)
	var errs errorLog
	a := &app{}
	l := s.client()
	for _, c := range []struct {
		f    func(*http.Request) (string, string, int64, error)
		want string
	}{
		{func(*http.Request) (string, string, int64, error) { return "", "", 0, errors.New("no tenant header") },
			"httplimit: KeyFunc: no tenant header"},
		{func(*http.Request) (string, string, int64, error) { return "", "", 0, nil }, "httplimit: KeyFunc returned an empty path"},
		{func(*http.Request) (string, string, int64, error) { return "api", "", -2, nil }, "httplimit: KeyFunc returned a negative cost, -2"},
	} {
		h := httplimit.New(l, httplimit.KeyFunc(c.f), httplimit.ErrorHandler(errs.handler))(a)
		check(t, c.want, request(h, ""), 200, "ok", nil)
		if got := errs.take(); len(got) != 1 || got[0].Error() != c.want {
			t.Fatalf("errors %v, want %q", got, c.want)
		}
	}
	h := httplimit.New(l, httplimit.Inline(func(*http.Request) string { return "" }, client.Limit{Rate: 1}),
		httplimit.ErrorHandler(errs.handler), httplimit.FailOpen(false))(a)
	if w := request(h, ""); w.Code != 503 {
		t.Fatalf("empty inline key, fail closed: %d", w.Code)
	}
	if got := errs.take(); len(got) != 1 || got[0].Error() != "httplimit: the Inline key function returned an empty key" {
		t.Fatalf("errors %v", got)
	}
}
