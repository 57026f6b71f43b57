package e2e

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// rssOf returns a process's resident memory now (VmRSS) and at its
// peak so far (VmHWM), in bytes.
func rssOf(t *testing.T, pid int) (now, peak int64) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	field := func(name string) int64 {
		m := regexp.MustCompile(name + `:\s+(\d+) kB`).FindSubmatch(b)
		if m == nil {
			t.Skipf("no %s in /proc/<pid>/status", name)
		}
		kb, _ := strconv.ParseInt(string(m[1]), 10, 64)
		return kb << 10
	}
	return field("VmRSS"), field("VmHWM")
}

// TestTransactionsStayWithinClientBuffers: 32 connections each open a
// transaction and queue 1 MiB ECHOs until the server refuses one, with
// --max-client-buffers at its default of 1 GiB. The bytes the server
// counts stay within the buffers' share of the flag (seven eighths, plus
// each connection's first 16 KiB read buffer), and the whole process's
// resident memory at its peak stays within 1.25 times the flag: 0.99 to
// 1.04 times beside two CPU hogs since the buffers take seven eighths
// and the collector's lag the rest (1.11 to 1.15 when they took the whole
// flag, and 1.24 in CI beside the other packages' tests, where
// connections refused early closed and their queues' garbage outran the
// collector; 2.1 GiB before the runtime's memory limit followed the flag,
// memlimit.go).
func TestTransactionsStayWithinClientBuffers(t *testing.T) {
	const bound, conns, arg = 1 << 30, 32, 1 << 20
	p := single(t, "--max-client-buffers", strconv.Itoa(bound), "--max-bulk-len", strconv.Itoa(2<<20))
	base, _ := rssOf(t, p.cmd.Process.Pid)
	echo := fmt.Sprintf("*2\r\n$4\r\nECHO\r\n$%d\r\n%s\r\n", arg, strings.Repeat("x", arg))
	var wg sync.WaitGroup
	var mu sync.Mutex
	queued, refused := 0, 0
	held := make([]net.Conn, conns)
	for i := range held {
		nc, err := net.Dial("tcp", p.Resp)
		if err != nil {
			t.Fatal(err)
		}
		held[i] = nc
		t.Cleanup(func() { nc.Close() })
		wg.Add(1)
		go func() {
			defer wg.Done()
			nc.SetDeadline(time.Now().Add(2 * time.Minute))
			r := bufio.NewReader(nc)
			fmt.Fprint(nc, "*1\r\n$5\r\nMULTI\r\n")
			if l, _ := r.ReadString('\n'); l != "+OK\r\n" {
				t.Errorf("MULTI: %q", l)
				return
			}
			for k := 0; k < 2*bound/arg; k++ {
				if _, err := nc.Write([]byte(echo)); err != nil {
					t.Errorf("writing ECHO %d: %v", k, err)
					return
				}
				l, err := r.ReadString('\n')
				switch {
				case err != nil:
					t.Errorf("ECHO %d: %v", k, err)
					return
				case l == "+QUEUED\r\n":
					mu.Lock()
					queued++
					mu.Unlock()
				case strings.HasPrefix(l, "-ERR client"):
					mu.Lock()
					refused++
					mu.Unlock()
					return
				case strings.HasPrefix(l, "-ERR transaction too large"):
					// A slow server: connections refused early left room,
					// and this one reached a transaction's own 64 MiB.
					return
				default:
					t.Errorf("ECHO %d: %q", k, l)
					return
				}
			}
		}()
	}
	wg.Wait()
	accounted := metricValue(t, p.HTTP, "sluice_client_buffers_bytes")
	rss, peak := rssOf(t, p.cmd.Process.Pid)
	t.Logf("%d ECHOs of %d KiB queued, %d connections refused; counted %.1f MiB; RSS %.1f MiB at the start, %.1f MiB now, %.1f MiB at the peak (%.2f times the bound of %d MiB)",
		queued, arg>>10, refused, accounted/(1<<20), mib(base), mib(rss), mib(peak), float64(peak)/bound, bound>>20)
	if refused == 0 {
		t.Errorf("%d connections queued %d MiB and none was refused", conns, 2*bound>>20)
	}
	if most := float64(bound - bound/8 + (conns+2)*16<<10); accounted > most {
		t.Errorf("counted %.0f bytes of client buffers, over %.0f", accounted, most)
	}
	if float64(peak) > 1.25*bound {
		t.Errorf("resident memory reached %.1f MiB at its peak under a bound of %d MiB", mib(peak), bound>>20)
	}
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// metricValue reads one unlabelled metric from a node's /metrics.
func metricValue(t *testing.T, httpAddr, name string) float64 {
	t.Helper()
	for _, l := range strings.Split(metricsText(t, httpAddr), "\n") {
		if f := strings.Fields(l); len(f) == 2 && f[0] == name {
			v, _ := strconv.ParseFloat(f[1], 64)
			return v
		}
	}
	t.Fatalf("no %s in /metrics", name)
	return 0
}
