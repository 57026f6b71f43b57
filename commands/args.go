package commands

import (
	"math"
	"strconv"
	"time"
)

// Replies shared by many commands, in Redis's words.
const (
	errSyntax  = "ERR syntax error"
	errNoAuth  = "NOAUTH Authentication required."
	errNotInt  = "ERR value is not an integer or out of range"
	errPrefix  = "ERR "
	okReply    = "OK"
	pongReply  = "PONG"
	queuedHint = ""
)

// WrongArity is Redis's reply for a bad argument count.
func WrongArity(name string) string {
	return "ERR wrong number of arguments for '" + lower(name) + "' command"
}

// UnknownCommand is Redis's reply for a command it does not know.
func UnknownCommand(name []byte, args [][]byte) string {
	s := "ERR unknown command '" + printable(name, 128) + "', with args beginning with: "
	for i, a := range args {
		if i == 8 {
			break
		}
		s += "'" + printable(a, 64) + "' "
	}
	return s
}

// printable quotes untrusted bytes for an error line: no CR/LF may reach
// the wire, and long input is cut.
func printable(b []byte, max int) string {
	if len(b) > max {
		b = b[:max]
	}
	out := make([]byte, 0, len(b))
	for _, c := range b {
		if c < 0x20 || c == 0x7f || c == '\'' {
			out = append(out, '?')
		} else {
			out = append(out, c)
		}
	}
	return string(out)
}

func lower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// eq reports whether arg equals the ASCII keyword kw, ignoring case,
// without allocating.
func eq(arg []byte, kw string) bool {
	if len(arg) != len(kw) {
		return false
	}
	for i := 0; i < len(arg); i++ {
		c := arg[i]
		if 'a' <= c && c <= 'z' {
			c -= 'a' - 'A'
		}
		k := kw[i]
		if 'a' <= k && k <= 'z' {
			k -= 'a' - 'A'
		}
		if c != k {
			return false
		}
	}
	return true
}

// parseInt parses a base-10 int64 the way Redis does: optional '-', digits,
// no spaces, no '+', no leading zeros beyond "0".
func parseInt(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 20 {
		return 0, false
	}
	neg := b[0] == '-'
	if neg {
		b = b[1:]
		if len(b) == 0 {
			return 0, false
		}
	}
	if len(b) > 1 && b[0] == '0' {
		return 0, false
	}
	var n uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if n > (math.MaxUint64-d)/10 {
			return 0, false
		}
		n = n*10 + d
	}
	if neg {
		if n > 1<<63 {
			return 0, false
		}
		return -int64(n), true
	}
	if n > math.MaxInt64 {
		return 0, false
	}
	return int64(n), true
}

// intArg parses a named integer in [lo, hi]; the error names the argument
// and the accepted range.
func intArg(b []byte, name string, lo, hi int64) (int64, string) {
	n, ok := parseInt(b)
	if !ok || n < lo || n > hi {
		return 0, rangeErr(name, lo, hi)
	}
	return n, ""
}

func rangeErr(name string, lo, hi int64) string {
	return errPrefix + name + " must be an integer between " + strconv.FormatInt(lo, 10) + " and " + strconv.FormatInt(hi, 10)
}

var unitWords = []struct {
	word string
	d    time.Duration
}{
	{"second", time.Second}, {"seconds", time.Second}, {"sec", time.Second},
	{"minute", time.Minute}, {"minutes", time.Minute}, {"min", time.Minute},
	{"hour", time.Hour}, {"hours", time.Hour},
	{"day", 24 * time.Hour}, {"days", 24 * time.Hour},
	{"week", 7 * 24 * time.Hour}, {"weeks", 7 * 24 * time.Hour},
}

// parseWindow parses a PER unit: a word (second, minute, hour, day, week)
// or a duration such as 250ms, 5m, 1h30m, 7d. Zero-allocation.
func parseWindow(b []byte) (time.Duration, bool) {
	for _, u := range unitWords {
		if eq(b, u.word) {
			return u.d, true
		}
	}
	return parseDuration(b)
}

// parseDuration parses a sequence of <digits><unit> with units ns, us, µs,
// ms, s, m, h, d, w: Go's duration syntax plus days and weeks, without
// fractions or signs.
func parseDuration(b []byte) (time.Duration, bool) {
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
		if i == 0 {
			return 0, false
		}
		b = b[i:]
		j := 0
		for j < len(b) && (b[j] < '0' || b[j] > '9') {
			j++
		}
		var unit time.Duration
		switch string(b[:j]) {
		case "ns":
			unit = time.Nanosecond
		case "us", "µs":
			unit = time.Microsecond
		case "ms":
			unit = time.Millisecond
		case "s":
			unit = time.Second
		case "m":
			unit = time.Minute
		case "h":
			unit = time.Hour
		case "d":
			unit = 24 * time.Hour
		case "w":
			unit = 7 * 24 * time.Hour
		default:
			return 0, false
		}
		if n > int64(math.MaxInt64/unit) {
			return 0, false
		}
		d := time.Duration(n) * unit
		if total > math.MaxInt64-d {
			return 0, false
		}
		total += d
		b = b[j:]
	}
	return total, true
}

// FormatWindow writes a window the way users wrote it: "second", "minute",
// "hour", "day" when exact, else a Go duration with days folded in.
func FormatWindow(d time.Duration) string {
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
	if d >= 24*time.Hour && d%(24*time.Hour) == 0 {
		return strconv.FormatInt(int64(d/(24*time.Hour)), 10) + "d"
	}
	return d.String()
}
