// Package hostile runs the real sluice binary against clients that behave
// as attackers do — huge announced lengths, slow senders, deep and huge
// arrays, garbage, half-closed sockets, pipelines of millions, floods of
// connections and of keys — and checks the bound each must hold: the
// server's resident memory (read from /proc), a bystander's PING latency,
// connections and goroutines given back, and other keys' limits. `go test
// -short` runs every scenario at a smaller size; docs/operations.md has the
// full-size figures.
package hostile

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/testsupport/resptest"
	"github.com/sluice-rl/sluice/testsupport/testkit"
)

var binary string

func TestMain(m *testing.M) { testkit.MainWithBinary(m, &binary) }

// server is a running sluice process.
type server struct {
	t    *testing.T
	cmd  *exec.Cmd
	Resp string
	HTTP string

	mu     sync.Mutex
	log    strings.Builder
	exited chan error
}

var listening = regexp.MustCompile(`msg=listening resp=(\S+) http=(\S*)`)

// start runs a one-node sluice on loopback ports the OS picks, with args.
func start(t *testing.T, args ...string) *server {
	t.Helper()
	s := &server{t: t, exited: make(chan error, 1)}
	s.cmd = exec.Command(binary, append([]string{"--resp-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0",
		"--raft-addr", "127.0.0.1:0", "--data-dir", t.TempDir(), "--log-format", "text"}, args...)...)
	stderr, err := s.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	found := make(chan [2]string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			s.mu.Lock()
			s.log.WriteString(sc.Text() + "\n")
			s.mu.Unlock()
			if m := listening.FindStringSubmatch(sc.Text()); m != nil {
				found <- [2]string{m[1], m[2]}
			}
		}
		io.Copy(io.Discard, stderr)
		s.exited <- s.cmd.Wait()
	}()
	t.Cleanup(func() {
		s.cmd.Process.Kill()
		<-s.exited
		if t.Failed() {
			s.mu.Lock()
			t.Logf("sluice log:\n%s", s.log.String())
			s.mu.Unlock()
		}
	})
	select {
	case a := <-found:
		s.Resp, s.HTTP = a[0], a[1]
	case err := <-s.exited:
		t.Fatalf("sluice exited before listening: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("sluice did not start within 30s")
	}
	waitFor(t, "the node to be ready", func() bool {
		resp, err := http.Get("http://" + s.HTTP + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return s
}

// rss returns the server's resident memory in bytes, from /proc.
func (s *server) rss() int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(s.cmd.Process.Pid) + "/status")
	if err != nil {
		s.t.Fatalf("reading the server's memory: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	s.t.Fatal("no VmRSS in /proc status")
	return 0
}

// metric returns one sample of /metrics ("name" or "name{labels}").
func (s *server) metric(name string) float64 {
	s.t.Helper()
	resp, err := http.Get("http://" + s.HTTP + "/metrics")
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	s.t.Fatalf("no metric %s", name)
	return 0
}

// watch samples, until stop, the server's RSS every 10 ms and a
// bystander's PING round trip (on its own connection, one at a time), and
// returns the largest of each.
type watch struct {
	stopc   chan struct{}
	done    chan struct{}
	maxRSS  int64
	maxPing time.Duration
	rtts    []time.Duration
	err     error // read once done is closed, or after failed
	// pings and failed are read while the watch runs.
	pings  atomic.Int64
	failed atomic.Bool
}

// p99 returns the 99th percentile of the bystander's round trips.
func (w *watch) p99() time.Duration {
	s := slices.Clone(w.rtts)
	slices.Sort(s)
	return s[len(s)*99/100]
}

func (s *server) watch(password string) *watch {
	w := &watch{stopc: make(chan struct{}), done: make(chan struct{})}
	c := dial(s.t, s.Resp)
	if password != "" {
		if got := c.Do("AUTH", password); got != "+OK" {
			s.t.Fatal(got)
		}
	}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-w.stopc:
				return
			case <-tick.C:
			}
			w.maxRSS = max(w.maxRSS, s.rss())
			start := time.Now()
			c.Conn.SetDeadline(start.Add(10 * time.Second))
			c.Conn.Write(resptest.Encode("PING"))
			got, err := c.TryRead(10 * time.Second)
			if err == nil && got != "+PONG" {
				err = fmt.Errorf("PING answered %s", got)
			}
			if err != nil {
				w.err = err
				w.failed.Store(true)
				return
			}
			rtt := time.Since(start)
			w.maxPing = max(w.maxPing, rtt)
			w.rtts = append(w.rtts, rtt)
			w.pings.Add(1)
		}
	}()
	return w
}

// stop ends the watch and fails the test if the bystander was not served.
func (w *watch) stop(t *testing.T) {
	t.Helper()
	waitFor(t, "a bystander PING", func() bool { return w.pings.Load() > 0 || w.failed.Load() })
	close(w.stopc)
	<-w.done
	if w.err != nil {
		t.Fatalf("the bystander: %v", w.err)
	}
	if w.pings.Load() == 0 {
		t.Fatal("the bystander sent no PING")
	}
}

// check asserts the bounds a scenario must hold, and logs the figures:
// the server's RSS, the bystander's 99th percentile round trip and its
// slowest one.
func (w *watch) check(t *testing.T, what string, maxRSS int64, p99, maxPing time.Duration) {
	t.Helper()
	w.stop(t)
	t.Logf("%s: server RSS at most %.1f MB; bystander PING p99 %v, at most %v (%d PINGs)", what, float64(w.maxRSS)/1e6,
		w.p99().Round(100*time.Microsecond), w.maxPing.Round(100*time.Microsecond), w.pings.Load())
	if w.maxRSS > maxRSS {
		t.Errorf("%s: server RSS reached %.1f MB, bound %.1f MB", what, float64(w.maxRSS)/1e6, float64(maxRSS)/1e6)
	}
	if w.p99() > p99 {
		t.Errorf("%s: a bystander's PING took %v at the 99th percentile, bound %v", what, w.p99(), p99)
	}
	if w.maxPing > maxPing {
		t.Errorf("%s: a bystander's PING took %v, bound %v", what, w.maxPing, maxPing)
	}
}

func dial(t *testing.T, addr string) *resptest.Client {
	t.Helper()
	return resptest.Dial(t, addr)
}

// raw opens a plain connection, closed when the test ends.
func raw(t *testing.T, addr string) *net.TCPConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c.(*net.TCPConn)
}

// waitFor polls cond until it holds, failing after a minute (a bound for
// a busy machine, not a timing).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// scale returns short in -short mode, else full.
func scale(short, full int) int {
	if testing.Short() {
		return short
	}
	return full
}

// readAll reads what the server sends until it closes the connection,
// and the error that ended it (io.EOF for a clean close).
func readAll(c net.Conn) (string, error) {
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	b, err := io.ReadAll(c)
	if err == nil {
		err = io.EOF
	}
	return string(b), err
}
