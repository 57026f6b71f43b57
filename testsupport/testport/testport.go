// Package testport hands out loopback ports for tests that start nodes
// whose addresses must be known before they start (a static cluster).
package testport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
)

// handed holds the ports Free gave out: a port picked for a node that has
// not started yet is still free, and must not be picked again.
var (
	mu     sync.Mutex
	handed = map[int]bool{}
)

// Free returns a loopback port that was free a moment ago and has not been
// handed out before. It picks below Linux's ephemeral range (32768+), so
// that sockets the OS numbers for other tests meanwhile do not take it.
func Free(t testing.TB) string {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	for i := 0; i < 100; i++ {
		p := 20000 + rand.IntN(12000)
		if handed[p] {
			continue
		}
		if l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p)); err == nil {
			l.Close()
			handed[p] = true
			return fmt.Sprint(p)
		}
	}
	t.Fatal("no free port")
	return ""
}
