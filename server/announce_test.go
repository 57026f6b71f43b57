package server

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/testsupport/resptest"
	"github.com/sluice-rl/sluice/testsupport/testkit"
)

// A client that announces a huge argument and sends nothing more costs
// one initial read buffer, not the announced size: buffers grow with the
// data that arrives. (Before, 16 bytes made the server allocate 32 MiB.)
func TestAnnouncedBulkDoesNotAllocate(t *testing.T) {
	n := startNode(t, func(c *Config) { c.MaxBulkLen = 64 << 20 })
	for i := 0; i < 20; i++ {
		c, err := net.Dial("tcp", n.Server.RespAddr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Write([]byte("*2\r\n$33554432\r\n")); err != nil {
			t.Fatal(err)
		}
	}
	admin := resptest.Dial(t, n.Server.RespAddr())
	var list string
	testkit.WaitFor(t, 10*time.Second, "the announcing clients in CLIENT LIST", func() bool {
		list = admin.Do("CLIENT", "LIST")
		return strings.Count(list, "id=") >= 21
	})
	for _, line := range strings.Split(list, "\n") {
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "rbs="); ok && len(v) > 6 { // ≥ 1,000,000 bytes
				t.Fatalf("a read buffer of %s bytes: %s", v, line)
			}
		}
	}
	// An argument that does arrive in full grows the buffer as it comes.
	big := strings.Repeat("x", 3<<20)
	if got := admin.Do("ECHO", big); got != `"`+big+`"` {
		t.Fatalf("ECHO of 3 MiB: %d bytes back", len(got))
	}
}

// Before AUTH a connection may send only small commands, as in Redis;
// after it, the configured limits apply.
func TestUnauthenticatedConnectionsHaveSmallLimits(t *testing.T) {
	n := startNode(t, func(c *Config) { c.RequirePass = "a-long-enough-password" })
	for _, tc := range []struct{ send, want string }{
		{"*20\r\n", "-ERR Protocol error: unauthenticated multibulk length (at most 10 arguments before AUTH)"},
		{"*2\r\n$100000\r\n", "-ERR Protocol error: unauthenticated bulk length (at most 16384 bytes before AUTH)"},
		// An inline line too: 32,000 words would be 32,000 arguments.
		{strings.Repeat("x ", 32000) + "\r\n", "-ERR Protocol error: unauthenticated inline request (at most 10 arguments before AUTH)"},
	} {
		c := resptest.Dial(t, n.Server.RespAddr())
		c.Conn.Write([]byte(tc.send))
		if got := c.Read(); got != tc.want {
			t.Errorf("%q before AUTH: %s, want %s", tc.send, got, tc.want)
		}
	}
	c := resptest.Dial(t, n.Server.RespAddr())
	if got := c.Do("AUTH", "a-long-enough-password"); got != "+OK" {
		t.Fatal(got)
	}
	big := strings.Repeat("y", 100000)
	if got := c.Do("ECHO", big); got != `"`+big+`"` {
		t.Fatalf("a 100 KB ECHO after AUTH: %d bytes back", len(got))
	}
}
