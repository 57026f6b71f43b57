// Package resptest is a minimal RESP client for tests that need to see
// replies exactly as the server wrote them: every reply is rendered as one
// canonical line — +simple, -error, 42, "bulk", nil, [a b c], and for
// RESP3 {k v k v} (map), ~[a b] (set), _ (null), ,1.5 (double), #t
// (boolean), =txt "text" (verbatim) and >[a b] (push).
package resptest

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Client is one raw connection.
type Client struct {
	t    testing.TB
	Conn net.Conn
	r    *bufio.Reader
}

// Dial connects to addr or fails the test.
func Dial(t testing.TB, addr string) *Client {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { c.Close() })
	return &Client{t: t, Conn: c, r: bufio.NewReader(c)}
}

// Encode renders args as a RESP multibulk command.
func Encode(args ...string) []byte {
	var b strings.Builder
	b.WriteString("*" + strconv.Itoa(len(args)) + "\r\n")
	for _, a := range args {
		b.WriteString("$" + strconv.Itoa(len(a)) + "\r\n" + a + "\r\n")
	}
	return []byte(b.String())
}

// Send writes a command without reading its reply.
func (c *Client) Send(args ...string) {
	c.t.Helper()
	c.Write(Encode(args...))
}

// Write sends raw bytes.
func (c *Client) Write(b []byte) {
	c.t.Helper()
	c.Conn.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Conn.Write(b); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

// Do sends one command and returns its rendered reply.
func (c *Client) Do(args ...string) string {
	c.t.Helper()
	c.Send(args...)
	return c.Read()
}

// Read reads one reply; it fails the test on a read error.
func (c *Client) Read() string {
	c.t.Helper()
	s, err := c.TryRead(30 * time.Second) // a bound for a busy machine, not a timing
	if err != nil {
		c.t.Fatalf("read: %v", err)
	}
	return s
}

// TryRead reads one reply within d.
func (c *Client) TryRead(d time.Duration) (string, error) {
	c.Conn.SetReadDeadline(time.Now().Add(d))
	return Parse(c.r)
}

// Parse reads and renders one RESP2 or RESP3 reply.
func Parse(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	if len(line) < 3 || !strings.HasSuffix(line, "\r\n") {
		return "", fmt.Errorf("bad reply line %q", line)
	}
	body := line[1 : len(line)-2]
	switch line[0] {
	case '+', '-':
		return line[:len(line)-2], nil
	case ':':
		return body, nil
	case '$':
		n, err := strconv.Atoi(body)
		if err != nil {
			return "", err
		}
		if n < 0 {
			return "nil", nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		return strconv.Quote(string(buf[:n])), nil
	case '*', '~', '>', '%':
		n, err := strconv.Atoi(body)
		if err != nil {
			return "", err
		}
		if n < 0 {
			return "nil", nil
		}
		if line[0] == '%' {
			n *= 2
		}
		parts := make([]string, n)
		for i := range parts {
			if parts[i], err = Parse(r); err != nil {
				return "", err
			}
		}
		switch line[0] {
		case '%':
			return "{" + strings.Join(parts, " ") + "}", nil
		case '~':
			return "~[" + strings.Join(parts, " ") + "]", nil
		case '>':
			return ">[" + strings.Join(parts, " ") + "]", nil
		}
		return "[" + strings.Join(parts, " ") + "]", nil
	case '_':
		return "_", nil
	case ',', '#', '(':
		return line[:len(line)-2], nil
	case '=', '!':
		n, err := strconv.Atoi(body)
		if err != nil {
			return "", err
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		if line[0] == '!' {
			return "-" + string(buf[:n]), nil
		}
		if n < 4 || buf[3] != ':' {
			return "", fmt.Errorf("verbatim string without a format: %q", buf[:n])
		}
		return "=" + string(buf[:3]) + " " + strconv.Quote(string(buf[4:n])), nil
	}
	return "", fmt.Errorf("unknown reply type %q", line)
}

// Closed reports whether the server has closed the connection (a read
// returns EOF or a reset within d).
func (c *Client) Closed(d time.Duration) bool {
	c.Conn.SetReadDeadline(time.Now().Add(d))
	buf := make([]byte, 1)
	for {
		_, err := c.r.Read(buf)
		if err == nil {
			continue
		}
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			return false
		}
		return true
	}
}
