// Package window reads and writes the windows of sluice's limits (PER 250ms,
// 1h30m, day): the one syntax the server parses and the client sends. It
// lives in the protocol module (protocol/, the standard library alone),
// not in an SDK, so that the server (packages engine, bounds, peer) and
// the Go client (clients/go) share it without either importing the other.
package window

import (
	"math"
	"strconv"
	"time"
)

// windowWords are the unit words a window may be given as.
var windowWords = []struct {
	word string
	d    time.Duration
}{
	{"second", time.Second}, {"seconds", time.Second}, {"sec", time.Second},
	{"minute", time.Minute}, {"minutes", time.Minute}, {"min", time.Minute},
	{"hour", time.Hour}, {"hours", time.Hour},
	{"day", 24 * time.Hour}, {"days", 24 * time.Hour},
	{"week", 7 * 24 * time.Hour}, {"weeks", 7 * 24 * time.Hour},
}

// windowUnits are the units of the <n><unit>… form, largest first.
var windowUnits = []struct {
	name string
	d    time.Duration
}{
	{"w", 7 * 24 * time.Hour}, {"d", 24 * time.Hour}, {"h", time.Hour}, {"m", time.Minute}, {"s", time.Second},
	{"ms", time.Millisecond}, {"us", time.Microsecond}, {"µs", time.Microsecond}, {"ns", time.Nanosecond},
}

// Parse parses a limit's window: a word (second, minute, hour, day,
// week, and their plurals) or whole numbers with units, largest first or
// not, such as 250ms, 5m, 1h30m, 7d, 1s500ms (units w, d, h, m, s, ms, us,
// µs, ns; no signs, no fractions). It does not allocate. Range checks are
// the caller's (the server takes 1ms to 3650d).
func Parse(b []byte) (time.Duration, bool) {
	for _, u := range windowWords {
		if equalFold(b, u.word) {
			return u.d, true
		}
	}
	if len(b) == 0 || len(b) > 64 {
		return 0, false
	}
	var total time.Duration
	for len(b) > 0 {
		i := 0
		var n int64
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			if n > math.MaxInt64/10 {
				return 0, false
			}
			n = n*10 + int64(b[i]-'0')
			i++
		}
		j := i
		for j < len(b) && (b[j] < '0' || b[j] > '9') {
			j++
		}
		if i == 0 || j == i {
			return 0, false
		}
		var unit time.Duration
		for _, u := range windowUnits {
			if string(b[i:j]) == u.name {
				unit = u.d
				break
			}
		}
		if unit == 0 || n > int64((math.MaxInt64-total)/unit) {
			return 0, false
		}
		total += time.Duration(n) * unit
		b = b[j:]
	}
	return total, true
}

// Format writes a window so that Parse reads it back: the word
// second, minute, hour or day when it is exactly one, else its non-zero
// parts largest first without fractions (250ms, 1h30m, 1s500ms, 7d).
func Format(d time.Duration) string {
	switch d {
	case time.Second:
		return "second"
	case time.Minute:
		return "minute"
	case time.Hour:
		return "hour"
	case 24 * time.Hour:
		return "day"
	}
	if d <= 0 {
		return d.String()
	}
	var b []byte
	for _, u := range windowUnits {
		if u.name == "w" || u.name == "µs" {
			continue // days and us cover them
		}
		if n := d / u.d; n > 0 {
			b = strconv.AppendInt(b, int64(n), 10)
			b = append(b, u.name...)
			d -= n * u.d
		}
	}
	return string(b)
}

// equalFold reports whether b equals the lower-case ASCII word w, ignoring
// case.
func equalFold(b []byte, w string) bool {
	if len(b) != len(w) {
		return false
	}
	for i := range b {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != w[i] {
			return false
		}
	}
	return true
}
