package commands

import (
	"bufio"
	"bytes"
	"net"
	"testing"
	"time"

	"github.com/tidwall/redcon"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/internal/resptest"
)

// recConn is a redcon.Conn that records replies in a buffer.
type recConn struct {
	buf    bytes.Buffer
	w      *redcon.Writer
	ctx    any
	closed bool
}

func newRecConn() *recConn {
	c := &recConn{}
	c.w = redcon.NewWriter(&c.buf)
	return c
}

func (c *recConn) RemoteAddr() string             { return "127.0.0.1:1" }
func (c *recConn) Close() error                   { c.closed = true; return nil }
func (c *recConn) WriteError(msg string)          { c.w.WriteError(msg) }
func (c *recConn) WriteString(str string)         { c.w.WriteString(str) }
func (c *recConn) WriteBulk(bulk []byte)          { c.w.WriteBulk(bulk) }
func (c *recConn) WriteBulkString(bulk string)    { c.w.WriteBulkString(bulk) }
func (c *recConn) WriteInt(num int)               { c.w.WriteInt(num) }
func (c *recConn) WriteInt64(num int64)           { c.w.WriteInt64(num) }
func (c *recConn) WriteUint64(num uint64)         { c.w.WriteUint64(num) }
func (c *recConn) WriteArray(count int)           { c.w.WriteArray(count) }
func (c *recConn) WriteNull()                     { c.w.WriteNull() }
func (c *recConn) WriteRaw(data []byte)           { c.w.WriteRaw(data) }
func (c *recConn) WriteAny(v interface{})         { c.w.WriteAny(v) }
func (c *recConn) Context() interface{}           { return c.ctx }
func (c *recConn) SetContext(v interface{})       { c.ctx = v }
func (c *recConn) SetReadBuffer(int)              {}
func (c *recConn) Detach() redcon.DetachedConn    { return nil }
func (c *recConn) ReadPipeline() []redcon.Command { return nil }
func (c *recConn) PeekPipeline() []redcon.Command { return nil }
func (c *recConn) NetConn() net.Conn              { return nil }

// reply flushes and parses the one reply a command wrote.
func (c *recConn) reply(t testing.TB) string {
	c.w.Flush()
	s, err := resptest.Parse(bufio.NewReader(&c.buf))
	if err != nil {
		t.Fatalf("command wrote invalid RESP %q: %v", c.buf.String(), err)
	}
	if c.buf.Len() != 0 {
		t.Fatalf("command wrote more than one reply: %q left", c.buf.String())
	}
	return s
}

func testEnv() *Env {
	reg := NewRegistry()
	done := make(chan struct{})
	close(done) // WAIT returns at once: the fuzzer must not sleep
	return &Env{
		Store:   engine.New(engine.Options{Shards: 4, MaxBuckets: 10000}),
		Now:     func() int64 { return int64(19676*86400) * int64(time.Second) },
		Clients: NewClients(), Auth: NewAuth("", nil), Metrics: NewMetrics(reg), Registry: reg,
		Version: "test", Started: time.Now(), MaxKeyLen: 256, Shutdown: done,
		Settings: func() []Setting { return nil },
	}
}

// FuzzCommands feeds arbitrary argument vectors (split on 0x00) to every
// command: no panic, exactly one well-formed reply, and a command that
// answers with an error leaves the bucket count unchanged.
func FuzzCommands(f *testing.F) {
	for _, seed := range []string{
		"RL.ACQUIRE\x00k\x00RATE\x0010\x00BURST\x005",
		"RL.ACQUIRE\x00k\x00RATE\x0010\x00PER\x001h30m\x00ALGO\x00sliding_window\x00COST\x003\x00WAIT\x0010",
		"RL.ACQUIRE\x00k\x00RATE\x00-1",
		"RL.PEEK\x00k\x00RATE\x005\x00COST\x000",
		"RL.REFUND\x00k\x00COST\x002",
		"RL.RESET\x00k",
		"CL.THROTTLE\x00u\x0015\x0030\x0060\x001",
		"CL.THROTTLE\x00u\x00+0\x00-0\x0060",
		"RL.ACQUIRE\x00k\x00RATE\x005\x00PER\x009999999999999999999h",
		"HELLO\x002\x00SETNAME\x00x",
		"CLIENT\x00KILL\x00ID\x00999",
		"COMMAND\x00DOCS",
		"INFO\x00all",
	} {
		f.Add([]byte(seed))
	}
	env := testEnv()
	f.Fuzz(func(t *testing.T, in []byte) {
		args := bytes.Split(in, []byte{0})
		if len(args) == 0 || len(args[0]) == 0 || len(args) > 64 {
			return
		}
		if name := string(bytes.ToUpper(args[0])); name == "QUIT" || name == "CLIENT" && len(args) > 1 && bytes.EqualFold(args[1], []byte("KILL")) {
			return
		}
		s := NewSession(1, "127.0.0.1:1", "127.0.0.1:2", RoleAdmin, func() {})
		c := newRecConn()
		before := env.Store.Len()
		env.Exec(c, s, args)
		if r := c.reply(t); len(r) > 0 && r[0] == '-' && env.Store.Len() != before {
			t.Fatalf("%q answered %s but changed the bucket count %d → %d", args, r, before, env.Store.Len())
		}
	})
}

func FuzzParseWindow(f *testing.F) {
	for _, s := range []string{"second", "250ms", "1h30m", "7d", "2w", "", "1.5s", "-1s", "99999999999999h"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, ok := parseWindow([]byte(s))
		if ok && d < 0 {
			t.Fatalf("%q parsed to a negative window %v", s, d)
		}
	})
}
