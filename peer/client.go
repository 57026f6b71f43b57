package peer

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/sluice-rl/sluice/internal/resp"
)

// Client is the RESP client nodes use to talk to each other: it dials
// members with optional TLS and a password, sends a command and returns
// the raw reply, keeping a few idle connections per address.
type Client struct {
	TLS      *tls.Config
	User     string // empty: the default user
	Password string
	// Login, if set, gives the user and password at each dial instead of
	// User and Password (for credentials known only later).
	Login func() (user, password string)
	// Name is sent with CLIENT SETNAME on every new connection.
	Name    string
	Timeout time.Duration
	// DialTimeout bounds dialling in DoContext.
	DialTimeout time.Duration

	mu   sync.Mutex
	idle map[string][]*conn
}

type conn struct {
	c net.Conn
	r *bufio.Reader
}

// Unanswered is a call whose request went out (or was going out) on a
// connection and got no reply: the member may have run it.
type Unanswered struct{ Err error }

func (e *Unanswered) Error() string { return e.Err.Error() }
func (e *Unanswered) Unwrap() error { return e.Err }

// HandshakeError is a peer's refusal of the connection's AUTH or CLIENT
// SETNAME (a wrong password, protected mode): trying again will not help.
type HandshakeError struct{ Msg string }

func (e *HandshakeError) Error() string { return e.Msg }

// Do sends args to addr and returns the raw reply (one complete RESP value).
// A connection that fails is dropped, never reused.
func (cl *Client) Do(addr string, args [][]byte) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), cl.timeout())
	defer cancel()
	return cl.do(ctx, addr, args, 5*time.Second)
}

// DoContext is Do bounded by ctx: the call ends when ctx does, dialling
// and the connection's handshake (AUTH, CLIENT SETNAME) included, and a
// new connection is dialled and greeted within at most DialTimeout
// (default 1s) each, so that a dead or frozen peer is noticed quickly.
func (cl *Client) DoContext(ctx context.Context, addr string, args [][]byte) ([]byte, error) {
	return cl.do(ctx, addr, args, cl.dialTimeout())
}

func (cl *Client) do(ctx context.Context, addr string, args [][]byte, dial time.Duration) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c, err := cl.getDial(ctx, addr, dial)
	if err != nil {
		return nil, err
	}
	// The deadline first, then the cancellation that overrides it: the
	// other order could put a later deadline over a cancellation that came
	// in between.
	c.c.SetDeadline(cl.until(ctx, cl.timeout()))
	stop := context.AfterFunc(ctx, func() { c.c.SetDeadline(time.Unix(1, 0)) })
	raw, err := c.do(args)
	if !stop() || err != nil {
		c.c.Close()
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return nil, &Unanswered{Err: err}
	}
	cl.put(addr, c)
	return raw, nil
}

// until returns the deadline of a step that may take d, cut short by
// ctx's deadline.
func (cl *Client) until(ctx context.Context, d time.Duration) time.Time {
	at := time.Now().Add(d)
	if dl, ok := ctx.Deadline(); ok && dl.Before(at) {
		return dl
	}
	return at
}

func (cl *Client) dialTimeout() time.Duration {
	if cl.DialTimeout > 0 {
		return cl.DialTimeout
	}
	return time.Second
}

func (cl *Client) timeout() time.Duration {
	if cl.Timeout > 0 {
		return cl.Timeout
	}
	return 10 * time.Second
}

// getDial returns an idle connection to addr, or dials and greets a new
// one: dialling within dial, the handshake within dial again (at least
// minGreeting), both ended early by ctx (its deadline, or its
// cancellation: a forward whose leader changed must not wait on a frozen
// one's AUTH reply).
func (cl *Client) getDial(ctx context.Context, addr string, dial time.Duration) (*conn, error) {
	cl.mu.Lock()
	if cs := cl.idle[addr]; len(cs) > 0 {
		c := cs[len(cs)-1]
		cs[len(cs)-1] = nil
		cl.idle[addr] = cs[:len(cs)-1]
		cl.mu.Unlock()
		return c, nil
	}
	cl.mu.Unlock()
	dctx, cancel := context.WithTimeout(ctx, dial)
	defer cancel()
	var nc net.Conn
	var err error
	if cl.TLS != nil {
		td := tls.Dialer{Config: cl.TLS}
		nc, err = td.DialContext(dctx, "tcp", addr)
	} else {
		var d net.Dialer
		nc, err = d.DialContext(dctx, "tcp", addr)
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	c := &conn{c: nc, r: bufio.NewReader(nc)}
	hello := [][][]byte{}
	user, password := cl.User, cl.Password
	if cl.Login != nil {
		user, password = cl.Login()
	}
	switch {
	case user != "":
		hello = append(hello, [][]byte{[]byte("AUTH"), []byte(user), []byte(password)})
	case password != "":
		hello = append(hello, [][]byte{[]byte("AUTH"), []byte(password)})
	}
	if cl.Name != "" {
		hello = append(hello, [][]byte{[]byte("CLIENT"), []byte("SETNAME"), []byte(cl.Name)})
	}
	if len(hello) == 0 {
		return c, nil
	}
	// A greeting on a loaded machine may take longer than a dial; a frozen
	// peer's is ended by ctx (a forward's view of the leader changed). The
	// deadline is set before the cancellation that overrides it.
	nc.SetDeadline(cl.until(ctx, max(dial, minGreeting)))
	stop := context.AfterFunc(ctx, func() { nc.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	for _, h := range hello {
		raw, err := c.do(h)
		if err == nil && len(raw) > 0 && raw[0] == '-' {
			err = &HandshakeError{Msg: string(raw[1 : len(raw)-2])}
		}
		if err != nil {
			nc.Close()
			if ctx.Err() != nil {
				err = ctx.Err()
			}
			return nil, fmt.Errorf("%s %s: %w", addr, h[0], err)
		}
	}
	return c, nil
}

// minGreeting is the least time a new connection's handshake is given.
const minGreeting = 2 * time.Second

// MaxIdle is how many idle connections a client keeps per address:
// concurrent calls each take one, and those beyond it are closed after
// use rather than kept.
const MaxIdle = 8

func (cl *Client) put(addr string, c *conn) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if cl.idle == nil {
		cl.idle = map[string][]*conn{}
	}
	if len(cl.idle[addr]) >= MaxIdle {
		c.c.Close()
		return
	}
	cl.idle[addr] = append(cl.idle[addr], c)
}

// Close drops every idle connection.
func (cl *Client) Close() {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	for a, cs := range cl.idle {
		for _, c := range cs {
			c.c.Close()
		}
		delete(cl.idle, a)
	}
}

// do sends args and reads the reply, within the deadline the caller set.
func (c *conn) do(args [][]byte) ([]byte, error) {
	buf := resp.AppendCommand(make([]byte, 0, 64), args...)
	if _, err := c.c.Write(buf); err != nil {
		return nil, err
	}
	return ReadRaw(c.r, nil)
}

// ReadRaw appends one complete RESP2 value read from r to dst.
func ReadRaw(r *bufio.Reader, dst []byte) ([]byte, error) {
	line, err := r.ReadSlice('\n')
	if err != nil {
		return nil, err
	}
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return nil, fmt.Errorf("bad reply line %q", line)
	}
	dst = append(dst, line...)
	n, _ := strconv.Atoi(string(line[1 : len(line)-2]))
	switch line[0] {
	case '+', '-', ':':
		return dst, nil
	case '$':
		if n < 0 {
			return dst, nil
		}
		if n > 512<<20 {
			return nil, fmt.Errorf("bulk reply of %d bytes", n)
		}
		start := len(dst)
		dst = append(dst, make([]byte, n+2)...)
		if _, err := io.ReadFull(r, dst[start:]); err != nil {
			return nil, err
		}
		return dst, nil
	case '*':
		for i := 0; i < n; i++ {
			if dst, err = ReadRaw(r, dst); err != nil {
				return nil, err
			}
		}
		return dst, nil
	}
	return nil, fmt.Errorf("unknown reply type %q", line[0])
}
