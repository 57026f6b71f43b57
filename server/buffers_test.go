package server

import (
	"bufio"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/testsupport/resptest"
	"github.com/sluice-rl/sluice/testsupport/testkit"
)

// Every connection's read buffers together stay within
// --max-client-buffers: clients that each send most of a large argument
// fill it, and the next one that needs more is refused with an error that
// names the setting, then closed. The others, and small commands, go on;
// once the large ones leave, a large command fits again.
func TestClientBuffersHaveATotalBound(t *testing.T) {
	const bulk, budget = 1 << 20, 4 << 20
	n := startNode(t, func(c *Config) { c.MaxBulkLen = bulk; c.MaxClientBuffers = budget })
	bystander := resptest.Dial(t, n.Server.RespAddr())
	header := "*2\r\n$4\r\nECHO\r\n$" + strconv.Itoa(bulk) + "\r\n"
	part := header + strings.Repeat("x", bulk*9/10)

	const clients = 6
	var mu sync.Mutex
	refused := map[int]string{}
	var conns []net.Conn
	for i := 0; i < clients; i++ {
		c, err := net.Dial("tcp", n.Server.RespAddr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns = append(conns, c)
		go func(i int, c net.Conn) {
			if reply, err := resptest.Parse(bufio.NewReader(c)); err == nil {
				mu.Lock()
				refused[i] = reply
				mu.Unlock()
			}
		}(i, c)
		if _, err := c.Write([]byte(part)); err != nil {
			t.Fatal(err)
		}
	}
	// Six clients of 0.9 MiB each cannot all fit in 4 MiB: at least two
	// are refused, whatever order the server reads them in.
	testkit.WaitFor(t, 20*time.Second, "two clients refused", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(refused) >= 2
	})
	want := "-ERR client read buffers are full: the connections' read buffers together reached their share of --max-client-buffers (3670016 of 4194304 bytes); this command does not fit now"
	mu.Lock()
	for i, r := range refused {
		if r != want {
			t.Errorf("client %d: %s\nwant %s", i, r, want)
		}
	}
	nRefused := len(refused)
	mu.Unlock()
	m := scrape(t, n.Server.HTTPAddr())
	if got := m["sluice_client_buffers_bytes"]; got > budget || got < 2*bulk {
		t.Errorf("sluice_client_buffers_bytes = %v, want between %d and %d", got, 2*bulk, budget)
	}
	if got := m[`sluice_connections_closed_total{reason="client_buffers"}`]; int(got) < nRefused {
		t.Errorf(`sluice_connections_closed_total{reason="client_buffers"} = %v, %d refused`, got, nRefused)
	}
	if got := bystander.Do("PING"); got != "+PONG" {
		t.Fatalf("a small command while the buffers are full: %s", got)
	}
	for _, c := range conns {
		c.Close()
	}
	testkit.WaitFor(t, 20*time.Second, "the buffers given back", func() bool {
		return scrape(t, n.Server.HTTPAddr())["sluice_client_buffers_bytes"] <= 2*initialBuffer
	})
	big := strings.Repeat("y", bulk*9/10)
	if got := bystander.Do("ECHO", big); got != `"`+big+`"` {
		t.Fatalf("a large ECHO once the buffers are free: %.100s", got)
	}
}
