package robust

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	buildOnce sync.Once
	buildDir  string
	buildPath string
	buildErr  error

	// clockEnv sets the limit clock of every node this test binary starts
	// (a build with the testclock tag reads it): noon on the 15th of a
	// month, running from when the binary started. A day or month quota
	// then never ends during a test, at whatever hour the test runs, and
	// every node, restarted or not, reads the same time.
	clockEnv = "SLUICE_TEST_CLOCK=2027-01-15T12:00:00Z@" + time.Now().UTC().Format(time.RFC3339Nano)
)

func TestMain(m *testing.M) {
	// go-redis logs every failed dial; the nemesis makes many on purpose.
	redis.SetLogger(quiet{})
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

// sluiceBinary returns $SLUICE_CHAOS_BINARY, or builds ./cmd/sluice with
// the testclock tag (clockEnv) once for the whole test binary (tests under -short never get here, so they do not
// pay for the build).
func sluiceBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("SLUICE_CHAOS_BINARY"); p != "" {
		abs, err := filepath.Abs(p)
		if err != nil {
			t.Fatal(err)
		}
		return abs
	}
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "sluice-robust-bin")
		if buildErr != nil {
			return
		}
		buildPath = filepath.Join(buildDir, "sluice")
		out, err := exec.Command("go", "build", "-tags", "testclock", "-o", buildPath, "../cmd/sluice").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build ./cmd/sluice: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildPath
}

// binaryHasFlag reports whether the binary's usage text lists a flag, so the
// suite can run against binaries from before and after a flag was added.
func binaryHasFlag(bin, flag string) bool {
	out, _ := exec.Command(bin, "--help").CombinedOutput()
	return strings.Contains(string(out), "-"+flag+" ")
}

// node is one sluice process of the test cluster, restartable with the same
// flags and data directory.
type node struct {
	idx        int
	id         string
	resp, raft string
	dir        string
	ns         string // network namespace the process runs in; "" for the host's
	logPath    string
	args       []string
	client     *redis.Client

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
}

// cluster is three sluice processes started with --bootstrap-peers.
type cluster struct {
	t     *testing.T
	bin   string
	dir   string
	nodes []*node
	net   *netLab // nil: all nodes on 127.0.0.1
	// applyTimeout says whether the binary took --apply-timeout.
	applyTimeout bool
	// apply is the --apply-timeout given (when the binary takes it).
	apply time.Duration
}

// newCluster lays out three nodes (on loopback, or one per namespace of lab)
// without starting them, with --apply-timeout 5s. The work directory (data
// and logs) is kept when the test fails, and its path logged.
func newCluster(t *testing.T, lab *netLab) *cluster {
	t.Helper()
	return newClusterApply(t, lab, 5*time.Second)
}

// dataRoot is where the nodes keep their data and logs:
// $SLUICE_ROBUST_DIR, else /dev/shm where it is a writable directory, else
// the system's temporary directory. The faults here are process kills,
// stops and cut links, which a page cache survives as well as a disk.
// With the data on a disk shared with the compiler and the other packages'
// tests, a follower fell seconds behind the log, and its lag, not the
// fault under test, decided the outcome.
func dataRoot() string {
	if d := os.Getenv("SLUICE_ROBUST_DIR"); d != "" {
		return d
	}
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		if f, err := os.CreateTemp("/dev/shm", "sluice-probe-"); err == nil {
			f.Close()
			os.Remove(f.Name())
			return "/dev/shm"
		}
	}
	return ""
}

// newClusterApply is newCluster with the given --apply-timeout: tests of
// faults that must outlast it keep them short with a short one.
func newClusterApply(t *testing.T, lab *netLab, apply time.Duration) *cluster {
	t.Helper()
	dir, err := os.MkdirTemp(dataRoot(), "sluice-robust-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("node logs and data kept in %s", dir)
			return
		}
		os.RemoveAll(dir)
	})
	c := &cluster{t: t, bin: sluiceBinary(t), dir: dir, net: lab, apply: apply}
	c.applyTimeout = binaryHasFlag(c.bin, "apply-timeout")
	var peers []string
	for i := 1; i <= 3; i++ {
		n := &node{idx: i - 1, id: fmt.Sprintf("n%d", i), dir: filepath.Join(dir, fmt.Sprintf("n%d", i))}
		n.logPath = n.dir + ".log"
		if lab != nil {
			n.ns = lab.nodeNS(i)
			n.resp = lab.nodeIP(i) + ":6380"
			n.raft = lab.nodeIP(i) + ":7380"
		} else {
			n.resp = "127.0.0.1:" + freePort(t)
			n.raft = "127.0.0.1:" + freePort(t)
		}
		c.nodes = append(c.nodes, n)
		peers = append(peers, n.id+"="+n.raft+"="+n.resp)
	}
	for _, n := range c.nodes {
		n.args = []string{"--node-id", n.id, "--resp-addr", n.resp, "--advertise", n.resp, "--raft-addr", n.raft,
			"--http-addr", "", "--data-dir", n.dir, "--bootstrap-peers", strings.Join(peers, ","), "--log-format", "text"}
		if c.applyTimeout {
			n.args = append(n.args, "--apply-timeout", apply.String())
		}
		if lab != nil {
			// Clients and peers come from 10.231.x.y, not loopback.
			n.args = append(n.args, "--protected-mode=false")
		}
		n.client = redis.NewClient(&redis.Options{
			Addr:                  n.resp,
			MaxRetries:            -1,
			DialTimeout:           3 * time.Second,
			DialerRetries:         1,
			ReadTimeout:           opTimeout + 2*time.Second,
			WriteTimeout:          opTimeout + 2*time.Second,
			ContextTimeoutEnabled: true,
			DisableIdentity:       true,
			PoolSize:              16,
		})
		t.Cleanup(func() { n.client.Close() })
	}
	// Registered after the clients, so it runs before they close: no
	// process outlives the test.
	t.Cleanup(func() {
		for _, n := range c.nodes {
			n.kill()
		}
	})
	return c
}

// start runs the node's process and waits until it answers PING.
func (n *node) start(t *testing.T, bin string) error {
	logf, err := os.OpenFile(n.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	fmt.Fprintf(logf, "---- start %s\n", time.Now().Format(time.RFC3339Nano))
	var cmd *exec.Cmd
	if n.ns != "" {
		// ip netns exec execs the program in place: the pid is sluice's.
		cmd = exec.Command("ip", append([]string{"netns", "exec", n.ns, bin}, n.args...)...)
	} else {
		cmd = exec.Command(bin, n.args...)
	}
	cmd.Env = append(os.Environ(), clockEnv)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	n.mu.Lock()
	n.cmd, n.exited = cmd, exited
	n.mu.Unlock()

	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := n.client.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("%s exited while starting (log %s)", n.id, n.logPath)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not answer PING within 60s: %v (log %s)", n.id, err, n.logPath)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// running reports whether the process is alive (possibly stopped).
func (n *node) running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return false
	}
	select {
	case <-n.exited:
		return false
	default:
		return true
	}
}

// kill sends SIGKILL and waits for the process to be gone.
func (n *node) kill() {
	n.mu.Lock()
	cmd, exited := n.cmd, n.exited
	n.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(syscall.SIGKILL)
	<-exited
}

func (n *node) signal(sig syscall.Signal) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return errors.New("not started")
	}
	return n.cmd.Process.Signal(sig)
}

// startAll starts every node and waits for an agreed leader.
func (c *cluster) startAll() {
	c.t.Helper()
	for _, n := range c.nodes {
		if err := n.start(c.t, c.bin); err != nil {
			c.t.Fatal(err)
		}
	}
	if _, err := c.leader(60 * time.Second); err != nil {
		c.t.Fatal(err)
	}
}

// info returns a node's RL.CLUSTER INFO as a map, or nil.
func (n *node) info() map[string]string {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	out, _ := clusterInfo(ctx, n.client)
	return out
}

// clusterInfo reads RL.CLUSTER INFO: a map in RESP3 (go-redis' default),
// flat pairs in RESP2.
func clusterInfo(ctx context.Context, c *redis.Client) (map[string]string, error) {
	v, err := c.Do(ctx, "RL.CLUSTER", "INFO").Result()
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	switch x := v.(type) {
	case map[any]any:
		for k, v := range x {
			out[fmt.Sprint(k)] = fmt.Sprint(v)
		}
	case []any:
		for i := 0; i+1 < len(x); i += 2 {
			out[fmt.Sprint(x[i])] = fmt.Sprint(x[i+1])
		}
	}
	return out, nil
}

// leader waits until every node names the same leader and returns it.
func (c *cluster) leader(d time.Duration) (*node, error) {
	var l *node
	err := eventually(d, func() error {
		l = nil
		id := ""
		for _, n := range c.nodes {
			inf := n.info()
			if inf == nil || inf["leader_id"] == "" {
				return fmt.Errorf("%s knows no leader", n.id)
			}
			if id != "" && inf["leader_id"] != id {
				return fmt.Errorf("nodes name leaders %s and %s", id, inf["leader_id"])
			}
			id = inf["leader_id"]
		}
		for _, n := range c.nodes {
			if n.id == id {
				l = n
			}
		}
		if l == nil {
			return fmt.Errorf("leader %q is not a member", id)
		}
		return nil
	})
	return l, err
}

// converged waits until all nodes agree on the leader, have applied the same
// index (equal to their commit index), and answer the same for every path.
// It returns the applied index.
func (c *cluster) converged(d time.Duration, paths []string) (uint64, error) {
	var applied uint64
	err := eventually(d, func() error {
		if _, err := c.leader(time.Millisecond); err != nil {
			return err
		}
		applied = 0
		for _, n := range c.nodes {
			inf := n.info()
			if inf == nil {
				return fmt.Errorf("%s: no RL.CLUSTER INFO", n.id)
			}
			a, _ := strconv.ParseUint(inf["applied_index"], 10, 64)
			ci, _ := strconv.ParseUint(inf["commit_index"], 10, 64)
			if a != ci {
				return fmt.Errorf("%s: applied %d, commit %d", n.id, a, ci)
			}
			if applied != 0 && a != applied {
				return fmt.Errorf("applied index %d on %s, %d elsewhere", a, n.id, applied)
			}
			applied = a
		}
		for _, p := range paths {
			var first string
			for i, n := range c.nodes {
				v, ver, err := readPath(context.Background(), n.client, p, false)
				if err != nil {
					return fmt.Errorf("%s GET %s: %v", n.id, p, err)
				}
				s := fmt.Sprintf("value %d version %d", v, ver)
				if i > 0 && s != first {
					return fmt.Errorf("%s: %s on %s, %s on %s", p, first, c.nodes[0].id, s, n.id)
				}
				first = s
			}
		}
		return nil
	})
	return applied, err
}

// eventually polls cond until it returns nil or d has passed, and then
// returns cond's last error.
func eventually(d time.Duration, cond func() error) error {
	deadline := time.Now().Add(d)
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %v: %w", d, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
