package server

import (
	"errors"
	"net"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidwall/redcon"

	"github.com/sluice-rl/sluice/access"
	"github.com/sluice-rl/sluice/commands"
)

// conn is one client connection. It reads RESP into a buffer it reuses,
// parses every complete command in place (arguments alias the buffer: no
// copy, no allocation), runs them in order, and writes all their replies
// with one write: a pipeline costs one read and one write. Replies go
// through redcon's Writer, which handlers see as a commands.Writer.
type conn struct {
	*redcon.Writer // the replies, buffered until flush
	srv            *Server
	nc             net.Conn
	addr           string

	buf  []byte
	r, w int
	args [][]byte

	sess   *commands.Session // set when the connection is accepted
	closed bool              // QUIT or a protocol error: flush, then close

	writeDeadline time.Time // when the write deadline was last pushed back
	// authBy is when a connection that has not authenticated is closed
	// (--auth-timeout); zero when no password is required.
	authBy      time.Time
	readExpires string // why the read deadline is set: "idle", "auth_timeout" or ""
	// held is the part of --max-client-buffers this connection's read
	// buffer takes (its length).
	held int64
}

const (
	initialBuffer = 16 << 10
	// shrinkAbove: a buffer grown for one large command is dropped after
	// it, so that an idle connection holds at most this much.
	shrinkAbove = 1 << 20
)

var _ commands.Closer = (*conn)(nil)

// Close ends the connection once the replies written so far are out
// (QUIT); handlers write those through the embedded Writer.
func (c *conn) Close() error { c.closed = true; return nil }

// writeTimeout bounds how long a client that stops reading can hold its
// connection with replies it does not take.
const writeTimeout = 30 * time.Second

// flush writes the buffered replies. The write deadline is pushed back at
// most every few seconds rather than on every write: setting it costs more
// than the limiting itself, and a window of 20–30 s serves as well.
func (c *conn) flush() error {
	if now := time.Now(); now.Sub(c.writeDeadline) > writeTimeout/3 {
		c.writeDeadline = now
		c.nc.SetWriteDeadline(now.Add(writeTimeout))
	}
	return c.Flush()
}

// Spill sends the replies written so far (a long EXEC's, commands.Spiller);
// a write that fails is seen again by the connection's next flush.
func (c *conn) Spill() { c.flush() }

var _ commands.Spiller = (*conn)(nil)

// fail answers a protocol violation and ends the connection.
func (c *conn) fail(err error) error {
	c.WriteError("ERR Protocol error: " + err.Error())
	c.srv.env.Metrics.ProtocolErrors.Inc()
	c.flush()
	c.linger()
	return errProtocol
}

// lingerFor bounds how long a connection closed for what its client sent
// goes on reading (and discarding) the rest of it.
const lingerFor = time.Second

// linger ends the connection's sending side after its last reply and
// discards what the client still sends, for up to lingerFor: closing a
// socket with unread data resets it, and the reset can reach the client
// before the error text that explains it, which it then never reads.
func (c *conn) linger() {
	type closeWriter interface{ CloseWrite() error }
	cw, ok := c.nc.(closeWriter)
	if !ok || cw.CloseWrite() != nil {
		return
	}
	c.nc.SetReadDeadline(time.Now().Add(lingerFor))
	scratch := c.buf[:min(len(c.buf), initialBuffer)]
	for {
		if _, err := c.nc.Read(scratch); err != nil {
			return
		}
	}
}

// grow resizes the read buffer to size bytes, keeping what it holds, if
// --max-client-buffers (every connection's read buffers together) has room
// for the difference.
func (c *conn) grow(size int) bool {
	if !c.srv.reserveBuffer(int64(size) - c.held) {
		return false
	}
	c.held = int64(size)
	// Exactly size bytes: append would round the capacity up (to 2.4
	// times the old length for a doubling), past what was reserved.
	buf := make([]byte, size)
	copy(buf, c.buf)
	c.buf = buf
	return true
}

// resetBuffer drops a buffer grown for one large command.
func (c *conn) resetBuffer() {
	c.srv.reserveBuffer(initialBuffer - c.held)
	c.held = initialBuffer
	c.buf = make([]byte, initialBuffer)
}

// buffersFull refuses a command the read buffers cannot take and ends the
// connection.
func (c *conn) buffersFull() error {
	flag := int64(c.srv.cfg.MaxClientBuffers)
	c.WriteError("ERR client read buffers are full: the connections' read buffers together reached their share of --max-client-buffers (" +
		strconv.FormatInt(ClientBufferShare(flag), 10) + " of " + strconv.FormatInt(flag, 10) + " bytes); this command does not fit now")
	c.srv.env.Metrics.ConnectionsClosed.WithLabelValues("client_buffers").Inc()
	c.flush()
	c.linger()
	return errProtocol
}

// serve runs the connection until the client leaves, a protocol error,
// QUIT, CLIENT KILL or shutdown.
func (c *conn) serve() error {
	c.buf = make([]byte, initialBuffer)
	// The initial buffer is always granted (--maxclients bounds them);
	// growing beyond it is what --max-client-buffers refuses.
	c.srv.buffers.Add(initialBuffer)
	c.held = initialBuffer
	defer func() { c.srv.reserveBuffer(-c.held); c.held = 0 }()
	c.args = make([][]byte, 0, 16)
	sess := c.sess
	sess.ReadBuf.Store(int64(len(c.buf)))
	sess.ReadPeak.Store(int64(len(c.buf)))
	lim := limits{maxArgs: c.srv.cfg.MaxArgs, maxBulk: c.srv.cfg.MaxBulkLen}
	for {
		// Run every complete command in the buffer.
		for c.r < c.w {
			// A session without a role (not yet authenticated, or RESET
			// since) gets the limits before AUTH.
			use := lim
			if sess.Role() == access.RoleNone {
				use = preAuthLimits
			}
			args, n, need, err := parseCommand(c.buf[c.r:c.w], c.args, use)
			if err != nil {
				return c.fail(err)
			}
			if n == 0 { // incomplete: make room for the rest
				if need > 2*c.srv.cfg.MaxBulkLen+maxInline {
					return c.fail(protoError("command too large (at most twice --max-bulk-len)"))
				}
				if c.r > 0 {
					c.w = copy(c.buf, c.buf[c.r:c.w])
					c.r = 0
				}
				// Grow with what arrives, not with what a header
				// announces: a client that announces a 32 MiB argument
				// and sends nothing more costs one initial buffer. A
				// full buffer doubles (or grows to what the command
				// needs, if less), so memory stays within twice what the
				// client has sent.
				if c.w == len(c.buf) {
					// need is exact for an argument whose length is
					// known, and only "one more byte" for a line not
					// yet ended: growing by that would copy the buffer
					// for every byte that arrives.
					size := 2 * len(c.buf)
					if need > len(c.buf)+1 {
						size = min(size, need)
					}
					if !c.grow(size) {
						return c.buffersFull()
					}
					sess.ReadBuf.Store(int64(len(c.buf)))
					sess.ReadPeak.Store(max(sess.ReadPeak.Load(), int64(len(c.buf))))
				}
				break
			}
			c.r += n
			c.args = args[:0]
			if len(args) > 0 {
				c.srv.env.Exec(c, sess, args)
			}
			if c.closed {
				c.flush()
				return nil
			}
		}
		if c.r == c.w {
			c.r, c.w = 0, 0
			if len(c.buf) > shrinkAbove {
				c.resetBuffer()
				sess.ReadBuf.Store(initialBuffer)
			}
		}
		// One write for everything this pass answered.
		if err := c.flush(); err != nil {
			return err
		}
		if c.srv.draining.Load() && c.r == c.w {
			return nil
		}
		if c.r == c.w {
			// Let the other connections run before reading: a client
			// that waits for these replies has not sent its next
			// commands yet, and a read now would find nothing, park this
			// goroutine and cost the netpoller a wake-up; after the
			// others' turn they have often arrived.
			runtime.Gosched()
		}
		c.setReadDeadline(sess)
		n, err := c.nc.Read(c.buf[c.w:])
		c.w += n
		if err != nil {
			if n > 0 {
				continue // answer what arrived with the error first
			}
			if errors.Is(err, os.ErrDeadlineExceeded) {
				if c.srv.draining.Load() {
					return nil
				}
				if c.readExpires != "" {
					c.srv.env.Metrics.ConnectionsClosed.WithLabelValues(c.readExpires).Inc()
					return nil
				}
			}
			return err
		}
	}
}

// setReadDeadline arms the next read with the idle timeout (--timeout)
// and, until the session authenticates, the authentication deadline
// (--auth-timeout), whichever comes first; it clears a deadline that no
// longer applies. A drain that began meanwhile keeps its immediate one.
func (c *conn) setReadDeadline(sess *commands.Session) {
	var at time.Time
	why := ""
	if t := c.srv.cfg.Timeout; t > 0 {
		at, why = time.Now().Add(t), "idle"
	}
	if sess.Role() != access.RoleNone {
		c.authBy = time.Time{}
	} else {
		if c.authBy.IsZero() && c.srv.cfg.AuthTimeout > 0 {
			// RESET dropped the role: the session has a new deadline.
			c.authBy = time.Now().Add(c.srv.cfg.AuthTimeout)
		}
		if !c.authBy.IsZero() && (at.IsZero() || c.authBy.Before(at)) {
			at, why = c.authBy, "auth_timeout"
		}
	}
	if why == "" && c.readExpires == "" {
		return
	}
	c.nc.SetReadDeadline(at)
	c.readExpires = why
	if c.srv.draining.Load() {
		c.nc.SetReadDeadline(time.Now())
	}
}

// watchMax bounds what Watch reads ahead of a held call: a client that
// pipelines more than this behind it is no longer watched for leaving.
const watchMax = 1 << 20

// Watch is commands.Watcher: while the connection's goroutine holds a
// call (WAIT), another one reads what the client sends next into the
// buffer, so that a client that disconnects is noticed at once: the hold
// ends, its reservation is given back, and the commands it had queued are
// dropped. stop interrupts that read and hands the bytes to the loop.
func (c *conn) Watch() (<-chan struct{}, func()) {
	gone := make(chan struct{})
	done := make(chan struct{})
	var got int
	var lost bool
	go func() {
		defer close(done)
		for c.w+got < watchMax {
			if c.w+got == len(c.buf) && !c.grow(2*len(c.buf)) {
				return // no room to read ahead: the loop reads the rest
			}
			n, err := c.nc.Read(c.buf[c.w+got:])
			got += n
			if err != nil {
				if !errors.Is(err, os.ErrDeadlineExceeded) {
					lost = true
					close(gone)
				}
				return
			}
		}
	}()
	stop := func() {
		c.nc.SetReadDeadline(time.Now()) // wake the read
		<-done
		c.w += got
		c.nc.SetReadDeadline(time.Time{}) // the next read arms its own
		c.readExpires = ""
		if lost {
			c.closed = true
		}
	}
	return gone, stop
}

var errProtocol = errors.New("protocol error")

// listener accepts client connections and runs them, tracking them for
// CLIENT KILL, --maxclients and a graceful drain.
type listener struct {
	net.Listener
	srv *Server

	mu    sync.Mutex
	conns map[*conn]struct{}
	live  sync.WaitGroup
	count atomic.Int64
}

func (l *listener) serve() {
	for {
		nc, err := l.Accept()
		if err != nil {
			if l.srv.draining.Load() || errors.Is(err, net.ErrClosed) {
				return
			}
			l.srv.log.Warn("accept", "err", err)
			time.Sleep(10 * time.Millisecond)
			continue
		}
		c := &conn{Writer: redcon.NewWriter(nc), srv: l.srv, nc: nc, addr: nc.RemoteAddr().String()}
		l.count.Add(1)
		if !l.srv.accept(c) {
			c.flush()
			nc.Close()
			l.count.Add(-1)
			continue
		}
		l.mu.Lock()
		l.conns[c] = struct{}{}
		l.mu.Unlock()
		l.live.Add(1)
		go func() {
			defer l.live.Done()
			err := c.serve()
			nc.Close()
			l.mu.Lock()
			delete(l.conns, c)
			l.mu.Unlock()
			l.count.Add(-1)
			l.srv.closed(c, err)
		}()
	}
}

// drain wakes idle readers (their next read returns at once) and waits, up
// to the shutdown timeout, for every connection to finish its pipeline.
func (l *listener) drain(timeout time.Duration) {
	l.mu.Lock()
	for c := range l.conns {
		c.nc.SetReadDeadline(time.Now())
	}
	l.mu.Unlock()
	done := make(chan struct{})
	go func() { l.live.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(timeout):
		l.srv.log.Warn("shutdown timeout: closing connections with replies in flight", "connections", l.count.Load())
		l.mu.Lock()
		for c := range l.conns {
			c.nc.Close()
		}
		l.mu.Unlock()
		<-done
	}
}
