// Package e2e runs the real sluice binary and drives it over TCP with real
// clients, each with its default options: go-redis v9, rueidis, redis-py,
// ioredis, node-redis, redis-cli and redis-benchmark (matrix_test.go).
package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/testsupport/testkit"
	"github.com/sluice-rl/sluice/testsupport/testport"
)

var binary string

func TestMain(m *testing.M) { testkit.MainWithBinary(m, &binary) }

// requireTool returns the path of an external program. If it is missing the
// test fails when SLUICE_REQUIRE_TOOLS is set (as in CI) and is skipped,
// saying why, otherwise.
func requireTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	if os.Getenv("SLUICE_REQUIRE_TOOLS") != "" {
		t.Fatalf("%s is not installed (apt-get install redis-tools redis-server); SLUICE_REQUIRE_TOOLS is set", name)
	}
	t.Skipf("%s is not installed: install redis-tools to run this test (CI does)", name)
	return ""
}

// proc is a running sluice process.
type proc struct {
	t      *testing.T
	cmd    *exec.Cmd
	Resp   string
	HTTP   string
	GRPC   string
	mu     sync.Mutex
	log    strings.Builder
	exited chan error
}

var listening = regexp.MustCompile(`msg=listening resp=(\S+) http=(\S*) grpc=(\S*)`)

// start runs sluice with args (plus --log-format text) and waits until it
// reports its listening addresses.
func start(t *testing.T, args ...string) *proc {
	t.Helper()
	return startVia(t, nil, args...)
}

// startVia is start with the binary run through a launcher: via, then the
// binary's path, then its arguments (such as sh -c 'ulimit -n 64; exec "$0" "$@"').
func startVia(t *testing.T, via []string, args ...string) *proc {
	t.Helper()
	return startWith(t, via, nil, args...)
}

// startEnv is start with variables added to the process's environment,
// such as SLUICE_TEST_CLOCK (see testClockAt).
func startEnv(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	return startWith(t, nil, env, args...)
}

func startWith(t *testing.T, via, env []string, args ...string) *proc {
	t.Helper()
	return startProgram(t, binary, via, env, args...)
}

// startProgram is startWith for another sluice binary than this tree's,
// such as the previous release's (mixed_test.go).
func startProgram(t *testing.T, bin string, via, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{t: t, exited: make(chan error, 1)}
	argv := append(append(append([]string(nil), via...), bin), append(args, "--log-format", "text")...)
	p.cmd = exec.Command(argv[0], argv[1:]...)
	if env != nil {
		p.cmd.Env = append(os.Environ(), env...)
	}
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	found := make(chan [3]string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.log.WriteString(line + "\n")
			p.mu.Unlock()
			if m := listening.FindStringSubmatch(line); m != nil {
				found <- [3]string{m[1], m[2], m[3]}
			}
		}
		io.Copy(io.Discard, stderr)
		p.exited <- p.cmd.Wait()
	}()
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			p.cmd.Process.Kill()
			<-p.exited
		}
		if t.Failed() {
			t.Logf("sluice log:\n%s", p.Log())
		}
	})
	select {
	case a := <-found:
		p.Resp, p.HTTP, p.GRPC = a[0], a[1], a[2]
	case err := <-p.exited:
		t.Fatalf("sluice exited before listening: %v\n%s", err, p.Log())
	case <-time.After(30 * time.Second):
		t.Fatalf("sluice did not start within 30s\n%s", p.Log())
	}
	return p
}

// caughtUp is the line a node logs once it decides limits: its log
// replayed, a leader known (a lone node has elected itself).
const caughtUp = `msg="caught up with the cluster: deciding limits"`

// ready waits until the node decides limits. Until then it answers LOADING
// (or TRYAGAIN), which a test of answers would misread; on a loaded
// machine a lone node's first election alone has taken seconds.
func (p *proc) ready() *proc {
	p.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(p.Log(), caughtUp) {
		select {
		case err := <-p.exited:
			p.exited <- err
			p.t.Fatalf("sluice exited before it was ready: %v\n%s", err, p.Log())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("sluice was not ready within 60 s\n%s", p.Log())
		}
	}
	return p
}

// Log returns what the process has logged so far.
func (p *proc) Log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

// kill9 kills the process (SIGKILL) and waits until it has exited.
func (p *proc) kill9() {
	p.cmd.Process.Kill()
	<-p.exited
}

// stop sends SIGTERM and returns the exit error.
func (p *proc) stop() error {
	p.cmd.Process.Signal(os.Interrupt)
	select {
	case err := <-p.exited:
		return err
	case <-time.After(30 * time.Second):
		p.cmd.Process.Kill()
		return fmt.Errorf("did not exit within 30s of SIGINT")
	}
}

// testClockAt returns the SLUICE_TEST_CLOCK setting (the binary is built
// with the testclock tag) under which nodes decide limits as if their clock
// had read at when this was called, and the function that reads that
// clock here. Nodes given the same setting share the clock, whenever each
// starts or restarts.
func testClockAt(at time.Time) (env string, now func() time.Time) {
	real := time.Now()
	offset := at.Sub(real)
	return "SLUICE_TEST_CLOCK=" + at.UTC().Format(time.RFC3339Nano) + "@" + real.UTC().Format(time.RFC3339Nano),
		func() time.Time { return time.Now().Add(offset) }
}

// port returns the port of a host:port.
func port(addr string) string {
	_, p, _ := net.SplitHostPort(addr)
	return p
}

// single starts a one-node server on OS-chosen loopback ports and waits
// until it decides limits.
func single(t *testing.T, args ...string) *proc {
	return start(t, append([]string{"--resp-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0",
		"--raft-addr", "127.0.0.1:0", "--data-dir", t.TempDir()}, args...)...).ready()
}

// freePort returns a loopback port that was free a moment ago, for nodes
// whose addresses must be known before they start (a static cluster). It
// picks below Linux's ephemeral range (32768+), so that sockets the OS
// numbers for other tests running meanwhile do not take it.
// freePort returns a loopback port no other node of this test run was
// given (testport.Free).
func freePort(t *testing.T) string { return testport.Free(t) }

// asMap reads a reply that is a map in RESP3 (go-redis' default) and flat
// pairs in RESP2, such as RL.QUOTA or RL.CLUSTER INFO.
func asMap(v any) (map[string]any, error) {
	out := map[string]any{}
	switch x := v.(type) {
	case map[any]any:
		for k, v := range x {
			out[fmt.Sprint(k)] = v
		}
	case []any:
		for i := 0; i+1 < len(x); i += 2 {
			out[fmt.Sprint(x[i])] = x[i+1]
		}
	default:
		return nil, fmt.Errorf("reply %T is neither a map nor pairs", v)
	}
	return out, nil
}
