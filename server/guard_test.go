package server

import (
	"testing"
)

func newTestGuard() *guardConn {
	return &guardConn{srv: &Server{cfg: Config{MaxArgs: 64, MaxBulkLen: 1024}}}
}

// FuzzGuardScan feeds arbitrary byte streams to the framing guard. It must
// never panic, and where it stops must not depend on how the stream was
// split into reads.
func FuzzGuardScan(f *testing.F) {
	for _, s := range []string{
		"*1\r\n$4\r\nPING\r\n", "PING\r\n", "*2\r\n$4\r\nECHO\r\n$2000\r\n", "*65\r\n", "*1\r\n$-1\r\n",
		"*\x00\r\n", "*2\r\n$3\r\nGET\r\n$1\r\nk\r\n*1\r\n$4\r\nPING\r\n", "\n\n\n", "*0\r\n",
	} {
		f.Add([]byte(s), uint8(3))
	}
	f.Fuzz(func(t *testing.T, in []byte, step uint8) {
		whole := newTestGuard()
		n := whole.scan(in)
		split := newTestGuard()
		k := max(int(step), 1)
		m := 0
		for off := 0; off < len(in); off += k {
			end := min(off+k, len(in))
			got := split.scan(in[off:end])
			m += got
			if got < end-off {
				break
			}
		}
		if n != m || whole.fail != split.fail {
			t.Fatalf("whole stream stops at %d (%q), split by %d at %d (%q)", n, whole.fail, k, m, split.fail)
		}
		if n < len(in) && whole.fail == "" {
			t.Fatalf("stopped at %d without a reason", n)
		}
	})
}
