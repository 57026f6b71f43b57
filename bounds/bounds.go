// Package bounds is the one place where the bounds of a call's arguments
// and their messages are written: the rate, window (PER), burst, cost,
// wait and quota of a limiting call, as RESP, the HTTP/JSON front, Envoy
// rule files and budget configurations all check them.
//
// Each bound gives its range and one function for its message, given
// the argument's name as that front's user writes it (RATE in RESP, rate
// in HTTP JSON, requests_per_unit in an Envoy rule, sustained.rate in a
// budget config): "<name> must be an integer between LO and HI". The text
// after the name is the same on every front; a front adds only its own
// framing (RESP's "ERR ", a problem's detail, a rule file's file:line).
//
// The package imports nothing of the module but the window syntax
// (protocol/window), so that the engine, at the bottom, takes its bounds
// from here too.
package bounds

import (
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-rl/sluice/protocol/window"
)

// Limits on a call's numbers. They keep every intermediate product of the
// engine inside 128 bits and every time inside int64 nanoseconds.
const (
	MaxRate  = 1_000_000_000_000 // tokens per window
	MaxBurst = 1_000_000_000_000
	MaxCost  = 1_000_000_000_000
	// MaxWaitMs bounds WAIT (wait_ms, a budget's max_wait_ms): a held
	// connection costs a goroutine and a timer, and shutdown must not wait
	// longer than this for in-flight replies.
	MaxWaitMs = 60000
	// MaxTTLMs bounds a reservation's TTL (TTL, ttl_ms, RL.RENEW's): an
	// hour, so that an abandoned reservation holds its tokens and slot no
	// longer.
	MaxTTLMs = 3_600_000
	// MaxConcurrency bounds a concurrency limit (CONCURRENCY, concurrency,
	// a budget node's).
	MaxConcurrency = 1_000_000
	MinWindow      = time.Millisecond
	MaxWindow      = 3650 * 24 * time.Hour
)

// Int is the inclusive range of an integer argument.
type Int struct{ Lo, Hi int64 }

// The integer bounds of a call.
var (
	Rate  = Int{1, MaxRate}   // RATE, rate, sustained.rate, requests.rate
	Burst = Int{1, MaxBurst}  // BURST, burst, burst.capacity
	Cost  = Int{0, MaxCost}   // COST, cost
	Wait  = Int{0, MaxWaitMs} // WAIT, wait_ms, MAXWAIT, max_wait_ms
	Quota = Int{1, MaxRate}   // QUOTA, quota.limit
	TTL   = Int{1, MaxTTLMs}  // TTL, ttl_ms (milliseconds)
	// Concurrency is the inline form's CONCURRENCY (a budget node's may
	// be 0: none).
	Concurrency = Int{1, MaxConcurrency}
	// RequestsPerUnit is an Envoy rule's requests_per_unit: a uint32 in
	// envoyproxy/ratelimit's configuration, where 0 refuses every request.
	RequestsPerUnit = Int{0, math.MaxUint32}
)

// In reports whether n lies in the range.
func (b Int) In(n int64) bool { return b.Lo <= n && n <= b.Hi }

// Text is the message after the argument's name:
// "must be an integer between LO and HI".
func (b Int) Text() string {
	return "must be an integer between " + strconv.FormatInt(b.Lo, 10) + " and " + strconv.FormatInt(b.Hi, 10)
}

// Msg is the whole message for the argument name.
func (b Int) Msg(name string) string { return name + " " + b.Text() }

// windowText is the message after a window argument's name (PER, per,
// sustained.window, an Envoy rule's duration unit).
var windowText = "must be second, minute, hour, day, week or a duration such as 250ms, 5m, 1h30m, 7d, between " +
	window.Format(MinWindow) + " and " + window.Format(MaxWindow)

// ParseWindow parses a window (window.Parse: a word such as minute, or
// whole numbers with units such as 250ms or 1h30m) and checks that it lies
// between MinWindow and MaxWindow. It does not allocate.
func ParseWindow(b []byte) (time.Duration, bool) {
	d, ok := window.Parse(b)
	return d, ok && InWindow(d)
}

// InWindow reports whether d is an accepted window.
func InWindow(d time.Duration) bool { return MinWindow <= d && d <= MaxWindow }

// WindowText is the message after a window argument's name.
func WindowText() string { return windowText }

// WindowMsg is the whole message for the window argument name.
func WindowMsg(name string) string { return name + " " + windowText }

// OneOfText is the message after the name of an argument that takes one
// of names: "must be one of a, b, c".
func OneOfText(names []string) string { return "must be one of " + strings.Join(names, ", ") }

// OneOfMsg is the whole message for the argument name.
func OneOfMsg(name string, names []string) string { return name + " " + OneOfText(names) }

// yesWords and noWords are what a yes-or-no argument accepts, any case.
var yesWords, noWords = []string{"yes", "1", "true"}, []string{"no", "0", "false"}

// ParseYesNo reads a yes-or-no argument: yes, 1 or true; no, 0 or false
// (any case). ok is false for anything else.
func ParseYesNo(b []byte) (v, ok bool) {
	for _, w := range yesWords {
		if strings.EqualFold(string(b), w) {
			return true, true
		}
	}
	for _, w := range noWords {
		if strings.EqualFold(string(b), w) {
			return false, true
		}
	}
	return false, false
}

// YesNoMsg is the message for a yes-or-no argument name.
func YesNoMsg(name string) string { return name + " must be yes or no" }
