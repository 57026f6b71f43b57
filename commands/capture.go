package commands

import (
	"bytes"

	"github.com/tidwall/redcon"

	"github.com/sluice-rl/sluice/access"
)

// Capture is a Writer that keeps replies in memory: the server runs
// internal commands through it (seeding budgets), and tests use it to see
// exactly what a handler wrote.
type Capture struct {
	*redcon.Writer
	buf    bytes.Buffer
	Closed bool // QUIT was run
}

// NewCapture returns an empty capture.
func NewCapture() *Capture {
	c := &Capture{}
	c.Writer = redcon.NewWriter(&c.buf)
	return c
}

// Bytes flushes and returns everything written so far.
func (c *Capture) Bytes() []byte {
	c.Flush()
	return c.buf.Bytes()
}

// Reset empties the capture.
func (c *Capture) Reset() {
	c.Flush()
	c.buf.Reset()
}

// Close marks the capture closed, as QUIT ends a connection.
func (c *Capture) Close() error { c.Closed = true; return nil }

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
