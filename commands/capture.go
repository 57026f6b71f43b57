package commands

import (
	"bytes"
	"net"

	"github.com/tidwall/redcon"

	"github.com/sluice-rl/sluice/access"
)

// Capture is a redcon.Conn that keeps replies in memory: the server runs
// internal commands through it (seeding budgets), and tests use it to see
// exactly what a handler wrote.
type Capture struct {
	buf    bytes.Buffer
	w      *redcon.Writer
	ctx    any
	Closed bool
}

// NewCapture returns an empty capture.
func NewCapture() *Capture {
	c := &Capture{}
	c.w = redcon.NewWriter(&c.buf)
	return c
}

// Bytes flushes and returns everything written so far.
func (c *Capture) Bytes() []byte {
	c.w.Flush()
	return c.buf.Bytes()
}

// Reset empties the capture.
func (c *Capture) Reset() {
	c.w.Flush()
	c.buf.Reset()
}

func (c *Capture) RemoteAddr() string             { return "internal" }
func (c *Capture) Close() error                   { c.Closed = true; return nil }
func (c *Capture) WriteError(msg string)          { c.w.WriteError(msg) }
func (c *Capture) WriteString(str string)         { c.w.WriteString(str) }
func (c *Capture) WriteBulk(bulk []byte)          { c.w.WriteBulk(bulk) }
func (c *Capture) WriteBulkString(bulk string)    { c.w.WriteBulkString(bulk) }
func (c *Capture) WriteInt(num int)               { c.w.WriteInt(num) }
func (c *Capture) WriteInt64(num int64)           { c.w.WriteInt64(num) }
func (c *Capture) WriteUint64(num uint64)         { c.w.WriteUint64(num) }
func (c *Capture) WriteArray(count int)           { c.w.WriteArray(count) }
func (c *Capture) WriteNull()                     { c.w.WriteNull() }
func (c *Capture) WriteRaw(data []byte)           { c.w.WriteRaw(data) }
func (c *Capture) WriteAny(v any)                 { c.w.WriteAny(v) }
func (c *Capture) Context() any                   { return c.ctx }
func (c *Capture) SetContext(v any)               { c.ctx = v }
func (c *Capture) SetReadBuffer(int)              {}
func (c *Capture) Detach() redcon.DetachedConn    { return nil }
func (c *Capture) ReadPipeline() []redcon.Command { return nil }
func (c *Capture) PeekPipeline() []redcon.Command { return nil }
func (c *Capture) NetConn() net.Conn              { return nil }

// Run executes one command as an internal admin session and returns the
// raw reply.
func (env *Env) Run(args ...string) []byte {
	c := NewCapture()
	s := NewSession(0, "internal", "", access.RoleAdmin, func() {})
	if env.Cluster != nil {
		s.setPeer(env.Cluster.ID()) // the node itself
	}
	a := make([][]byte, len(args))
	for i, x := range args {
		a[i] = []byte(x)
	}
	env.Exec(c, s, a)
	return c.Bytes()
}
