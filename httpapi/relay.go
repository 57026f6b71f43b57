package httpapi

import (
	"bytes"
	"strconv"
	"strings"

	"github.com/sluice-rl/sluice/fault"
)

// parseReply reads one RESP2 reply a member sent back for a relayed
// reservation command: an integer (int64), a bulk or simple string
// (string), an array of those ([]any), or an error reply as a
// *fault.Error with the member's code and message.
func parseReply(raw []byte) (any, error) {
	v, rest, err := parseValue(raw, 0)
	if err == nil && len(rest) != 0 {
		err = errBadReply(raw)
	}
	return v, err
}

func errBadReply(raw []byte) error {
	return fault.New("ERR", "unexpected reply from the reservation's node: %.100q", raw)
}

func parseValue(b []byte, depth int) (any, []byte, error) {
	i := bytes.Index(b, []byte("\r\n"))
	if len(b) == 0 || i < 1 || depth > 2 {
		return nil, nil, errBadReply(b)
	}
	line, rest := string(b[1:i]), b[i+2:]
	switch b[0] {
	case '+':
		return line, rest, nil
	case '-':
		code, msg, _ := strings.Cut(line, " ")
		return nil, nil, fault.New(code, "%s", msg)
	case ':':
		n, err := strconv.ParseInt(line, 10, 64)
		if err != nil {
			return nil, nil, errBadReply(b)
		}
		return n, rest, nil
	case '$':
		n, err := strconv.Atoi(line)
		if err != nil || n < -1 || n > len(rest)-2 {
			return nil, nil, errBadReply(b)
		}
		if n == -1 {
			return nil, rest, nil
		}
		return string(rest[:n]), rest[n+2:], nil
	case '*':
		n, err := strconv.Atoi(line)
		if err != nil || n < 0 || n > 64 {
			return nil, nil, errBadReply(b)
		}
		out := make([]any, n)
		for k := range out {
			if out[k], rest, err = parseValue(rest, depth+1); err != nil {
				return nil, nil, err
			}
		}
		return out, rest, nil
	}
	return nil, nil, errBadReply(b)
}
