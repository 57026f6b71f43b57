package commands

import (
	"runtime"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/access"
)

func heapInUse() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// A transaction's queue counts what it takes in the bound on client
// buffers (Env.ClientMemory), its commands and their spans as well as
// their bytes: 200,000 queued PINGs, the case where the per-command
// slices outweigh the arguments, take no more heap than is counted, and
// all of it is given back when the connection ends.
func TestQueuedTransactionCountsItsMemory(t *testing.T) {
	env := testEnv(t)
	var held int64
	env.ClientMemory = func(n int64) bool { held += n; return true }
	s := NewSession(1, "127.0.0.1:1", "127.0.0.1:2", access.RoleAdmin, func() {})
	c := NewCapture()
	ping := [][]byte{[]byte("PING")}
	env.Exec(c, s, [][]byte{[]byte("MULTI")})
	c.Reset()
	before := heapInUse()
	const n = 200_000
	for i := 0; i < n; i++ {
		env.Exec(c, s, ping)
		c.Reset()
	}
	grew := heapInUse() - before
	t.Logf("%d queued PINGs: heap grew by %d bytes, %d counted", n, grew, held)
	if grew > held+held/20+256<<10 {
		t.Errorf("the queue took %d bytes of heap, %d counted in --max-client-buffers", grew, held)
	}
	if s.tx.mem.Load() != held {
		t.Errorf("CLIENT LIST's multi-mem %d, counted %d", s.tx.mem.Load(), held)
	}
	runtime.KeepAlive(s)
	s.Close()
	if held != 0 {
		t.Errorf("%d bytes still counted after the connection ended", held)
	}
}

// spillCapture counts how often EXEC sends what it has written.
type spillCapture struct {
	*Capture
	spills int
}

func (c *spillCapture) Spill() { c.spills++; c.Flush() }

// EXEC sends its replies as they come, not all at the end: every 1024
// replies, or sooner when its commands' arguments are large.
func TestExecSpillsItsReplies(t *testing.T) {
	env := testEnv(t)
	s := NewSession(1, "127.0.0.1:1", "127.0.0.1:2", access.RoleAdmin, func() {})
	for _, tc := range []struct {
		args      [][]byte
		n, spills int
	}{
		{[][]byte{[]byte("PING")}, 3000, 2},
		{[][]byte{[]byte("ECHO"), []byte(strings.Repeat("x", 32<<10))}, 8, 4},
	} {
		c := &spillCapture{Capture: NewCapture()}
		env.Exec(c, s, [][]byte{[]byte("MULTI")})
		for i := 0; i < tc.n; i++ {
			env.Exec(c, s, tc.args)
		}
		env.Exec(c, s, [][]byte{[]byte("EXEC")})
		if c.spills != tc.spills {
			t.Errorf("%s ×%d: EXEC spilled %d times, want %d", tc.args[0], tc.n, c.spills, tc.spills)
		}
		if got := strings.Count(string(c.Bytes()), "\r\n"); got < tc.n {
			t.Errorf("%s ×%d: %d lines of replies", tc.args[0], tc.n, got)
		}
	}
}
