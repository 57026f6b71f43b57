package peer

import (
	"bytes"
	"strconv"
	"strings"

	"github.com/sluice-rl/sluice/fault"
)

// Reply is one RESP2 value another member sent back. Kind is its first
// byte: '+' simple string, '-' error, ':' integer, '$' bulk string, '*'
// array. Str holds a string's bytes or an error's whole line (code and
// message), Int an integer, Elems an array's values; Null marks a null
// bulk string or array.
type Reply struct {
	Kind  byte
	Str   string
	Int   int64
	Null  bool
	Elems []Reply
}

// maxReplyDepth and maxReplyElems bound what ParseReply reads: the
// replies the nodes send each other are flat or one array deep.
const (
	maxReplyDepth = 4
	maxReplyElems = 1 << 21
)

// ParseReply reads one complete RESP2 value: the only parser of another
// member's replies in the module.
func ParseReply(raw []byte) (Reply, error) {
	v, rest, ok := parseValue(raw, 0)
	if !ok || len(rest) != 0 {
		return Reply{}, errBadReply(raw)
	}
	return v, nil
}

func errBadReply(raw []byte) error {
	return fault.New("ERR", "unexpected reply from another node: %.100q", raw)
}

func parseValue(b []byte, depth int) (Reply, []byte, bool) {
	i := bytes.Index(b, []byte("\r\n"))
	if len(b) == 0 || i < 1 || depth > maxReplyDepth {
		return Reply{}, nil, false
	}
	r, line, rest := Reply{Kind: b[0]}, b[1:i], b[i+2:]
	switch r.Kind {
	case '+', '-':
		r.Str = string(line)
		return r, rest, true
	case ':':
		n, err := strconv.ParseInt(string(line), 10, 64)
		r.Int = n
		return r, rest, err == nil
	case '$':
		n, err := strconv.Atoi(string(line))
		switch {
		case err == nil && n == -1:
			r.Null = true
			return r, rest, true
		case err != nil || n < -1 || n > len(rest)-2:
			return Reply{}, nil, false
		case rest[n] != '\r' || rest[n+1] != '\n':
			return Reply{}, nil, false
		}
		r.Str = string(rest[:n])
		return r, rest[n+2:], true
	case '*':
		n, err := strconv.Atoi(string(line))
		switch {
		case err != nil || n < -1 || n > maxReplyElems || n > len(rest):
			return Reply{}, nil, false
		case n == -1:
			r.Null = true
			return r, rest, true
		}
		r.Elems = make([]Reply, n)
		for k := range r.Elems {
			var ok bool
			if r.Elems[k], rest, ok = parseValue(rest, depth+1); !ok {
				return Reply{}, nil, false
			}
		}
		return r, rest, true
	}
	return Reply{}, nil, false
}

// Err is an error reply as a *fault.Error with the member's code and
// message, nil for any other reply.
func (r Reply) Err() error {
	if r.Kind != '-' {
		return nil
	}
	code, msg, _ := strings.Cut(r.Str, " ")
	return &fault.Error{Code: code, Msg: msg, Retry: code == "TRYAGAIN" || code == "CLUSTERDOWN"}
}

// Strings returns an array of strings' values (bulk or simple), or false.
func (r Reply) Strings() ([]string, bool) {
	if r.Kind != '*' {
		return nil, false
	}
	out := make([]string, len(r.Elems))
	for i, e := range r.Elems {
		if e.Kind != '$' && e.Kind != '+' || e.Null {
			return nil, false
		}
		out[i] = e.Str
	}
	return out, true
}
