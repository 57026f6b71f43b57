package cooperate

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// State is what a response says about one policy.
type State struct {
	// Policy is the policy's name ("" for X-RateLimit-* and unnamed ones).
	Policy string
	// Limit is the quota (q, RateLimit-Limit, X-RateLimit-Limit); 0 unknown.
	Limit int64
	// Window is the quota's window (w); 0 unknown.
	Window time.Duration
	// Remaining is what is left (r); -1 unknown.
	Remaining int64
	// Reset is the time until the quota is back (t); 0 unknown.
	Reset time.Duration
}

// Parse reads the rate-limit headers of a response received at now: the
// current IETF draft's RateLimit and RateLimit-Policy, the older draft's
// forms and RateLimit-Limit/-Remaining/-Reset, and
// X-RateLimit-Limit/-Remaining/-Reset. It returns one State per policy
// that says how many requests remain, in the order met; unreadable items
// are skipped.
func Parse(h http.Header, now time.Time) []State {
	var out []State
	quota := map[string]State{}
	for _, v := range h.Values("RateLimit-Policy") {
		for _, it := range items(v) {
			s := State{Policy: it.name, Remaining: -1}
			if it.bare >= 0 {
				s.Limit = it.bare // older draft: 10;w=1
			}
			if q, ok := it.params["q"]; ok {
				s.Limit = q
			}
			if w, ok := it.params["w"]; ok && w > 0 {
				s.Window = time.Duration(w) * time.Second
			}
			quota[s.Policy] = s
		}
	}
	for _, v := range h.Values("RateLimit") {
		if strings.Contains(v, "remaining=") { // older draft: limit=10, remaining=9, reset=1
			s := State{Remaining: -1}
			for _, part := range strings.Split(v, ",") {
				k, val, _ := strings.Cut(strings.TrimSpace(part), "=")
				n, err := strconv.ParseInt(strings.TrimSpace(val), 10, 64)
				if err != nil || n < 0 {
					continue
				}
				switch strings.ToLower(k) {
				case "limit":
					s.Limit = n
				case "remaining":
					s.Remaining = n
				case "reset":
					s.Reset = time.Duration(n) * time.Second
				}
			}
			out = append(out, merge(s, quota))
			continue
		}
		for _, it := range items(v) {
			s := State{Policy: it.name, Remaining: -1}
			if r, ok := it.params["r"]; ok {
				s.Remaining = r
			}
			if t, ok := it.params["t"]; ok {
				s.Reset = time.Duration(t) * time.Second
			}
			out = append(out, merge(s, quota))
		}
	}
	for _, prefix := range []string{"RateLimit-", "X-RateLimit-"} {
		rem, ok := number(h.Get(prefix + "Remaining"))
		if !ok || len(out) > 0 && prefix == "X-RateLimit-" {
			continue // the draft's fields, when sent, say it better
		}
		s := State{Remaining: rem}
		s.Limit, _ = number(h.Get(prefix + "Limit"))
		if r, ok := number(h.Get(prefix + "Reset")); ok {
			if r > 1e9 { // a Unix time
				s.Reset = max(time.Unix(r, 0).Sub(now), 0)
			} else {
				s.Reset = time.Duration(r) * time.Second
			}
		}
		out = append(out, merge(s, quota))
	}
	return out
}

// merge adds the quota and window that RateLimit-Policy gave s's policy.
func merge(s State, quota map[string]State) State {
	if q, ok := quota[s.Policy]; ok {
		if s.Limit == 0 {
			s.Limit = q.Limit
		}
		s.Window = q.Window
	}
	return s
}

// RetryAfter reads Retry-After: seconds, or an HTTP date (then the time
// from now to it, at least 0).
func RetryAfter(h http.Header, now time.Time) (time.Duration, bool) {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0, false
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 {
		return time.Duration(min(n, 1<<31)) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0), true
	}
	return 0, false
}

func number(v string) (int64, bool) {
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	return n, err == nil && n >= 0
}

// item is one member of a structured-field list: a name (a string or a
// token) or a bare integer, and its integer parameters.
type item struct {
	name   string
	bare   int64 // -1 unless the item is an integer
	params map[string]int64
}

// items reads a structured-field list of items with parameters, such as
// `"burst";q=10;w=1, "day";q=1000;w=86400`. Parameters that are not
// integers are skipped.
func items(v string) []item {
	var out []item
	for _, member := range splitList(v) {
		parts := strings.Split(member, ";")
		it := item{bare: -1, params: map[string]int64{}}
		head := strings.TrimSpace(parts[0])
		if n, err := strconv.ParseInt(head, 10, 64); err == nil {
			it.bare = n
		} else {
			it.name = strings.Trim(head, `"`)
		}
		for _, p := range parts[1:] {
			k, val, ok := strings.Cut(strings.TrimSpace(p), "=")
			if !ok {
				continue
			}
			if n, err := strconv.ParseInt(strings.TrimSpace(val), 10, 64); err == nil && n >= 0 {
				it.params[strings.ToLower(strings.TrimSpace(k))] = n
			}
		}
		out = append(out, it)
	}
	return out
}

// splitList splits a list at the commas outside quoted strings.
func splitList(v string) []string {
	var out []string
	quoted, start := false, 0
	for i := 0; i < len(v); i++ {
		switch v[i] {
		case '\\':
			if quoted {
				i++
			}
		case '"':
			quoted = !quoted
		case ',':
			if !quoted {
				out = append(out, v[start:i])
				start = i + 1
			}
		}
	}
	if s := strings.TrimSpace(v[start:]); s != "" {
		out = append(out, v[start:])
	}
	return out
}
