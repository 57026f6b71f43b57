// Package httplimit is net/http middleware that asks sluice, once per
// request, whether the request may go ahead, and answers refused requests
// with 429 Too Many Requests.
//
//	sl := client.New(redis.NewClient(&redis.Options{Addr: "127.0.0.1:6380"}))
//	limit := httplimit.New(sl, httplimit.Path("system/partner-a/tenant-a1"))
//	http.ListenAndServe(":8080", limit(mux))
//
// # What is limited
//
// By default every request calls RL.ACQUIRE on the budget path given with
// Path, with KEY set to the client's IP address (RemoteIP), so that a node
// whose scope is ip counts each address; nodes with another scope ignore
// the KEY. KeyFunc chooses the path, subject and cost per request instead,
// and Inline uses an inline limit (RL.ACQUIRE key RATE …) in place of the
// budget tree. Inline takes precedence over KeyFunc, and KeyFunc over Path.
//
// # Outcomes
//
//   - allowed=1: the headers below are set and the next handler runs.
//   - allowed=2 (over a limit whose strategy is degrade): the headers are
//     set with the remaining count 0 and the next handler runs; it finds
//     the decision, Degraded set, with FromContext and can serve a degraded
//     response.
//   - allowed=0: the middleware answers 429 itself (WriteDenied), with the
//     headers below, Retry-After and a problem body; the next handler does
//     not run.
//   - A decision of the client's failure policy (client.OnFailure), made
//     because sluice could not answer: its cause goes to the ErrorHandler;
//     FailOpen's runs the next handler with no rate-limit headers, a
//     Fallback decision is served as above (without RateLimit-Policy), and
//     FailClosed's is answered 503 (below) with Retry-After.
//   - No decision (sluice unreachable, an error reply such as NOBUDGET, or
//     an error from KeyFunc): the error goes to the ErrorHandler (by default
//     logged with log/slog) and, with FailOpen(true), the default, the next
//     handler runs with no rate-limit headers and no decision in the
//     context; with FailOpen(false) the middleware answers 503 (below).
//
// Every refusal says when to come back: a 429 and FailClosed's 503 carry
// Retry-After as the decision says (at least 1 s), and the 503 of
// FailOpen(false), which has no decision to ask, Retry-After: 1. The one
// refusal without it is a 429 whose cost can never be admitted
// (retry_after_ms -1): waiting would not help.
//
// The 503 of FailOpen(false) has Content-Type application/problem+json and
// this body, one line followed by a newline (shown here on two):
//
//	{"type":"https://sluice.dev/problems/limiter-unavailable","title":"Service Unavailable",
//	 "status":503,"detail":"rate limiting is unavailable; try again later"}
//
// FromContext returns the decision for every request that got one,
// admitted or degraded.
//
// # Headers
//
// SetHeaders maps an RL.ACQUIRE reply to response headers. With limit,
// remaining and reset_after_ms the reply's elements 3, 2 and 5, W the
// window described below, and ⌈x⌉ rounding up to whole seconds:
//
//	RateLimit-Policy:      "burst";q=<limit>;w=<⌈W⌉, at least 1>
//	RateLimit:             "burst";r=<remaining>;t=<⌈reset_after_ms⌉>
//	X-RateLimit-Limit:     <limit>
//	X-RateLimit-Remaining: <remaining>
//	X-RateLimit-Reset:     <⌈reset_after_ms⌉>
//
// (net/http writes the names in canonical form, Ratelimit-Policy and
// X-Ratelimit-Limit; header names are case-insensitive.) remaining is sent
// as 0 for a degraded decision (allowed=2). The reset
// values are the seconds until the tightest level is full again. No limit
// header is sent when the path is unlimited (limit -1), none when
// Headers(false) is given, and for budget paths none when the node that
// governs the path (client.Policy: the node at the path or its deepest
// configured ancestor) has response_headers false. RateLimit-Policy is
// left out when W is unknown.
//
// W, the window: for an inline limit, its Per (one second when 0). For a
// budget path, the effective window of the node named in limited_by (the
// text before '#'; an unconfigured path resolves to its deepest configured
// ancestor as client.Policy does) or, when that node has no effective limit
// of its own, the window of its budget.total. W is unknown when
// limited_by names a quota (quota:…), when that node has neither, or when
// the policy cannot be read (the error then goes to the ErrorHandler and
// the request is served as the decision says). Policies are cached by the
// client (client.PolicyTTL).
//
// # Refusals
//
// WriteDenied answers 429 with Content-Type application/problem+json, and
// Retry-After: ⌈retry_after_ms⌉ in whole seconds, at least 1 (omitted when retry_after_ms is -1: the request's cost
// exceeds a level's capacity, so it can never be admitted as it is). The body is an RFC 9457 problem
// object, Problem, written as one line of JSON followed by a newline, with
// its members in this order:
//
//	{"type":"https://sluice.dev/problems/rate-limited","title":"Too Many Requests","status":429,
//	 "detail":"rate limit exceeded at api; retry in 30 s","limited_by":"api","retry_after_ms":30000}
//
// (shown here on two lines). detail is "rate limit exceeded at
// <limited_by>; retry in <Retry-After> s", or, when retry_after_ms is -1,
// "rate limit exceeded at <limited_by>; the request costs more than the
// limit's capacity and can never be admitted". Strings are JSON-escaped
// except that <, > and & are written as they are.
package httplimit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	client "github.com/sluice-rl/sluice/clients/go"
	"github.com/sluice-rl/sluice/protocol/ratehdr"
)

// Option configures the middleware; pass options to New.
type Option func(*config)

type config struct {
	path      string
	keyFunc   func(*http.Request) (path, subject string, cost int64, err error)
	inlineKey func(*http.Request) string
	inline    client.Limit
	failOpen  bool
	headers   bool
	skip      func(*http.Request) bool
	onError   func(*http.Request, error)
}

// Path limits every request with the budget node at p, the subject being
// the client's IP address (RemoteIP) and the cost the node's own.
func Path(p string) Option { return func(c *config) { c.path = p } }

// KeyFunc chooses, per request, the budget path, the subject (sent as KEY
// unless empty) and the cost (sent as COST when positive; 0 means the
// node's configured cost). A non-nil error, an empty path or a negative
// cost means no decision (see FailOpen). KeyFunc replaces Path.
func KeyFunc(f func(r *http.Request) (path, subject string, cost int64, err error)) Option {
	return func(c *config) { c.keyFunc = f }
}

// Inline limits requests with an inline limit instead of the budget tree:
// each request calls RL.ACQUIRE key(r) RATE … with lim and cost 1. An
// empty key means no decision (see FailOpen). Inline replaces KeyFunc and
// Path.
func Inline(key func(r *http.Request) string, lim client.Limit) Option {
	return func(c *config) { c.inlineKey, c.inline = key, lim }
}

// FailOpen says what happens when there is no decision: with true (the
// default) the request proceeds unlimited, with false it is answered 503.
// Either way the error goes to the ErrorHandler.
func FailOpen(open bool) Option { return func(c *config) { c.failOpen = open } }

// Headers turns the rate-limit headers on (the default) or off. Retry-After
// and the problem body of a 429 are sent either way.
func Headers(on bool) Option { return func(c *config) { c.headers = on } }

// Skip exempts the requests for which skip returns true: they proceed
// without asking sluice, count against nothing and get no rate-limit
// headers (health checks, an allow-list, internal callers).
func Skip(skip func(r *http.Request) bool) Option { return func(c *config) { c.skip = skip } }

// ErrorHandler receives every error of the middleware: sluice unreachable,
// an error reply, a KeyFunc error, a policy that cannot be read. By default
// errors are logged with slog.Default at level Error. The handler must not
// write a response; FailOpen decides what the client gets.
func ErrorHandler(f func(r *http.Request, err error)) Option {
	return func(c *config) { c.onError = f }
}

// New returns the middleware. It panics if l is nil or if none of Path,
// KeyFunc and Inline says what to limit.
func New(l *client.Client, opts ...Option) func(http.Handler) http.Handler {
	if l == nil {
		panic("httplimit: New needs a *client.Client, got nil")
	}
	c := config{failOpen: true, headers: true}
	for _, o := range opts {
		o(&c)
	}
	if c.inlineKey == nil && c.keyFunc == nil {
		if c.path == "" {
			panic("httplimit: New needs Path, KeyFunc or Inline to know what to limit")
		}
		path := c.path
		c.keyFunc = func(r *http.Request) (string, string, int64, error) { return path, RemoteIP(r), 0, nil }
	}
	if c.onError == nil {
		c.onError = func(r *http.Request, err error) {
			slog.ErrorContext(r.Context(), "rate limiting", "method", r.Method, "url", r.URL.String(), "err", err)
		}
	}
	m := &middleware{l: l, config: c}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { m.serve(w, r, next) })
	}
}

type middleware struct {
	l *client.Client
	config
}

type decisionKey struct{}

// FromContext returns the decision the middleware made for the request
// whose context this is; false when it made none (a request let through
// without a decision, see FailOpen).
func FromContext(ctx context.Context) (client.Decision, bool) {
	d, ok := ctx.Value(decisionKey{}).(client.Decision)
	return d, ok
}

// RemoteIP returns the IP address in r.RemoteAddr (without the port), or
// r.RemoteAddr itself when it is not host:port. It does not read
// forwarding headers: behind a proxy, write a KeyFunc that trusts yours.
func RemoteIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

func (m *middleware) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	if m.skip != nil && m.skip(r) {
		next.ServeHTTP(w, r)
		return
	}
	ctx := r.Context()
	var (
		d       client.Decision
		err     error
		window  time.Duration
		headers = m.headers
	)
	if m.inlineKey != nil {
		window = m.inline.Per
		if window == 0 {
			window = time.Second
		}
		if key := m.inlineKey(r); key == "" {
			err = errors.New("httplimit: the Inline key function returned an empty key")
		} else if d, err = m.l.AcquireInline(ctx, key, m.inline); err != nil {
			err = fmt.Errorf("httplimit: RL.ACQUIRE %s (inline): %w", key, err)
		}
	} else {
		path, subject, cost, kerr := m.keyFunc(r)
		switch {
		case kerr != nil:
			err = fmt.Errorf("httplimit: KeyFunc: %w", kerr)
		case path == "":
			err = errors.New("httplimit: KeyFunc returned an empty path")
		case cost < 0:
			err = fmt.Errorf("httplimit: KeyFunc returned a negative cost, %d", cost)
		default:
			var opts []client.Option
			if subject != "" {
				opts = append(opts, client.Key(subject))
			}
			if cost > 0 {
				opts = append(opts, client.Cost(cost))
			}
			if d, err = m.l.Acquire(ctx, path, opts...); err != nil {
				err = fmt.Errorf("httplimit: RL.ACQUIRE %s: %w", path, err)
			} else if headers && !d.Unlimited() && d.Source != client.SourceFallback {
				headers, window = m.budgetHeaders(r, path, d)
			}
		}
	}
	if err != nil {
		m.onError(r, err)
		if m.failOpen {
			next.ServeHTTP(w, r)
		} else {
			w.Header().Set("Retry-After", "1") // no decision says when: soon
			writeUnavailable(w)
		}
		return
	}
	if d.Err != nil {
		m.onError(r, fmt.Errorf("httplimit: sluice unavailable, decided by the client's failure policy (%s): %w", d.Source, d.Err))
	}
	if d.Source == client.SourceFailClosed {
		w.Header().Set("Retry-After", retryAfter(d.RetryAfter))
		writeUnavailable(w)
		return
	}
	r = r.WithContext(context.WithValue(ctx, decisionKey{}, d))
	if headers {
		SetHeaders(w.Header(), d, window)
	}
	if !d.Allowed {
		WriteDenied(w, d)
		return
	}
	next.ServeHTTP(w, r)
}

// budgetHeaders reports whether the node governing path wants headers, and
// the window of the level the decision names (0 if unknown).
func (m *middleware) budgetHeaders(r *http.Request, path string, d client.Decision) (bool, time.Duration) {
	pol, err := m.l.Policy(r.Context(), path)
	if err != nil {
		m.onError(r, fmt.Errorf("httplimit: headers for %s: %w", path, err))
		return true, 0
	}
	if !pol.ResponseHeaders {
		return false, 0
	}
	level := d.LimitedBy
	if strings.HasPrefix(level, "quota:") {
		return true, 0
	}
	if i := strings.IndexByte(level, '#'); i >= 0 {
		level = level[:i]
	}
	if level != path && level != "" {
		if pol, err = m.l.Policy(r.Context(), level); err != nil {
			m.onError(r, fmt.Errorf("httplimit: headers for %s, limited by %s: %w", path, level, err))
			return true, 0
		}
	}
	switch {
	case pol.HasLimit:
		return true, pol.Window
	case pol.Total > 0:
		return true, pol.TotalWindow
	}
	return true, 0
}

// retryAfter is the Retry-After of a refusal that may be retried after d:
// whole seconds rounded up, at least 1 (a client told 0 would come back
// at once, and be refused again).
func retryAfter(d time.Duration) string {
	v, _ := ratehdr.RetryAfter(max(d, time.Second))
	return v
}

// ceilSeconds rounds d up to whole seconds; 0 for d ≤ 0.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// SetHeaders sets the rate-limit headers for decision d on h, as the
// package documentation describes; window is the limit's window (0: leave
// RateLimit-Policy out). It sets nothing for an unlimited decision.
func SetHeaders(h http.Header, d client.Decision, window time.Duration) {
	ratehdr.Each(d.Limit, d.Remaining, d.Degraded, d.ResetAfter, window, h.Set)
}

// Problem types and the media type of problem bodies.
const (
	ProblemRateLimited = "https://sluice.dev/problems/rate-limited"
	ProblemUnavailable = "https://sluice.dev/problems/limiter-unavailable"
	ProblemContentType = "application/problem+json"
)

// Problem is the RFC 9457 body of a 429, members in this order.
type Problem struct {
	// Type is ProblemRateLimited.
	Type string `json:"type"`
	// Title is "Too Many Requests".
	Title string `json:"title"`
	// Status is 429.
	Status int `json:"status"`
	// Detail says where the request was limited and when to retry.
	Detail string `json:"detail"`
	// LimitedBy is the reply's limited_by: the level that refused.
	LimitedBy string `json:"limited_by"`
	// RetryAfterMs is the reply's retry_after_ms: -1 when the request can
	// never be admitted with its cost.
	RetryAfterMs int64 `json:"retry_after_ms"`
}

// NewProblem returns the problem body for a refused decision.
func NewProblem(d client.Decision) Problem {
	p := Problem{Type: ProblemRateLimited, Title: http.StatusText(http.StatusTooManyRequests),
		Status: http.StatusTooManyRequests, LimitedBy: d.LimitedBy}
	if d.RetryAfter < 0 {
		p.RetryAfterMs = -1
		p.Detail = "rate limit exceeded at " + d.LimitedBy + "; the request costs more than the limit's capacity and can never be admitted"
	} else {
		p.RetryAfterMs = d.RetryAfter.Milliseconds()
		p.Detail = "rate limit exceeded at " + d.LimitedBy + "; retry in " + strconv.FormatInt(max(ceilSeconds(d.RetryAfter), 1), 10) + " s"
	}
	return p
}

// WriteDenied answers a refused request: Retry-After (unless the request
// can never be admitted), Content-Type application/problem+json, status
// 429 and the Problem body. Rate-limit headers, if wanted, must be set
// before (SetHeaders).
func WriteDenied(w http.ResponseWriter, d client.Decision) {
	if d.RetryAfter >= 0 {
		w.Header().Set("Retry-After", retryAfter(d.RetryAfter))
	}
	writeProblem(w, http.StatusTooManyRequests, NewProblem(d))
}

func writeProblem(w http.ResponseWriter, status int, body any) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(body) // strings and integers only: cannot fail
	h := w.Header()
	h.Set("Content-Type", ProblemContentType)
	h.Set("Content-Length", strconv.Itoa(b.Len()))
	w.WriteHeader(status)
	_, _ = w.Write(b.Bytes())
}

// unavailable is the 503 body of FailOpen(false).
type unavailable struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
}

func writeUnavailable(w http.ResponseWriter) {
	writeProblem(w, http.StatusServiceUnavailable, unavailable{Type: ProblemUnavailable,
		Title: http.StatusText(http.StatusServiceUnavailable), Status: http.StatusServiceUnavailable,
		Detail: "rate limiting is unavailable; try again later"})
}
