package commands

import (
	"math"

	"github.com/sluice-rl/sluice/bounds"
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
	return boundArg(b, name, bounds.Int{Lo: lo, Hi: hi})
}

// boundArg parses a named integer within r, one of package bounds's
// ranges; the error is that package's message for the argument.
func boundArg(b []byte, name string, r bounds.Int) (int64, string) {
	n, ok := parseInt(b)
	if !ok || !r.In(n) {
		return 0, errPrefix + r.Msg(name)
	}
	return n, ""
}

// twice is the reply to an option given more than once.
func twice(name string) string { return errPrefix + name + " given twice" }
