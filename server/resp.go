package server

import (
	"strconv"
)

// limits are the protocol bounds a connection enforces while parsing.
type limits struct {
	maxArgs int
	maxBulk int
	preAuth bool // the small limits of a connection that has not authenticated
}

// Before AUTH a connection may send only small commands, as in Redis: a
// client that has not proven who it is cannot make the server read and
// keep large arguments.
var preAuthLimits = limits{maxArgs: 10, maxBulk: 16 << 10, preAuth: true}

// tooManyArgs is the error for a command of more than maxArgs arguments,
// what naming the form (a multibulk length, an inline request).
func (lim limits) tooManyArgs(what string) protoError {
	if lim.preAuth {
		return protoError("unauthenticated " + what + " (at most " + strconv.Itoa(lim.maxArgs) + " arguments before AUTH)")
	}
	return protoError("invalid " + what + " (at most " + strconv.Itoa(lim.maxArgs) + " arguments, --max-args)")
}

// maxInline bounds an inline (telnet-style) command line, as Redis does.
const maxInline = 64 << 10

// protoError is a RESP protocol violation; its text follows
// "-ERR Protocol error: " and the connection is closed after it.
type protoError string

func (e protoError) Error() string { return string(e) }

// parseCommand parses one command at the start of b into args, which it
// reuses; each argument aliases b (inline arguments are unescaped in place).
// It returns the number of bytes consumed: 0 means b holds no complete
// command yet, and then need is the buffer size the command requires so
// far (a hint for growing the buffer). An empty command (a blank inline
// line, *0 or *-1, which Redis ignores) consumes its bytes with no args.
func parseCommand(b []byte, args [][]byte, lim limits) (out [][]byte, n int, need int, err error) {
	out = args[:0]
	if len(b) == 0 {
		return out, 0, 1, nil
	}
	if b[0] != '*' {
		return parseInline(b, out, lim)
	}
	count, i, ok, perr := parseHeader(b, 1, "invalid multibulk length")
	if perr != nil || !ok {
		return out, 0, len(b) + 1, perr
	}
	if count <= 0 {
		return out, i, 0, nil
	}
	if count > int64(lim.maxArgs) {
		return out, 0, 0, lim.tooManyArgs("multibulk length")
	}
	for a := int64(0); a < count; a++ {
		if i >= len(b) {
			return out, 0, len(b) + 1, nil
		}
		if b[i] != '$' {
			return out, 0, 0, protoError("expected '$', got '" + printableByte(b[i]) + "'")
		}
		size, j, ok, perr := parseHeader(b, i+1, "invalid bulk length")
		if perr != nil {
			return out, 0, 0, perr
		}
		if !ok {
			return out, 0, len(b) + 1, nil
		}
		if size < 0 {
			return out, 0, 0, protoError("invalid bulk length")
		}
		if size > int64(lim.maxBulk) {
			if lim.preAuth {
				return out, 0, 0, protoError("unauthenticated bulk length (at most " + strconv.Itoa(lim.maxBulk) + " bytes before AUTH)")
			}
			return out, 0, 0, protoError("invalid bulk length (at most " + strconv.Itoa(lim.maxBulk) + " bytes, --max-bulk-len)")
		}
		end := j + int(size)
		if end+2 > len(b) {
			return out, 0, end + 2, nil
		}
		if b[end] != '\r' || b[end+1] != '\n' {
			return out, 0, 0, protoError("invalid bulk length")
		}
		out = append(out, b[j:end:end])
		i = end + 2
	}
	return out, i, 0, nil
}

// parseHeader reads a decimal number ending in CRLF starting at b[i]. ok is
// false if the line is not complete yet.
func parseHeader(b []byte, i int, what string) (v int64, next int, ok bool, err error) {
	neg := false
	if i < len(b) && b[i] == '-' {
		neg = true
		i++
	}
	start := i
	for ; i < len(b); i++ {
		c := b[i]
		if c == '\r' {
			break
		}
		if c < '0' || c > '9' || i-start >= 18 {
			return 0, 0, false, protoError(what)
		}
		v = v*10 + int64(c-'0')
	}
	if i+1 >= len(b) {
		if i-start > 18 {
			return 0, 0, false, protoError(what)
		}
		return 0, 0, false, nil
	}
	if i == start || b[i+1] != '\n' {
		return 0, 0, false, protoError(what)
	}
	if neg {
		v = -v
	}
	return v, i + 2, true, nil
}

// parseInline parses a telnet-style line the way Redis splits it:
// whitespace-separated words, "double quotes" with \n \r \t \b \a \\ \"
// and \xhh escapes, 'single quotes' with \'. Arguments are unescaped in
// place in b. A line of more than lim.maxArgs words is refused as a
// multibulk header of as many would be (a 64 KiB line holds 32,768).
func parseInline(b []byte, out [][]byte, lim limits) ([][]byte, int, int, error) {
	eol := -1
	for i, c := range b {
		if c == '\n' {
			eol = i
			break
		}
		if i >= maxInline {
			return out, 0, 0, protoError("too big inline request")
		}
	}
	if eol < 0 {
		return out, 0, len(b) + 1, nil
	}
	line := b[:eol]
	if len(line) > 0 && line[len(line)-1] == '\r' {
		line = line[:len(line)-1]
	}
	i := 0
	for {
		for i < len(line) && isSpace(line[i]) {
			i++
		}
		if i == len(line) {
			return out, eol + 1, 0, nil
		}
		if len(out) == lim.maxArgs {
			return out, 0, 0, lim.tooManyArgs("inline request")
		}
		w := i // write position for the unescaped argument
		start := w
		switch line[i] {
		case '"':
			i++
			for {
				if i >= len(line) {
					return out, 0, 0, protoError("unbalanced quotes in request")
				}
				c := line[i]
				if c == '"' {
					i++
					break
				}
				if c == '\\' && i+1 < len(line) {
					i++
					switch e := line[i]; e {
					case 'n':
						c = '\n'
					case 'r':
						c = '\r'
					case 't':
						c = '\t'
					case 'b':
						c = '\b'
					case 'a':
						c = '\a'
					case 'x':
						if i+2 < len(line) && isHex(line[i+1]) && isHex(line[i+2]) {
							c = unhex(line[i+1])<<4 | unhex(line[i+2])
							i += 2
						} else {
							c = 'x'
						}
					default:
						c = e
					}
				}
				line[w] = c
				w++
				i++
			}
			if i < len(line) && !isSpace(line[i]) {
				return out, 0, 0, protoError("unbalanced quotes in request")
			}
		case '\'':
			i++
			for {
				if i >= len(line) {
					return out, 0, 0, protoError("unbalanced quotes in request")
				}
				c := line[i]
				if c == '\'' {
					i++
					break
				}
				if c == '\\' && i+1 < len(line) && line[i+1] == '\'' {
					i++
					c = '\''
				}
				line[w] = c
				w++
				i++
			}
			if i < len(line) && !isSpace(line[i]) {
				return out, 0, 0, protoError("unbalanced quotes in request")
			}
		default:
			for i < len(line) && !isSpace(line[i]) {
				line[w] = line[i]
				w++
				i++
			}
		}
		out = append(out, line[start:w:w])
	}
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' || c == '\f'
}

func isHex(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	}
	return c - 'a' + 10
}

func printableByte(c byte) string {
	if c < 0x20 || c > 0x7e || c == '\'' {
		return "\\x" + strconv.FormatUint(uint64(c), 16)
	}
	return string(c)
}
