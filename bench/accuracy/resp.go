package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"strconv"
	"time"

	"github.com/sluice-rl/sluice/internal/resp"
)

// appendCommand appends args as one RESP multibulk command.
func appendCommand(b []byte, args ...string) []byte { return resp.AppendCommand(b, args...) }

// value is one RESP2 reply.
type value struct {
	typ  byte   // '+', '-', ':', '$' or '*'
	str  string // '+', '-' and '$' text
	n    int64  // ':' value; '$' and '*' length (-1 for nil)
	elem []value
}

// replyError is an error reply of the server.
type replyError string

func (e replyError) Error() string { return string(e) }

// Limits on what the reader accepts, so that a broken peer cannot make it
// grow without end.
const (
	maxBulk  = 64 << 20
	maxArray = 1 << 20
	maxDepth = 8
)

// errProtocol marks bytes that are not RESP2.
var errProtocol = errors.New("protocol error")

// conn is one RESP2 connection.
type conn struct {
	c    net.Conn
	r    *bufio.Reader
	addr string
}

func dial(addr string, timeout time.Duration) (*conn, error) {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, err
	}
	return &conn{c: c, r: bufio.NewReaderSize(c, 64<<10), addr: addr}, nil
}

func (c *conn) Close() error { return c.c.Close() }

// do sends one command and reads its reply; an error reply is returned as
// a replyError.
func (c *conn) do(timeout time.Duration, args ...string) (value, error) {
	c.c.SetDeadline(time.Now().Add(timeout))
	defer c.c.SetDeadline(time.Time{})
	if _, err := c.c.Write(appendCommand(nil, args...)); err != nil {
		return value{}, err
	}
	v, err := c.read(0)
	if err == nil && v.typ == '-' {
		return v, replyError(v.str)
	}
	return v, err
}

// line reads one line without its CRLF.
func (c *conn) line() (string, error) {
	l, err := c.r.ReadSlice('\n')
	if err != nil {
		if errors.Is(err, bufio.ErrBufferFull) {
			return "", fmt.Errorf("%w: reply line longer than %d bytes", errProtocol, c.r.Size())
		}
		return "", err
	}
	if len(l) < 3 || l[len(l)-2] != '\r' {
		return "", fmt.Errorf("%w: line %q", errProtocol, l)
	}
	return string(l[:len(l)-2]), nil
}

// read parses the next reply.
func (c *conn) read(depth int) (value, error) {
	l, err := c.line()
	if err != nil {
		return value{}, err
	}
	v := value{typ: l[0]}
	switch v.typ {
	case '+', '-':
		v.str = l[1:]
		return v, nil
	case ':', '$', '*':
		if v.n, err = strconv.ParseInt(l[1:], 10, 64); err != nil || (v.typ != ':' && v.n < -1) {
			return v, fmt.Errorf("%w: bad number in %q", errProtocol, l)
		}
	default:
		return v, fmt.Errorf("%w: unknown reply type %q", errProtocol, v.typ)
	}
	switch {
	case v.typ == '$' && v.n >= 0:
		if v.n > maxBulk {
			return v, fmt.Errorf("%w: bulk of %d bytes", errProtocol, v.n)
		}
		b := make([]byte, v.n+2)
		if _, err := io.ReadFull(c.r, b); err != nil {
			return v, err
		}
		v.str = string(b[:v.n])
	case v.typ == '*' && v.n > 0:
		if v.n > maxArray || depth >= maxDepth {
			return v, fmt.Errorf("%w: array of %d at depth %d", errProtocol, v.n, depth)
		}
		v.elem = make([]value, 0, v.n)
		for i := int64(0); i < v.n; i++ {
			e, err := c.read(depth + 1)
			if err != nil {
				return v, err
			}
			v.elem = append(v.elem, e)
		}
	}
	return v, nil
}

// decision reads an RL.ACQUIRE reply: allowed (its first element: 1
// admitted, 0 denied, 2 let through over a degrade limit), or the text of
// an error reply. A reply of another shape is a protocol error.
func (c *conn) decision() (allowed int64, errText string, err error) {
	v, err := c.read(0)
	switch {
	case err != nil:
		return 0, "", err
	case v.typ == '-':
		return 0, v.str, nil
	case v.typ != '*' || len(v.elem) != 6 || v.elem[0].typ != ':':
		return 0, "", fmt.Errorf("%w: RL.ACQUIRE replied %s", errProtocol, v)
	}
	return v.elem[0].n, "", nil
}

// String shows v the way redis-cli would, on one line.
func (v value) String() string {
	switch v.typ {
	case '+':
		return v.str
	case '-':
		return "(error) " + v.str
	case ':':
		return "(integer) " + strconv.FormatInt(v.n, 10)
	case '$':
		if v.n < 0 {
			return "(nil)"
		}
		return strconv.Quote(v.str)
	case '*':
		s := "["
		for i, e := range v.elem {
			if i > 0 {
				s += " "
			}
			s += e.String()
		}
		return s + "]"
	}
	return "?"
}

// pairs turns a flat name/value array (RL.CLUSTER INFO) into a map.
func (v value) pairs() map[string]string {
	m := map[string]string{}
	for i := 0; i+1 < len(v.elem); i += 2 {
		val := v.elem[i+1]
		s := val.str
		if val.typ == ':' {
			s = strconv.FormatInt(val.n, 10)
		}
		m[v.elem[i].str] = s
	}
	return m
}

func nan() float64 { return math.NaN() }
