package server

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/resptest"
	"github.com/sluice-rl/sluice/raftfsm"
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
	raftfsm.WaitFor(t, 10*time.Second, "the announcing clients in CLIENT LIST", func() bool {
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
