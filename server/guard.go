package server

import (
	"errors"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// guardConn sits between a client's socket and redcon's reader. It follows
// the RESP framing of the byte stream as it passes (without copying it) and
// ends the connection, with a Redis-style protocol error, as soon as a
// command announces more arguments than --max-args, an argument longer than
// --max-bulk-len, or an inline line over 64 KiB: the limits hold before any
// memory is spent on the oversized command. During shutdown it turns the
// next read into EOF, so redcon finishes the pipeline in hand, flushes its
// replies and closes.
type guardConn struct {
	net.Conn
	srv *Server

	st       frameState
	num      int64 // number being read in a header line
	digits   int
	neg      bool
	args     int64 // bulk strings left in this command
	skip     int64 // payload bytes (with CRLF) left in this bulk string
	inline   int   // bytes of the current inline command line
	cmdBytes int64 // bytes of the current command so far
	fail     string
	failed   bool
}

type frameState uint8

const (
	stStart   frameState = iota // at a command boundary
	stCount                     // in "*<count>\r"
	stCountLF                   // expecting '\n' after the count
	stDollar                    // expecting '$'
	stLen                       // in "$<len>\r"
	stLenLF                     // expecting '\n' after the length
	stBody                      // skipping payload and CRLF
	stInline                    // in an inline command line
)

const maxInline = 64 << 10

var errGuard = errors.New("protocol limit exceeded")

func (g *guardConn) Read(p []byte) (int, error) {
	if g.failed {
		return 0, errGuard
	}
	if g.fail != "" {
		// Commands before the violation have been answered: say why we
		// close, then close.
		g.Conn.SetWriteDeadline(time.Now().Add(time.Second))
		io.WriteString(g.Conn, "-ERR Protocol error: "+g.fail+"\r\n")
		g.failed = true
		g.srv.env.Metrics.ProtocolErrors.Inc()
		return 0, errGuard
	}
	if g.srv.draining.Load() && g.st == stStart {
		return 0, io.EOF
	}
	n, err := g.Conn.Read(p)
	if err != nil && g.srv.draining.Load() && errors.Is(err, os.ErrDeadlineExceeded) {
		err = io.EOF
	}
	if n > 0 {
		if k := g.scan(p[:n]); k < n {
			// Hand over only the bytes before the violation.
			return k, nil
		}
	}
	return n, err
}

// scan advances the framing state over b and returns how many bytes are
// acceptable: len(b) unless a limit is broken, in which case g.fail says how.
func (g *guardConn) scan(b []byte) int {
	max := g.srv.cfg
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch g.st {
		case stStart:
			g.cmdBytes = 0
			if c == '*' {
				g.st, g.num, g.digits, g.neg = stCount, 0, 0, false
			} else {
				g.st, g.inline = stInline, 1
				if c == '\n' {
					g.st = stStart
				}
			}
		case stInline:
			if c == '\n' {
				g.st = stStart
			} else if g.inline++; g.inline > maxInline {
				g.fail = "too big inline request"
				return i
			}
		case stCount, stLen:
			switch {
			case c == '\r':
				if g.st == stCount {
					g.st = stCountLF
				} else {
					g.st = stLenLF
				}
			case c == '-' && g.digits == 0 && !g.neg:
				g.neg = true
			case c >= '0' && c <= '9' && g.digits < 18:
				g.num = g.num*10 + int64(c-'0')
				g.digits++
			default:
				if g.st == stCount {
					g.fail = "invalid multibulk length"
				} else {
					g.fail = "invalid bulk length"
				}
				return i
			}
		case stCountLF:
			if c != '\n' {
				g.fail = "invalid multibulk length"
				return i
			}
			if g.neg {
				g.fail = "invalid multibulk length"
				return i
			}
			if g.num > int64(max.MaxArgs) {
				g.fail = "invalid multibulk length (at most " + strconv.Itoa(max.MaxArgs) + " arguments, --max-args)"
				return i
			}
			g.args = g.num
			g.st = stDollar
			if g.args == 0 {
				g.st = stStart
			}
		case stDollar:
			if c != '$' {
				g.fail = "expected '$', got '" + printableByte(c) + "'"
				return i
			}
			g.st, g.num, g.digits, g.neg = stLen, 0, 0, false
		case stLenLF:
			if c != '\n' {
				g.fail = "invalid bulk length"
				return i
			}
			if g.neg {
				g.fail = "invalid bulk length"
				return i
			}
			if g.num > int64(max.MaxBulkLen) {
				g.fail = "invalid bulk length (at most " + strconv.Itoa(max.MaxBulkLen) + " bytes, --max-bulk-len)"
				return i
			}
			g.skip = g.num + 2
			g.st = stBody
		case stBody:
			// Skip the payload in one step.
			n := min(int64(len(b)-i), g.skip)
			g.skip -= n
			g.cmdBytes += n
			i += int(n) - 1
			if g.skip == 0 {
				if g.args--; g.args == 0 {
					g.st = stStart
				} else {
					g.st = stDollar
				}
			}
			if g.cmdBytes > 2*int64(max.MaxBulkLen) {
				g.fail = "command too large (at most twice --max-bulk-len)"
				return i + 1
			}
		}
	}
	return len(b)
}

func printableByte(c byte) string {
	if c < 0x20 || c > 0x7e || c == '\'' {
		return "\\x" + strconv.FormatUint(uint64(c), 16)
	}
	return string(c)
}

// guardListener wraps accepted connections in guardConns, and during
// shutdown holds Accept until the connections have drained, so that redcon
// does not close them under in-flight replies.
type guardListener struct {
	net.Listener
	srv *Server

	mu    sync.Mutex
	conns map[*guardConn]struct{}
	live  sync.WaitGroup
	count atomic.Int64
}

func (l *guardListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		if l.srv.draining.Load() {
			l.drain()
			return nil, net.ErrClosed
		}
		return nil, err
	}
	g := &guardConn{Conn: c, srv: l.srv}
	l.mu.Lock()
	l.conns[g] = struct{}{}
	l.mu.Unlock()
	l.live.Add(1)
	l.count.Add(1)
	return g, nil
}

// closed forgets a connection redcon has finished with.
func (l *guardListener) closed(g *guardConn) {
	l.mu.Lock()
	_, ok := l.conns[g]
	delete(l.conns, g)
	l.mu.Unlock()
	if ok {
		l.count.Add(-1)
		l.live.Done()
	}
}

// drain wakes idle readers and waits, up to the shutdown timeout, for every
// connection to finish.
func (l *guardListener) drain() {
	l.mu.Lock()
	for g := range l.conns {
		g.Conn.SetReadDeadline(time.Now())
	}
	l.mu.Unlock()
	done := make(chan struct{})
	go func() { l.live.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(l.srv.cfg.ShutdownTimeout):
		l.srv.log.Warn("shutdown timeout: closing connections with replies in flight", "connections", l.count.Load())
	}
}
