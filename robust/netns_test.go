package robust

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/testsupport/testport"
)

// Every namespace and host link the suite creates is named
// slch<pid of the test process>…, so a later run can tell leftovers of a
// crashed run (their pid is gone) from those of a run still going.
const labPrefix = "slch"

// netLab is a private network: each node in its own namespace with a veth
// into a bridge that lives in a namespace of its own, and one more veth from
// the host namespace into the bridge so the test reaches the nodes.
//
//	host: slch<pid>h 10.231.S.254 ──┐
//	ns slch<pid>-br: br0 ─ vh, v1, v2, v3
//	ns slch<pid>-n1: eth0 10.231.S.1 ── v1   (likewise n2, n3)
//
// Cutting a node off is `ip link set v<i> down` in the bridge namespace.
type netLab struct {
	prefix string // slch<pid>
	subnet string // 10.231.S
}

func (l *netLab) brNS() string        { return l.prefix + "-br" }
func (l *netLab) nodeNS(i int) string { return fmt.Sprintf("%s-n%d", l.prefix, i) }
func (l *netLab) nodeIP(i int) string { return fmt.Sprintf("%s.%d", l.subnet, i) }
func (l *netLab) hostLink() string    { return l.prefix + "h" }

func ipCmd(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// probeNetns says whether this machine lets the test build namespaces, and
// if not, why.
func probeNetns() (bool, string) {
	if os.Geteuid() != 0 {
		return false, "not root"
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return false, "no ip command (iproute2)"
	}
	name := fmt.Sprintf("%s%d-probe", labPrefix, os.Getpid())
	if err := ipCmd("netns", "add", name); err != nil {
		return false, err.Error()
	}
	defer ipCmd("netns", "del", name)
	if err := ipCmd("-n", name, "link", "add", "p0", "type", "veth", "peer", "name", "p1"); err != nil {
		return false, err.Error()
	}
	return true, ""
}

var labName = regexp.MustCompile(`^` + labPrefix + `(\d+)`)

// sweepLabs removes namespaces and host links left by runs whose process is
// gone.
func sweepLabs(t *testing.T) {
	dead := func(name string) bool {
		m := labName.FindStringSubmatch(name)
		if m == nil {
			return false
		}
		pid, _ := strconv.Atoi(m[1])
		if pid == os.Getpid() {
			return false
		}
		_, err := os.Stat(fmt.Sprintf("/proc/%d", pid))
		return os.IsNotExist(err)
	}
	if out, err := exec.Command("ip", "netns", "list").Output(); err == nil {
		for _, line := range strings.Split(string(out), "\n") {
			f := strings.Fields(line)
			if len(f) > 0 && dead(f[0]) {
				t.Logf("removing leftover namespace %s", f[0])
				ipCmd("netns", "del", f[0])
			}
		}
	}
	if ents, err := os.ReadDir(netnsEtc); err == nil {
		for _, e := range ents {
			if dead(e.Name()) {
				t.Logf("removing leftover %s", filepath.Join(netnsEtc, e.Name()))
				os.RemoveAll(filepath.Join(netnsEtc, e.Name()))
			}
		}
	}
	if ifs, err := net.Interfaces(); err == nil {
		for _, i := range ifs {
			if dead(i.Name) {
				t.Logf("removing leftover link %s", i.Name)
				ipCmd("link", "del", i.Name)
			}
		}
	}
}

// newNetLab builds the namespaces and links, and registers their removal.
func newNetLab(t *testing.T, rng *rand.Rand) (*netLab, error) {
	sweepLabs(t)
	l := &netLab{prefix: fmt.Sprintf("%s%d", labPrefix, os.Getpid())}
	// A /24 of 10.231/16 that no host interface uses yet.
	used := map[string]bool{}
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil {
				ip := ipn.IP.To4()
				used[fmt.Sprintf("%d.%d.%d", ip[0], ip[1], ip[2])] = true
			}
		}
	}
	for i := 0; i < 250 && l.subnet == ""; i++ {
		s := fmt.Sprintf("10.231.%d", 1+rng.IntN(250))
		if !used[s] {
			l.subnet = s
		}
	}
	if l.subnet == "" {
		return nil, fmt.Errorf("no free 10.231.x.0/24")
	}
	t.Cleanup(l.remove)
	br := l.brNS()
	steps := [][]string{
		{"netns", "add", br},
		{"-n", br, "link", "set", "lo", "up"},
		{"-n", br, "link", "add", "br0", "type", "bridge"},
		{"-n", br, "link", "set", "br0", "up"},
	}
	for i := 1; i <= 3; i++ {
		ns, v := l.nodeNS(i), fmt.Sprintf("v%d", i)
		steps = append(steps,
			[]string{"netns", "add", ns},
			[]string{"-n", ns, "link", "set", "lo", "up"},
			[]string{"-n", br, "link", "add", v, "type", "veth", "peer", "name", "eth0", "netns", ns},
			[]string{"-n", br, "link", "set", v, "master", "br0"},
			[]string{"-n", br, "link", "set", v, "up"},
			[]string{"-n", ns, "addr", "add", l.nodeIP(i) + "/24", "dev", "eth0"},
			[]string{"-n", ns, "link", "set", "eth0", "up"},
		)
	}
	steps = append(steps,
		[]string{"link", "add", l.hostLink(), "type", "veth", "peer", "name", "vh", "netns", br},
		[]string{"-n", br, "link", "set", "vh", "master", "br0"},
		[]string{"-n", br, "link", "set", "vh", "up"},
		[]string{"addr", "add", l.subnet + ".254/24", "dev", l.hostLink()},
		[]string{"link", "set", l.hostLink(), "up"},
	)
	for _, s := range steps {
		if err := ipCmd(s...); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// remove deletes everything newNetLab made; deleting a namespace deletes
// the veths in it, and with them their peers.
func (l *netLab) remove() {
	for i := 1; i <= 3; i++ {
		ipCmd("netns", "del", l.nodeNS(i))
		os.RemoveAll(filepath.Join(netnsEtc, l.nodeNS(i)))
	}
	ipCmd("netns", "del", l.brNS())
	ipCmd("link", "del", l.hostLink())
	os.Remove(netnsEtc) // only if empty: another run may be using it
}

// netnsEtc holds the files `ip netns exec NAME` mounts over /etc's
// (NAME/resolv.conf over /etc/resolv.conf).
const netnsEtc = "/etc/netns"

// useNameserver makes the processes started in node i's namespace resolve
// names with the DNS server at ip (port 53), through the resolv.conf
// `ip netns exec` gives them; remove deletes it.
func (l *netLab) useNameserver(i int, ip string) error {
	dir := filepath.Join(netnsEtc, l.nodeNS(i))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "resolv.conf"), []byte("nameserver "+ip+"\noptions timeout:1 attempts:2\n"), 0o644)
}

// cut takes node i (1-based) off the bridge, or puts it back.
func (l *netLab) cut(i int, off bool) error {
	state := "up"
	if off {
		state = "down"
	}
	return ipCmd("-n", l.brNS(), "link", "set", fmt.Sprintf("v%d", i), state)
}

// freePort returns a loopback port no other node of this test run was
// given (testport.Free).
func freePort(t *testing.T) string { return testport.Free(t) }

// needNetLab builds a netLab for a test that cannot run without one: where
// namespaces are not usable it skips, or fails when SLUICE_REQUIRE_TOOLS
// is set (CI).
func needNetLab(t *testing.T) *netLab {
	t.Helper()
	if ok, why := probeNetns(); !ok {
		missingTool(t, "network namespaces are not usable: "+why)
	}
	lab, err := newNetLab(t, rand.New(rand.NewPCG(uint64(os.Getpid()), uint64(time.Now().UnixNano()))))
	if err != nil {
		t.Fatalf("building network namespaces: %v", err)
	}
	return lab
}

// missingTool skips a test that needs what this machine lacks, or fails it
// when SLUICE_REQUIRE_TOOLS is set.
func missingTool(t *testing.T, why string) {
	t.Helper()
	if os.Getenv("SLUICE_REQUIRE_TOOLS") != "" {
		t.Fatal(why)
	}
	t.Skip(why + " (SLUICE_REQUIRE_TOOLS makes this a failure)")
}

// probeIPTables says whether iptables can filter inside a namespace of the
// lab, and if not, why.
func probeIPTables(l *netLab) (bool, string) {
	if _, err := exec.LookPath("iptables"); err != nil {
		return false, "no iptables command (apt-get install iptables)"
	}
	if out, err := exec.Command("ip", "netns", "exec", l.nodeNS(1), "iptables", "-w", "-S").CombinedOutput(); err != nil {
		return false, fmt.Sprintf("iptables in a namespace: %v: %s", err, strings.TrimSpace(string(out)))
	}
	return true, ""
}

// raftCut drops, or lets through again, all traffic of the Raft port in
// node n's namespace, in and out: its peers can neither reach its Raft
// listener nor be reached by it, while its RESP port stays open to
// clients (and its forwards to the leader's RESP port go through).
func (l *netLab) raftCut(n *node, off bool) error {
	_, port, err := net.SplitHostPort(n.raft)
	if err != nil {
		return err
	}
	ipt := func(args ...string) error {
		out, err := exec.Command("ip", append([]string{"netns", "exec", n.ns, "iptables", "-w"}, args...)...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("iptables %s in %s: %v: %s", strings.Join(args, " "), n.ns, err, strings.TrimSpace(string(out)))
		}
		return nil
	}
	if !off {
		if err := ipt("-F", "INPUT"); err != nil {
			return err
		}
		return ipt("-F", "OUTPUT")
	}
	for _, chain := range []string{"INPUT", "OUTPUT"} {
		for _, dir := range []string{"--dport", "--sport"} {
			if err := ipt("-A", chain, "-p", "tcp", dir, port, "-j", "DROP"); err != nil {
				return err
			}
		}
	}
	return nil
}
