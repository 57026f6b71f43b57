package e2e

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestMixedVersionRollingUpgrade upgrades a three-node cluster of the
// previous release (the commit in testdata/previous-release, built from
// this repository's history) to this tree's binary one node at a time, as
// a rolling deploy does: graceful stop, the same data directory and flags,
// wait until the node is ready. Steady load runs on all three nodes from
// start to end: inline and budget RL.ACQUIRE (token leases between nodes,
// under an enforcing parent), concurrency slots taken and released through
// another node, and RL.RESERVE on one node settled on another (relayed to
// the issuer). With all nodes old, at each mixed step and with all nodes
// new, the test checks what SPEC §5 and §12 promise across nodes:
//
//   - limiting: fresh keys (10 an hour, and their enforcing parent of 15)
//     admit their limit through all three nodes, and at most the limit plus
//     the credits of the two other nodes ((N−1) × ⌈burst/N⌉,
//     docs/cluster.md "The bound");
//   - leasing: over the check's window the load's enforcing parent admits
//     at most 1.01 × (burst + rate × window) + burst (SPEC §5);
//   - concurrency: the clients never hold more slots than the limit, from
//     start to end, restarts included; at each step a fresh key's limit is
//     full on every node;
//   - settling: a reservation issued by each node settles through each
//     other node (old through new, new through old), with the reply's
//     remaining exact to the token, and the issuer's bucket is then exactly
//     what the settle said;
//   - no call and no node-to-node message gets a protocol error, an unknown
//     command or a refused authentication; peers' messages stop failing once
//     a restarted node is back.
//
// TRYAGAIN, LOADING and CLUSTERDOWN are retried at any moment (an election
// may come at any time), and the failures a restart causes (its node's
// connections, its reservations forgotten) are tolerated only for that
// node's restart.
func TestMixedVersionRollingUpgrade(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the previous release and rolling-restarts a 3-process cluster; skipped under -short")
	}
	began := time.Now()
	rev := previousRelease(t)
	oldBin := buildPrevious(t, rev)
	t.Logf("previous release %s built in %v", rev[:12], time.Since(began).Round(time.Millisecond))

	ms := startMixed(t, oldBin)
	for _, n := range ms {
		waitReady(t, n.c)
	}
	tree := [][]any{
		{"load", "SHARING", "enforce", "RATE", mixParentRate, "PER", "second"},
		{"load/a", "RATE", 25, "PER", "second"},
		{"load/b", "RATE", 25, "PER", "second"},
		{"jobs", "RATE", 1000000, "PER", "minute", "CONCURRENCY", mixSlots},
		{"llm", "RATE", 600000, "PER", "minute", "SCOPE", "user"},
	}
	for _, b := range tree {
		setBudget(t, ms[0], ms, b...)
	}

	l := &mixLoad{t: t, nodes: ms, stop: make(chan struct{})}
	l.run()
	defer l.end()
	// The load is under way on every node before the first check.
	eventually(t, 60*time.Second, "the load admitted on every node", func() bool {
		for _, n := range ms {
			if n.admitted.Load() < 10 {
				return false
			}
		}
		return true
	})

	checkStep(t, l, 0)
	for i, n := range ms {
		n.restart(t, l, ms)
		checkStep(t, l, i+1)
	}
	l.end()

	t.Logf("load: %d inline and %d budget calls admitted, %d refused; %d slots held (at most %d at once, limit %d); %d reservations settled on another node, %d lost with their issuer's restart; %d calls answered TRYAGAIN/LOADING/CLUSTERDOWN and retried, %d failed with a restarting node",
		l.inline.Load(), l.budget.Load(), l.refused.Load(), l.slots.Load(), l.most.Load(), mixSlots, l.settled.Load(), l.lost.Load(), l.retried.Load(), l.restartErrs.Load())
	l.report()
	if l.most.Load() > mixSlots {
		t.Errorf("the clients held %d slots of jobs at once, limit %d", l.most.Load(), mixSlots)
	}
	if l.settled.Load() == 0 || l.slots.Load() == 0 {
		t.Errorf("the load settled %d reservations and held %d slots: it did not run", l.settled.Load(), l.slots.Load())
	}
	for _, n := range ms {
		for _, p := range n.lives {
			if bad := peerErrorLines(p.Log()); len(bad) > 0 {
				t.Errorf("%s logged node-to-node errors:\n%s", n.id, strings.Join(bad, "\n"))
			}
		}
	}
	t.Logf("took %v", time.Since(began).Round(time.Millisecond))
}

const (
	mixParentRate = 30                          // the load's enforcing parent, a second (burst the same)
	mixSlots      = 3                           // jobs' concurrency
	mixSecret     = "mixed-version-peer-secret" // --peer-password: what nodes prove themselves with
	mixPassword   = "mixed-version-clients"     // --requirepass: the clients'
)

// mixRedis is a client of a node of the mixed cluster.
func mixRedis(addr string, readTimeout time.Duration, pool int) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, Password: mixPassword, MaxRetries: -1, ReadTimeout: readTimeout, PoolSize: pool})
}

// previousRelease returns the commit named in testdata/previous-release
// (lines starting with # are comments), and fails (SLUICE_REQUIRE_TOOLS)
// or skips, saying why, if git or the commit cannot be had.
func previousRelease(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "previous-release"))
	if err != nil {
		t.Fatal(err)
	}
	rev := ""
	for _, line := range strings.Split(string(b), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			rev = line
			break
		}
	}
	if !regexp.MustCompile(`^[0-9a-f]{40}$`).MatchString(rev) {
		t.Fatalf("testdata/previous-release names %q, not a 40-hex commit id", rev)
	}
	if _, err := exec.LookPath("git"); err != nil {
		unavailable(t, "git is not installed: this test builds the previous release (%s) from the repository's history", rev)
	}
	if out, err := exec.Command("git", "cat-file", "-e", rev+"^{commit}").CombinedOutput(); err != nil {
		unavailable(t, "the previous release %s (testdata/previous-release) is not in this checkout's history (a shallow clone? git fetch --unshallow): %v %s", rev, err, out)
	}
	return rev
}

// unavailable fails the test when SLUICE_REQUIRE_TOOLS is set (as in CI)
// and skips it, saying why, otherwise, as requireTool does.
func unavailable(t *testing.T, format string, args ...any) {
	t.Helper()
	if os.Getenv("SLUICE_REQUIRE_TOOLS") != "" {
		t.Fatalf(format+"; SLUICE_REQUIRE_TOOLS is set", args...)
	}
	t.Skipf(format, args...)
}

// buildPrevious builds cmd/sluice of commit rev (with the testclock tag,
// as TestMain builds this tree's) from git archive into a temporary folder
// and returns the binary's path; the sources are removed once it is built.
func buildPrevious(t *testing.T, rev string) string {
	t.Helper()
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Fatalf("git rev-parse --show-toplevel: %v", err)
	}
	// From the top: in a subfolder, git archive takes only that folder.
	archive := exec.Command("git", "archive", "--format=tar", rev)
	archive.Dir = strings.TrimSpace(string(top))
	var stderr bytes.Buffer
	archive.Stderr = &stderr
	out, err := archive.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := archive.Start(); err != nil {
		t.Fatal(err)
	}
	xerr := untar(out, src)
	io.Copy(io.Discard, out)
	if err := archive.Wait(); err != nil || xerr != nil {
		t.Fatalf("git archive %s: %v %v %s", rev, err, xerr, stderr.String())
	}
	bin := filepath.Join(dir, "sluice-"+rev[:12])
	build := exec.Command("go", "build", "-tags", "testclock", "-o", bin, "./cmd/sluice")
	build.Dir = src
	build.Env = append(os.Environ(), "GOWORK=off")
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the previous release %s: %v\n%s", rev, err, b)
	}
	if err := os.RemoveAll(src); err != nil {
		t.Fatal(err)
	}
	return bin
}

// untar writes the files and folders of a tar stream under dir.
func untar(r io.Reader, dir string) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		name := filepath.Join(dir, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(name, dir+string(filepath.Separator)) {
			continue
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(name, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
				return err
			}
			f, err := os.OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode)&0o777|0o600)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		case tar.TypeSymlink:
			os.Symlink(h.Linkname, name)
		}
	}
}

// mixNode is a member of the mixed cluster: the binary it runs now, and
// its lives (a process each).
type mixNode struct {
	*member
	peers    string
	bin      string
	version  string      // "old" or "new"
	down     atomic.Bool // from just before its stop until it is ready again
	life     atomic.Int64
	lives    []*proc
	admitted atomic.Int64 // load calls it admitted
}

func (n *mixNode) label() string { return n.id + "(" + n.version + ")" }

// launch starts the node's binary with the flags every life gets.
func (n *mixNode) launch(t *testing.T) {
	t.Helper()
	n.p = startProgram(t, n.bin, nil, n.env, "--node-id", n.id, "--resp-addr", n.resp, "--raft-addr", n.raft,
		"--http-addr", "127.0.0.1:0", "--data-dir", n.dir, "--bootstrap-peers", n.peers,
		"--requirepass", mixPassword, "--peer-password", mixSecret, "--log-level", "debug")
	n.lives = append(n.lives, n.p)
	if n.c == nil {
		n.c = mixRedis(n.resp, 10*time.Second, 10)
		t.Cleanup(func() { n.c.Close() })
	}
}

// startMixed starts three nodes of bin (a static cluster, as threeNodes)
// and waits until each lists the three members.
func startMixed(t *testing.T, bin string) []*mixNode {
	t.Helper()
	var ms []*mixNode
	var peers []string
	// One test clock for every node and life: 06:00, so that no day
	// (checkSettles' fixed window) ends while the test runs.
	clock, _ := testClockAt(time.Date(2027, 1, 15, 6, 0, 0, 0, time.UTC))
	for i := 1; i <= 3; i++ {
		n := &mixNode{member: &member{id: fmt.Sprintf("n%d", i), resp: "127.0.0.1:" + freePort(t), raft: "127.0.0.1:" + freePort(t), dir: t.TempDir(), env: []string{clock}},
			bin: bin, version: "old"}
		ms = append(ms, n)
		peers = append(peers, n.id+"="+n.raft+"="+n.resp)
	}
	for _, n := range ms {
		n.peers = strings.Join(peers, ",")
		n.launch(t)
	}
	var members []*member
	for _, n := range ms {
		members = append(members, n.member)
	}
	leader(t, members)
	listMembers(t, members, 3)
	return ms
}

// restart stops n gracefully (SIGINT: it must exit 0), starts this tree's
// binary on the same data directory with the same flags, and waits until
// it is ready (/readyz) and the cluster has settled (see settled).
func (n *mixNode) restart(t *testing.T, l *mixLoad, ms []*mixNode) {
	t.Helper()
	from := n.label()
	n.down.Store(true)
	n.life.Add(1)
	began := time.Now()
	if err := n.p.stop(); err != nil {
		t.Fatalf("stopping %s: %v\n%s", from, err, n.p.Log())
	}
	n.bin, n.version = binary, "new"
	n.launch(t)
	eventually(t, 60*time.Second, n.label()+" ready (/readyz) after its restart", func() bool {
		return readyz(t, n.p.HTTP) == http.StatusOK
	})
	n.life.Add(1)
	n.down.Store(false)
	t.Logf("%s restarted as %s: ready %v after its stop", from, n.label(), time.Since(began).Round(time.Millisecond))
}

// versions describes the cluster's mix, such as "n1(new) n2(old) n3(old)".
func versions(ms []*mixNode) string {
	var s []string
	for _, n := range ms {
		s = append(s, n.label())
	}
	return strings.Join(s, " ")
}

// setBudget writes a budget node through via and waits until every node
// has it.
func setBudget(t *testing.T, via *mixNode, ms []*mixNode, args ...any) {
	t.Helper()
	ctx := context.Background()
	var err error
	for try := 0; try < 100; try++ {
		if err = via.c.Do(ctx, append([]any{"RL.BUDGET", "SET"}, args...)...).Err(); err == nil || !retriable(err) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("RL.BUDGET SET %v through %s: %v", args, via.label(), err)
	}
	path := fmt.Sprint(args[0])
	for _, n := range ms {
		eventually(t, 30*time.Second, path+" on "+n.label(), func() bool { return budgetVersion(t, n.c, path) != 0 })
	}
}

// retriable: a reply a client retries at any moment (an election, a node
// catching up, a relay to a member that did not answer).
func retriable(err error) bool {
	s := err.Error()
	return strings.HasPrefix(s, "TRYAGAIN") || strings.HasPrefix(s, "LOADING") || strings.HasPrefix(s, "CLUSTERDOWN")
}

// peerProtocol: an error that says two nodes (or a client and a node) do
// not speak the same protocol; never tolerated.
var peerProtocol = regexp.MustCompile(`(?i)unknown command|unknown subcommand|protocol error|wrong number of arguments|syntax error|NOPERM|WRONGPASS|NOAUTH|malformed|unexpected reply|unknown reply`)

// transport: the error of a connection to a node that stopped or is not
// yet listening.
func transport(err error) bool {
	var ne net.Error
	if errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	s := err.Error()
	return strings.Contains(s, "connection refused") || strings.Contains(s, "connection reset") ||
		strings.Contains(s, "broken pipe") || strings.Contains(s, "use of closed network connection")
}

// peerErrorLines returns the lines of a node's log that report a
// node-to-node message refused for its form or its authentication.
func peerErrorLines(log string) []string {
	var bad []string
	sc := bufio.NewScanner(strings.NewReader(log))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if line := sc.Text(); peerProtocol.MatchString(line) && len(bad) < 20 {
			bad = append(bad, line)
		}
	}
	return bad
}

// mixLoad is the steady load: four callers on every node, each its own
// connection, from the first check to the end.
type mixLoad struct {
	t     *testing.T
	nodes []*mixNode
	stop  chan struct{}
	wg    sync.WaitGroup
	once  sync.Once

	inline, budget, refused atomic.Int64
	slots, inFlight, most   atomic.Int64
	settled, lost           atomic.Int64
	retried, restartErrs    atomic.Int64

	mu      sync.Mutex
	admits  []mixAdmit // the budget calls admitted (charged to the parent "load")
	errs    []string
	nerrs   int
	byIssue map[string]*mixNode
}

// mixAdmit is an admitted call: when it was sent and when its reply came.
type mixAdmit struct{ sent, got time.Time }

func (l *mixLoad) run() {
	l.byIssue = map[string]*mixNode{}
	for _, n := range l.nodes {
		l.byIssue[n.id] = n
	}
	for i, n := range l.nodes {
		next := l.nodes[(i+1)%len(l.nodes)]
		for _, f := range []func(here, there *mixClient, k int){l.acquireInline, l.acquireBudget, l.holdSlot, l.reserveSettle} {
			here, there := newMixClient(n), newMixClient(next)
			l.wg.Add(1)
			go func() {
				defer l.wg.Done()
				defer here.c.Close()
				defer there.c.Close()
				for k := 0; !l.stopped(); k++ {
					f(here, there, k)
					time.Sleep(3 * time.Millisecond)
				}
			}()
		}
	}
}

// mixClient is a load caller's connection to one node, and the node's
// life as of the last reply on it.
type mixClient struct {
	c    *redis.Client
	n    *mixNode
	seen int64
}

func newMixClient(n *mixNode) *mixClient {
	return &mixClient{c: mixRedis(n.resp, 15*time.Second, 1), n: n, seen: n.life.Load()}
}

func (l *mixLoad) stopped() bool {
	select {
	case <-l.stop:
		return true
	default:
		return false
	}
}

func (l *mixLoad) end() {
	l.once.Do(func() {
		close(l.stop)
		l.wg.Wait()
	})
}

func (l *mixLoad) fail(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.nerrs++
	if len(l.errs) < 20 {
		l.errs = append(l.errs, fmt.Sprintf(format, args...))
	}
}

func (l *mixLoad) report() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range l.errs {
		l.t.Errorf("load: %s", e)
	}
	if l.nerrs > len(l.errs) {
		l.t.Errorf("load: %d errors more", l.nerrs-len(l.errs))
	}
}

// do sends one call to mc's node and judges its error: a protocol error
// always fails the test; TRYAGAIN, LOADING and CLUSTERDOWN are retried (up
// to 30 s); a broken connection is tolerated if the node restarted since
// the last reply on this connection or is restarting, and fails the test
// otherwise. It returns the reply (nil when the call is given up) and
// whether the call was sent more than once.
func (l *mixLoad) do(mc *mixClient, args ...any) (any, bool, error) {
	n := mc.n
	deadline := time.Now().Add(30 * time.Second)
	for try := 0; ; try++ {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		v, err := mc.c.Do(ctx, args...).Result()
		cancel()
		if err == nil || redis.HasErrorPrefix(err, "NORESERVATION") {
			mc.seen = n.life.Load()
			if n.down.Load() {
				mc.seen = -1 // the old life answered while stopping
			}
			return v, try > 0, err
		}
		switch {
		case peerProtocol.MatchString(err.Error()):
			l.fail("%v on %s: %v", args, n.label(), err)
			return nil, try > 0, err
		case retriable(err) && time.Now().Before(deadline):
			l.retried.Add(1)
		case transport(err) && (n.down.Load() || n.life.Load() != mc.seen):
			l.restartErrs.Add(1)
			time.Sleep(20 * time.Millisecond)
			return nil, try > 0, err
		default:
			l.fail("%v on %s: %v", args, n.label(), err)
			return nil, try > 0, err
		}
		if l.stopped() {
			return nil, true, err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// allowed reads the first field of a limiting reply.
func allowed(v any) (int64, []any, bool) {
	f, ok := v.([]any)
	if !ok || len(f) < 6 {
		return 0, f, false
	}
	a, ok := f[0].(int64)
	return a, f, ok
}

func (l *mixLoad) count(n *mixNode, v any, what string, admitted *atomic.Int64) bool {
	a, _, ok := allowed(v)
	switch {
	case !ok:
		l.fail("%s on %s: reply %v", what, n.label(), v)
	case a == 1:
		admitted.Add(1)
		n.admitted.Add(1)
		return true
	default:
		l.refused.Add(1)
	}
	return false
}

func (l *mixLoad) acquireInline(here, _ *mixClient, _ int) {
	if v, _, err := l.do(here, "RL.ACQUIRE", "mix:inline", "RATE", 50, "PER", "second"); err == nil {
		l.count(here.n, v, "inline RL.ACQUIRE", &l.inline)
	}
}

func (l *mixLoad) acquireBudget(here, _ *mixClient, k int) {
	path := []string{"load/a", "load/b"}[k%2]
	sent := time.Now()
	if v, _, err := l.do(here, "RL.ACQUIRE", path); err == nil && l.count(here.n, v, "RL.ACQUIRE "+path, &l.budget) {
		got := time.Now()
		l.mu.Lock()
		l.admits = append(l.admits, mixAdmit{sent, got})
		l.mu.Unlock()
	}
}

// lives returns every node's life now.
func (l *mixLoad) lives() map[*mixNode]int64 {
	out := map[*mixNode]int64{}
	for _, n := range l.nodes {
		out[n] = n.life.Load()
		if n.down.Load() {
			out[n] = -1
		}
	}
	return out
}

// issuer returns the node a reservation id names.
func (l *mixLoad) issuer(id string) *mixNode {
	_, who, _ := strings.Cut(id, "@")
	return l.byIssue[who]
}

// forgot: whether a reservation issued by n in the life it had may be gone
// (n restarted since, or is restarting).
func forgot(n *mixNode, life int64) bool {
	return n == nil || life < 0 || n.down.Load() || n.life.Load() != life
}

// holdSlot takes a slot of jobs on here's node, holds it a moment
// (counted in flight by the clients: in after the grant, out before the
// release, so they count at most what the cluster holds) and releases it
// through the next node.
func (l *mixLoad) holdSlot(here, there *mixClient, _ int) {
	lives := l.lives()
	v, _, err := l.do(here, "RL.RESERVE", "jobs", "COST", 1, "TTL", 5000)
	if err != nil {
		return
	}
	a, f, ok := allowed(v)
	if !ok || len(f) != 7 {
		l.fail("RL.RESERVE jobs on %s: reply %v", here.n.label(), v)
		return
	}
	if a != 1 {
		l.refused.Add(1)
		time.Sleep(5 * time.Millisecond)
		return
	}
	id := fmt.Sprint(f[6])
	who := l.issuer(id)
	if who == nil {
		l.fail("RL.RESERVE jobs on %s: id %q names no member", here.n.label(), id)
		return
	}
	granted := time.Now()
	in := l.inFlight.Add(1)
	for m := l.most.Load(); in > m && !l.most.CompareAndSwap(m, in); m = l.most.Load() {
	}
	l.slots.Add(1)
	time.Sleep(3 * time.Millisecond) // the work
	l.inFlight.Add(-1)
	r, retried, err := l.do(there, "RL.RELEASE", id)
	if err != nil {
		return
	}
	// :0 only if the issuer forgot it, a retry follows a release that
	// went through, or the TTL (5 s) may have run out.
	if r != int64(1) && !forgot(who, lives[who]) && !retried && time.Since(granted) < 2500*time.Millisecond {
		l.fail("RL.RELEASE %s on %s (issued by %s): %v", id, there.n.label(), who.label(), r)
	}
}

// reserveSettle reserves 5 tokens of llm (per subject) on here's node and
// settles the real cost, 1 to 9, on the next node, which relays it to the
// issuer.
func (l *mixLoad) reserveSettle(here, there *mixClient, k int) {
	n := here.n
	life := l.lives()[n]
	key := "u" + strconv.Itoa(k%7)
	v, _, err := l.do(here, "RL.RESERVE", "llm", "KEY", key, "COST", 5, "TTL", 30000)
	if err != nil {
		return
	}
	a, f, ok := allowed(v)
	if !ok || len(f) != 7 {
		l.fail("RL.RESERVE llm on %s: reply %v", n.label(), v)
		return
	}
	if a != 1 {
		l.refused.Add(1)
		return
	}
	id := fmt.Sprint(f[6])
	if l.issuer(id) != n {
		l.fail("RL.RESERVE llm on %s: id %q names another node", n.label(), id)
		return
	}
	actual := 1 + k%9
	s, retried, err := l.do(there, "RL.SETTLE", id, "ACTUAL", actual)
	switch {
	case err != nil && redis.HasErrorPrefix(err, "NORESERVATION") && (forgot(n, life) || retried):
		l.lost.Add(1)
	case err != nil && redis.HasErrorPrefix(err, "NORESERVATION"):
		l.fail("RL.SETTLE %s on %s (issued by %s, which did not restart): %v", id, there.n.label(), n.label(), err)
	case err != nil:
	default:
		sa, sf, ok := allowed(s)
		if !ok || len(sf) != 6 || sa != 1 || sf[2] != int64(600000) || sf[5] != f[5] {
			l.fail("RL.SETTLE %s ACTUAL %d on %s (issued by %s): reply %v, want allowed=1, limit 600000, limited_by %v", id, actual, there.n.label(), n.label(), s, f[5])
			return
		}
		l.settled.Add(1)
	}
}

// parentAdmitted counts the budget calls admitted that were sent and
// answered within [from, to]: all of them decided within it.
func (l *mixLoad) parentAdmitted(from, to time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, a := range l.admits {
		if !a.sent.Before(from) && !a.got.After(to) {
			n++
		}
	}
	return n
}

// peerFailures are the counters of node-to-node messages that failed.
var peerFailures = []string{"sluice_lease_requests_failed_total", "sluice_sync_messages_failed_total", "sluice_slot_messages_failed_total"}

// failures reads n's peerFailures from /metrics.
func failures(n *mixNode) (map[string]float64, error) {
	resp, err := http.Get("http://" + n.p.HTTP + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok || strings.HasPrefix(name, "#") {
			continue
		}
		name, _, _ = strings.Cut(name, "{")
		for _, f := range peerFailures {
			if name == f {
				x, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
				if err != nil {
					return nil, fmt.Errorf("%s: %q", f, value)
				}
				out[f] += x
			}
		}
	}
	for _, f := range peerFailures {
		if _, ok := out[f]; !ok {
			return nil, fmt.Errorf("%s does not report %s", n.label(), f)
		}
	}
	return out, sc.Err()
}

// settled waits until every node is ready, names the same leader, lists
// three members and hears from its peers (sync_lag_ms under a second),
// and no node-to-node message has failed on any node for 1.5 s: a node
// limits the buckets of an owner it could not reach from its own for one
// second after the failure (docs/cluster.md), which no check of a bound
// may overlap.
func settled(t *testing.T, ms []*mixNode, when string) {
	t.Helper()
	var members []*member
	for _, n := range ms {
		members = append(members, n.member)
	}
	leader(t, members)
	var last string
	deadline := time.Now().Add(60 * time.Second)
	for ready := false; !ready; {
		if time.Now().After(deadline) {
			t.Fatalf("%s: the nodes (%s) not all ready and hearing their peers within 60 s: %s", when, versions(ms), last)
		}
		ready = true
		for _, n := range ms {
			if readyz(t, n.p.HTTP) != http.StatusOK {
				last, ready = n.label()+" not ready (/readyz)", false
				break
			}
			inf := n.info(t)
			lag, err := strconv.Atoi(inf["sync_lag_ms"])
			if inf["members"] != "3" || inf["leader_id"] == "" || err != nil || lag < 0 || lag > 1000 {
				last, ready = fmt.Sprintf("%s: RL.CLUSTER INFO %v", n.label(), inf), false
				break
			}
		}
		if !ready {
			time.Sleep(25 * time.Millisecond)
		}
	}
	var seen []map[string]float64
	quietSince := time.Now()
	deadline = time.Now().Add(60 * time.Second)
	for time.Since(quietSince) < 1500*time.Millisecond {
		if time.Now().After(deadline) {
			var logged []string
			for _, n := range ms {
				if bad := peerErrorLines(n.p.Log()); len(bad) > 0 {
					logged = append(logged, n.label()+":\n"+strings.Join(bad[:min(len(bad), 3)], "\n"))
				}
			}
			t.Fatalf("%s: node-to-node messages (%s) still failing after 60 s: %s\n%s", when, versions(ms), last, strings.Join(logged, "\n"))
		}
		time.Sleep(100 * time.Millisecond)
		var now []map[string]float64
		for _, n := range ms {
			f, err := failures(n)
			if err != nil && strings.Contains(err.Error(), "does not report") {
				t.Fatal(err)
			}
			if err != nil {
				last = err.Error()
				quietSince = time.Now()
				now = nil
				break
			}
			now = append(now, f)
		}
		if now == nil {
			continue
		}
		var changed []string
		for i := range now {
			for _, f := range peerFailures {
				if seen != nil && now[i][f] != seen[i][f] {
					changed = append(changed, fmt.Sprintf("%s %s %v → %v", ms[i].label(), f, seen[i][f], now[i][f]))
				}
			}
		}
		if len(changed) > 0 {
			last, quietSince = strings.Join(changed, ", "), time.Now()
		}
		seen = now
	}
}

// checkStep runs the checks of one step of the upgrade (step nodes new).
func checkStep(t *testing.T, l *mixLoad, step int) {
	t.Helper()
	ms := l.nodes
	mix := versions(ms)
	settled(t, ms, fmt.Sprintf("step %d", step))
	began := time.Now()
	before := map[string]map[string]float64{}
	for _, n := range ms {
		f, err := failures(n)
		if err != nil {
			t.Fatal(err)
		}
		before[n.id] = f
	}

	checkLimits(t, ms, step)
	checkSettles(t, ms, step)
	checkSlots(t, ms, step)

	// The load's enforcing parent over the checks' window, which no
	// restart and no failed lease request overlapped.
	end := time.Now()
	d := end.Sub(began).Seconds()
	got := l.parentAdmitted(began, end)
	bound := 1.01*(mixParentRate+mixParentRate*d) + mixParentRate
	t.Logf("step %d [%s]: the load's enforcing parent admitted %d in %.1f s (rate %d/s, burst %d: bound %.0f)", step, mix, got, d, mixParentRate, mixParentRate, bound)
	if float64(got) > bound {
		t.Errorf("step %d [%s]: the enforcing parent load admitted %d in %.1f s: above its limit's bound %.0f (1.01 × (burst + rate × window) + burst)", step, mix, got, d, bound)
	}
	for _, n := range ms {
		f, err := failures(n)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range peerFailures {
			if x := f[name] - before[n.id][name]; x > 0 {
				t.Logf("step %d [%s]: %s: %s +%v during the checks", step, mix, n.label(), name, x)
			}
		}
	}
}

// drive sends RL.ACQUIRE with each of calls to the nodes in turn, a call
// every 20 ms, until every node has refused every one five times in a row
// and none was admitted for 1.5 s (a lease's unused tokens go back to the
// owner 250 ms after their grant), and returns how many of each were
// admitted.
func drive(t *testing.T, ms []*mixNode, what string, calls ...[]any) []int {
	t.Helper()
	ctx := context.Background()
	admitted := make([]int, len(calls))
	refusedInRow := make([]int, len(calls)*len(ms))
	last := time.Now()
	deadline := time.Now().Add(60 * time.Second)
	for i := 0; ; i++ {
		if time.Now().After(deadline) {
			t.Fatalf("%s: still admitting after 60 s (%v admitted)", what, admitted)
		}
		slot := i % len(refusedInRow)
		n, args := ms[slot%len(ms)], calls[slot/len(ms)]
		v, err := n.c.Do(ctx, append([]any{"RL.ACQUIRE"}, args...)...).Result()
		if err != nil {
			if !retriable(err) || peerProtocol.MatchString(err.Error()) {
				t.Fatalf("%s: RL.ACQUIRE %v on %s: %v", what, args, n.label(), err)
			}
			time.Sleep(20 * time.Millisecond)
			continue
		}
		a, _, ok := allowed(v)
		if !ok {
			t.Fatalf("%s: RL.ACQUIRE %v on %s: reply %v", what, args, n.label(), v)
		}
		if a == 1 {
			admitted[slot/len(ms)]++
			refusedInRow[slot] = 0
			last = time.Now()
		} else {
			refusedInRow[slot]++
		}
		done := time.Since(last) >= 1500*time.Millisecond
		for _, r := range refusedInRow {
			done = done && r >= 5
		}
		if done {
			return admitted
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// checkLimits: two fresh children of 10 an hour under a fresh enforcing
// parent of 15 an hour, driven through all three nodes until they refuse,
// first a then b. A key admits its limit, and at most the limit plus the
// two other nodes' credits (⌈burst/3⌉ each; an hour's refill adds none
// within the minute a step takes): a 10..18, and the parent 15..25 in all.
func checkLimits(t *testing.T, ms []*mixNode, step int) {
	t.Helper()
	mix := versions(ms)
	parent := fmt.Sprintf("chk%d", step)
	via := ms[step%len(ms)]
	setBudget(t, via, ms, parent, "SHARING", "enforce", "RATE", 15, "PER", "hour")
	setBudget(t, via, ms, parent+"/a", "RATE", 10, "PER", "hour")
	setBudget(t, via, ms, parent+"/b", "RATE", 10, "PER", "hour")
	credit := func(burst int) int { return (len(ms) - 1) * int(math.Ceil(float64(burst)/float64(len(ms)))) }
	a := drive(t, ms, parent+"/a", []any{parent + "/a"})[0]
	b := drive(t, ms, parent+"/b", []any{parent + "/b"})[0]
	t.Logf("step %d [%s]: %s/a (10 an hour) admitted %d, %s/b %d, the enforcing parent %s (15 an hour) %d", step, mix, parent, a, parent, b, parent, a+b)
	if a < 10 || a > 10+credit(10) {
		t.Errorf("step %d [%s]: %s/a, 10 an hour, admitted %d through three nodes: want 10..%d", step, mix, parent, a, 10+credit(10))
	}
	if b > 10+credit(10) {
		t.Errorf("step %d [%s]: %s/b, 10 an hour, admitted %d through three nodes: want at most %d", step, mix, parent, b, 10+credit(10))
	}
	if a+b < 15 || a+b > 15+credit(15) {
		t.Errorf("step %d [%s]: the enforcing parent %s, 15 an hour, admitted %d through three nodes: want 15..%d", step, mix, parent, a+b, 15+credit(15))
	}
}

// checkSettles: for every ordered pair of nodes (A, B), a reservation
// of 40 issued by A is settled through B, which relays it to A: ACTUAL 10
// (a give-back) or 55 (a charge above the estimate). The reply is allowed
// with the limit and the level; a second settle is refused (NORESERVATION)
// and a release answers 0. The budget is a fixed window of 1000 a day (the
// nodes' test clock is at 06:00, so no window ends), which takes no credit:
// the cluster admits exactly what its owner's bucket holds (docs/cluster.md
// "The bound"). So after the settle the bucket is exact to the token: one
// call of 1000 − ACTUAL is admitted on A, and then not one more token on
// any node after a give-back (after a charge above the estimate, at most
// that extra: see below). (What a node that does not own a bucket says is left is an
// estimate, docs/cluster.md, so the replies' counts are logged, not
// compared.)
func checkSettles(t *testing.T, ms []*mixNode, step int) {
	t.Helper()
	mix := versions(ms)
	budget := fmt.Sprintf("set%d", step)
	setBudget(t, ms[step%len(ms)], ms, budget, "RATE", 1000, "PER", "day", "ALGO", "fixed_window", "SCOPE", "user")
	retry := func(n *mixNode, args ...any) (any, error) {
		t.Helper()
		ctx := context.Background()
		for try := 0; ; try++ {
			v, err := n.c.Do(ctx, args...).Result()
			if err != nil && peerProtocol.MatchString(err.Error()) {
				t.Fatalf("step %d [%s]: %v on %s: %v", step, mix, args, n.label(), err)
			}
			if err == nil || !retriable(err) || try == 300 {
				return v, err
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	// admit sends args to n until admitted: a node that does not own the
	// bucket refuses while it waits for the owner's grant (10 s at most).
	admit := func(what string, n *mixNode, args ...any) []any {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			v, err := retry(n, args...)
			r, f, ok := allowed(v)
			if err != nil || !ok {
				t.Fatalf("%s: %v on %s: %v %v", what, args, n.label(), v, err)
			}
			if r == 1 {
				return f
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %v on %s refused for 10 s: %v", what, args, n.label(), f)
			}
			time.Sleep(time.Duration(min(max(f[3].(int64), 5), 100)) * time.Millisecond)
		}
	}
	var rest [][]any
	var actuals []int64
	var replies []string
	k := 0
	for _, a := range ms {
		for _, b := range ms {
			if a == b {
				continue
			}
			k++
			third := others3(ms, a, b)
			key := a.id + "-" + b.id
			actual := []int64{10, 55}[k%2]
			what := fmt.Sprintf("step %d [%s]: reserved on %s, settled through %s (40 reserved, ACTUAL %d)", step, mix, a.label(), b.label(), actual)
			f := admit(what, a, "RL.RESERVE", budget, "KEY", key, "COST", 40, "TTL", 60000)
			id, level := fmt.Sprint(f[6]), f[5]
			if len(f) != 7 || !strings.HasSuffix(id, "@"+a.id) {
				t.Fatalf("%s: RL.RESERVE replied %v: not an id of %s", what, f, a.id)
			}
			s, err := retry(b, "RL.SETTLE", id, "ACTUAL", actual)
			r, sf, ok := allowed(s)
			if err != nil || !ok || len(sf) != 6 || r != 1 || sf[2] != int64(1000) || sf[5] != level {
				t.Fatalf("%s: RL.SETTLE %s replied %v %v; want [1 … 1000 … %v]", what, id, s, err, level)
			}
			replies = append(replies, fmt.Sprintf("%s→%s %d/%d", a.id, b.id, f[1], sf[1]))
			if _, err := retry(third, "RL.SETTLE", id, "ACTUAL", 1); err == nil || !redis.HasErrorPrefix(err, "NORESERVATION") {
				t.Fatalf("%s: a second RL.SETTLE of %s on %s: %v", what, id, third.label(), err)
			}
			if got, err := retry(b, "RL.RELEASE", id); err != nil || got != int64(0) {
				t.Fatalf("%s: RL.RELEASE of the settled %s on %s: %v %v", what, id, b.label(), got, err)
			}
			admit(what, a, "RL.ACQUIRE", budget, "KEY", key, "COST", 1000-actual)
			rest, actuals = append(rest, []any{budget, "KEY", key}), append(actuals, actual)
		}
	}
	// Not one token more, on any node, after a give-back. After a charge
	// above the estimate, at most that extra: an issuer that does not own
	// the bucket charges it to its own copy and sends it with its
	// consumption (docs/cluster.md, "Reservations in a cluster"), which the
	// owner's leases do not draw on.
	var over []string
	for i, got := range drive(t, ms, fmt.Sprintf("step %d: the settled buckets", step), rest...) {
		extra := max(actuals[i]-40, 0)
		if int64(got) > extra {
			t.Errorf("step %d [%s]: %s KEY %s admitted %d more after the settle (ACTUAL %d) and a call of 1000 − ACTUAL: want %d at most", step, mix, budget, rest[i][2], got, actuals[i], extra)
		}
		if got > 0 {
			over = append(over, fmt.Sprintf("%s %d", rest[i][2], got))
		}
	}
	t.Logf("step %d [%s]: %d reservations settled through another node; remaining after the reservation/after the settle: %s; admitted after 1000 − ACTUAL: %v", step, mix, k, strings.Join(replies, ", "), over)
}

// others3 returns the node of three that is neither a nor b.
func others3(ms []*mixNode, a, b *mixNode) *mixNode {
	for _, n := range ms {
		if n != a && n != b {
			return n
		}
	}
	return nil
}

func isAllowed(v any) bool {
	a, _, ok := allowed(v)
	return ok && a == 1
}

// checkSlots fills a fresh key's CONCURRENCY 2 through two different
// nodes (of both versions when the cluster has both), then asks every node
// for one more (none granted), releases one through a third node and takes
// the freed slot through another.
func checkSlots(t *testing.T, ms []*mixNode, step int) {
	t.Helper()
	mix := versions(ms)
	key := fmt.Sprintf("slot%d", step)
	ctx := context.Background()
	take := func(n *mixNode) (bool, string) {
		t.Helper()
		for try := 0; ; try++ {
			v, err := n.c.Do(ctx, "RL.RESERVE", key, "CONCURRENCY", 2, "COST", 1, "TTL", 60000).Result()
			if err != nil && retriable(err) && !peerProtocol.MatchString(err.Error()) && try < 300 {
				time.Sleep(50 * time.Millisecond)
				continue
			}
			a, f, ok := allowed(v)
			if err != nil || !ok || len(f) != 7 {
				t.Fatalf("step %d [%s]: RL.RESERVE %s CONCURRENCY 2 on %s: %v %v", step, mix, key, n.label(), v, err)
			}
			return a == 1, fmt.Sprint(f[6])
		}
	}
	// Two nodes of different versions where there are both.
	first, second := ms[0], ms[1]
	for _, n := range ms {
		if n.version != first.version {
			second = n
		}
	}
	var ids []string
	for _, n := range []*mixNode{first, second} {
		ok, id := take(n)
		if !ok {
			t.Fatalf("step %d [%s]: %s refused a slot of the empty %s", step, mix, n.label(), key)
		}
		ids = append(ids, id)
	}
	for _, n := range ms {
		if ok, id := take(n); ok {
			t.Fatalf("step %d [%s]: %s granted a third slot of %s (CONCURRENCY 2): %s", step, mix, n.label(), key, id)
		}
	}
	for _, n := range ms {
		if n != first && n != second {
			if got, err := n.c.Do(ctx, "RL.RELEASE", ids[0]).Result(); err != nil || got != int64(1) {
				t.Fatalf("step %d [%s]: RL.RELEASE %s on %s: %v %v", step, mix, ids[0], n.label(), got, err)
			}
		}
	}
	if ok, _ := take(ms[step%len(ms)]); !ok {
		t.Fatalf("step %d [%s]: the released slot of %s is not granted again", step, mix, key)
	}
	t.Logf("step %d [%s]: %s held at CONCURRENCY 2 on every node", step, mix, key)
}
