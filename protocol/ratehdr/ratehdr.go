// Package ratehdr writes the rate-limit headers of a limiting reply
// (docs/clients.md, "Headers") for every front that carries them: package
// httplimit's middleware, the server's HTTP API and Envoy's
// response_headers_to_add. It lives in the protocol module (protocol/, the
// standard library alone), not in an SDK, so that the server and the Go
// client (clients/go) share one definition without either importing the
// other.
package ratehdr

import (
	"strconv"
	"time"
)

// Each calls f with the name and value of each header for a reply whose
// tightest level has capacity limit (-1: nothing limits, then no header),
// remaining tokens (sent as 0 when degraded or negative) and is full again
// after resetAfter, the limit's window being window (0: unknown, then no
// RateLimit-Policy), in the order RateLimit-Policy, RateLimit,
// X-RateLimit-Limit, X-RateLimit-Remaining, X-RateLimit-Reset. Times are
// whole seconds, rounded up.
func Each(limit, remaining int64, degraded bool, resetAfter, window time.Duration, f func(name, value string)) {
	if limit < 0 {
		return
	}
	if degraded || remaining < 0 {
		remaining = 0
	}
	reset := strconv.FormatInt(CeilSeconds(resetAfter), 10)
	lim := strconv.FormatInt(limit, 10)
	rem := strconv.FormatInt(remaining, 10)
	if window > 0 {
		f("RateLimit-Policy", `"burst";q=`+lim+";w="+strconv.FormatInt(max(CeilSeconds(window), 1), 10))
	}
	f("RateLimit", `"burst";r=`+rem+";t="+reset)
	f("X-RateLimit-Limit", lim)
	f("X-RateLimit-Remaining", rem)
	f("X-RateLimit-Reset", reset)
}

// RetryAfter returns the Retry-After value of a refusal that may be
// retried after retry (whole seconds, rounded up), and false when it can
// never be admitted (retry < 0).
func RetryAfter(retry time.Duration) (string, bool) {
	if retry < 0 {
		return "", false
	}
	return strconv.FormatInt(CeilSeconds(retry), 10), true
}

// CeilSeconds rounds d up to whole seconds; 0 for d ≤ 0.
func CeilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}
