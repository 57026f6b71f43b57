package httplimit_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	client "github.com/sluice-rl/sluice/clients/go"
	"github.com/sluice-rl/sluice/clients/go/httplimit"
)

// doer answers every command with reply, or fails with err.
type doer struct {
	reply any
	err   error
}

func (d doer) Do(ctx context.Context, args ...any) *redis.Cmd {
	cmd := redis.NewCmd(ctx, args...)
	if d.err != nil {
		cmd.SetErr(d.err)
	} else {
		cmd.SetVal(d.reply)
	}
	return cmd
}

func refusal(retryMs int64) []any {
	return []any{int64(0), int64(0), int64(10), retryMs, int64(1000), "k"}
}

// Every refusal the middleware answers carries Retry-After, in whole
// seconds rounded up and at least 1: a 429 from sluice, from the denial
// cache or from a Fallback bucket, FailClosed's 503 and the 503 of
// FailOpen(false). Only a cost that can never be admitted has none.
func TestRetryAfterOnEveryRefusal(t *testing.T) {
	down := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}
	inline := httplimit.Inline(func(*http.Request) string { return "k" }, client.Limit{Rate: 10})
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
	for _, c := range []struct {
		name   string
		sl     *client.Client
		opts   []httplimit.Option
		status int
		retry  string
		times  int // requests sent, the last one checked
	}{
		{"429", client.New(doer{reply: refusal(2300)}, client.DenialCacheSize(0)), nil, 429, "3", 1},
		{"429 under a second", client.New(doer{reply: refusal(1)}, client.DenialCacheSize(0)), nil, 429, "1", 1},
		{"429 retry 0", client.New(doer{reply: refusal(0)}, client.DenialCacheSize(0)), nil, 429, "1", 1},
		{"429 from the denial cache", client.New(doer{reply: refusal(60000)}), nil, 429, "60", 2},
		{"429 never", client.New(doer{reply: refusal(-1)}), nil, 429, "", 1},
		{"429 from the fallback bucket", client.New(doer{err: down}, client.OnFailure(client.Fallback(1, time.Minute, 1))), nil, 429, "60", 2},
		{"503 fail closed", client.New(doer{err: down}, client.OnFailure(client.FailClosed), client.BreakerCooldown(5*time.Second)), nil, 503, "5", 1},
		{"503 fail closed, breaker open", client.New(doer{err: down}, client.OnFailure(client.FailClosed), client.BreakerFailures(1), client.BreakerCooldown(5*time.Second)), nil, 503, "5", 2},
		{"503 fail closed, no cooldown", client.New(doer{err: down}, client.OnFailure(client.FailClosed), client.BreakerFailures(0), client.BreakerCooldown(0)), nil, 503, "1", 1},
		{"503 no decision", client.New(doer{err: down}), []httplimit.Option{httplimit.FailOpen(false)}, 503, "1", 1},
		{"503 error reply", client.New(doer{err: redisError("NOBUDGET no budget node on path 'k'")}), []httplimit.Option{httplimit.FailOpen(false)}, 503, "1", 1},
		{"200 fail open", client.New(doer{err: down}), nil, 200, "", 1},
	} {
		h := httplimit.New(c.sl, append([]httplimit.Option{inline, httplimit.ErrorHandler(func(*http.Request, error) {})}, c.opts...)...)(ok)
		var rec *httptest.ResponseRecorder
		for i := 0; i < c.times; i++ {
			rec = httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
		}
		if rec.Code != c.status || rec.Header().Get("Retry-After") != c.retry {
			t.Errorf("%s: %d Retry-After %q, want %d %q", c.name, rec.Code, rec.Header().Get("Retry-After"), c.status, c.retry)
		}
		if _, has := rec.Header()["Retry-After"]; has != (c.retry != "") {
			t.Errorf("%s: Retry-After present %v", c.name, has)
		}
	}
}

type redisError string

func (e redisError) Error() string { return string(e) }
func (redisError) RedisError()     {}
