package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// post sends a JSON body to the HTTP API and returns the status, the
// rate-limit headers and the body.
func post(t *testing.T, addr, path, body string, hdr ...string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest("POST", "http://"+addr+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// rateHeaders lists the rate-limit headers of a response, in a fixed order,
// as "Name: value" (absent ones left out).
func rateHeaders(h http.Header) string {
	var out []string
	for _, n := range []string{"RateLimit-Policy", "RateLimit", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "Retry-After", "Content-Type"} {
		if v := h.Get(n); v != "" {
			out = append(out, n+": "+v)
		}
	}
	return strings.Join(out, "\n")
}

var msField = regexp.MustCompile(`"(reset|retry)_after_ms":(\d+)`)

// toSeconds rounds the times of a reply up to whole seconds (in ms): a
// token bucket refills continuously, so they move by the milliseconds the
// test takes between steps; the headers carry the same times in seconds.
func toSeconds(body string) string {
	return msField.ReplaceAllStringFunc(body, func(m string) string {
		sub := msField.FindStringSubmatch(m)
		ms, _ := strconv.ParseInt(sub[2], 10, 64)
		return fmt.Sprintf(`"%s_after_ms":%d`, sub[1], (ms+999)/1000*1000)
	})
}

type httpStep struct {
	path, body string
	status     int
	headers    string
	reply      string
}

func runHTTP(t *testing.T, addr string, steps []httpStep, hdr ...string) {
	t.Helper()
	for i, s := range steps {
		status, h, body := post(t, addr, s.path, s.body, hdr...)
		body = toSeconds(body)
		if status != s.status || body != s.reply+"\n" || (s.headers != "-" && rateHeaders(h) != s.headers) {
			t.Fatalf("step %d %s %s:\ngot %d\n%s\n%s\nwant %d\n%s\n%s", i, s.path, s.body, status, rateHeaders(h), body, s.status, s.headers, s.reply)
		}
	}
}

// TestHTTPAPI drives POST /v1/acquire, /v1/peek, /v1/refund and /v1/quota
// with net/http against the binary: statuses, headers and bodies exact.
func TestHTTPAPI(t *testing.T) {
	p := single(t)
	const js = "Content-Type: application/json"
	// A window of a day: the exact reset values below hold for the
	// milliseconds a test takes (token buckets refill continuously, and a
	// day refills one token in 28.8 s with rate 3).
	inline := `{"key":"user:1","rate":3,"per":"day"}`
	runHTTP(t, p.HTTP, []httpStep{
		{"/v1/acquire", inline, 200, `RateLimit-Policy: "burst";q=3;w=86400` + "\n" + `RateLimit: "burst";r=2;t=28800` + "\nX-RateLimit-Limit: 3\nX-RateLimit-Remaining: 2\nX-RateLimit-Reset: 28800\n" + js,
			`{"allowed":1,"remaining":2,"limit":3,"retry_after_ms":0,"reset_after_ms":28800000,"limited_by":"user:1"}`},
		{"/v1/acquire", `{"key":"user:1","rate":3,"per":"day","cost":2}`, 200, `RateLimit-Policy: "burst";q=3;w=86400` + "\n" + `RateLimit: "burst";r=0;t=86400` + "\nX-RateLimit-Limit: 3\nX-RateLimit-Remaining: 0\nX-RateLimit-Reset: 86400\n" + js,
			`{"allowed":1,"remaining":0,"limit":3,"retry_after_ms":0,"reset_after_ms":86400000,"limited_by":"user:1"}`},
		{"/v1/acquire", inline, 429, `RateLimit-Policy: "burst";q=3;w=86400` + "\n" + `RateLimit: "burst";r=0;t=86400` + "\nX-RateLimit-Limit: 3\nX-RateLimit-Remaining: 0\nX-RateLimit-Reset: 86400\nRetry-After: 28800\n" + js,
			`{"allowed":0,"remaining":0,"limit":3,"retry_after_ms":28800000,"reset_after_ms":86400000,"limited_by":"user:1"}`},
		{"/v1/peek", `{"key":"user:1","cost":0}`, 200, "-",
			`{"allowed":1,"remaining":0,"limit":3,"retry_after_ms":0,"reset_after_ms":86400000,"limited_by":"user:1"}`},
		{"/v1/refund", `{"key":"user:1","cost":1}`, 200, "-",
			`{"allowed":1,"remaining":1,"limit":3,"retry_after_ms":0,"reset_after_ms":57600000,"limited_by":"user:1"}`},
		{"/v1/acquire", `{"key":"user:1","rate":3,"per":"day","cost":4}`, 429, `RateLimit-Policy: "burst";q=3;w=86400` + "\n" + `RateLimit: "burst";r=1;t=57600` + "\nX-RateLimit-Limit: 3\nX-RateLimit-Remaining: 1\nX-RateLimit-Reset: 57600\n" + js,
			`{"allowed":0,"remaining":1,"limit":3,"retry_after_ms":-1,"reset_after_ms":57600000,"limited_by":"user:1"}`},
	})

	// Budget form and quota.
	rdb := redis.NewClient(&redis.Options{Addr: p.Resp})
	defer rdb.Close()
	if err := rdb.Do(context.Background(), "RL.BUDGET", "SET", "api", `{"sustained":{"rate":2,"window":"day"},"quota":{"limit":5,"period":"day"}}`).Err(); err != nil {
		t.Fatal(err)
	}
	runHTTP(t, p.HTTP, []httpStep{
		{"/v1/acquire", `{"path":"api"}`, 200, `RateLimit-Policy: "burst";q=2;w=86400` + "\n" + `RateLimit: "burst";r=1;t=43200` + "\nX-RateLimit-Limit: 2\nX-RateLimit-Remaining: 1\nX-RateLimit-Reset: 43200\n" + js,
			`{"allowed":1,"remaining":1,"limit":2,"retry_after_ms":0,"reset_after_ms":43200000,"limited_by":"api"}`},
	})
	status, _, body := post(t, p.HTTP, "/v1/quota", `{"path":"api"}`)
	if status != 200 || !strings.HasPrefix(body, `{"level":"api","limit":5,"used":1,"remaining":4,"period":"day","resets_at":`) {
		t.Fatalf("quota: %d %s", status, body)
	}

	// Errors name the field and its range.
	runHTTP(t, p.HTTP, []httpStep{
		{"/v1/acquire", `{"key":"k","rate":0}`, 400, "Content-Type: application/problem+json",
			`{"type":"https://sluice.dev/problems/request-refused","title":"Bad Request","status":400,"detail":"rate must be an integer between 1 and 1000000000000","code":"ERR"}`},
		{"/v1/acquire", `{"key":"k"}`, 400, "Content-Type: application/problem+json",
			`{"type":"https://sluice.dev/problems/request-refused","title":"Bad Request","status":400,"detail":"rate (or quota) is required with key: an inline limit travels with the call; use path for a budget node","code":"ERR"}`},
		{"/v1/acquire", `{"path":"nothing/here"}`, 404, "Content-Type: application/problem+json",
			`{"type":"https://sluice.dev/problems/request-refused","title":"Not Found","status":404,"detail":"no budget node on path 'nothing/here'","code":"NOBUDGET"}`},
		{"/v1/acquire", `{"key":"k","rate":1,"colour":"red"}`, 400, "Content-Type: application/problem+json",
			`{"type":"https://sluice.dev/problems/request-refused","title":"Bad Request","status":400,"detail":"invalid JSON body: json: unknown field \"colour\"","code":"ERR"}`},
		{"/v1/refund", `{"key":"user:1"}`, 400, "Content-Type: application/problem+json",
			`{"type":"https://sluice.dev/problems/request-refused","title":"Bad Request","status":400,"detail":"cost is required: how many tokens to give back","code":"ERR"}`},
	})
	resp, err := http.Get("http://" + p.HTTP + "/v1/acquire")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("GET /v1/acquire: %d", resp.StatusCode)
	}
}

// TestHTTPAPIAuth: with a password the API needs the Authorization
// header; refund needs the admin role.
func TestHTTPAPIAuth(t *testing.T) {
	p := single(t, "--requirepass", "s3cret")
	const prob = "Content-Type: application/problem+json"
	runHTTP(t, p.HTTP, []httpStep{
		{"/v1/acquire", `{"key":"k","rate":1}`, 401, prob,
			`{"type":"https://sluice.dev/problems/request-refused","title":"Unauthorized","status":401,"detail":"authentication required: send the authorization header as 'Bearer <password>' or 'Basic base64(user:password)'"}`},
	})
	runHTTP(t, p.HTTP, []httpStep{
		{"/v1/acquire", `{"key":"k","rate":1}`, 401, prob,
			`{"type":"https://sluice.dev/problems/request-refused","title":"Unauthorized","status":401,"detail":"invalid username-password pair or user is disabled"}`},
	}, "Authorization", "Bearer nope")
	runHTTP(t, p.HTTP, []httpStep{
		{"/v1/acquire", `{"key":"k","rate":1}`, 200, "-",
			`{"allowed":1,"remaining":0,"limit":1,"retry_after_ms":0,"reset_after_ms":1000,"limited_by":"k"}`},
	}, "Authorization", "Bearer s3cret")
}
