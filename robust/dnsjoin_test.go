package robust

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/testsupport/testdns"
)

// TestJoinByDNS starts three nodes, each in its own network namespace
// whose resolv.conf names a DNS server the test runs, all with the same
// --join dns:NAME and no list of peers (a StatefulSet behind a headless
// service). They form one cluster, bootstrapped once, by the lowest id;
// a node killed and restarted on its data rejoins as itself, with no
// second member and no second bootstrap.
func TestJoinByDNS(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-process cluster in network namespaces; skipped under -short")
	}
	lab := needNetLab(t)
	dns, err := testdns.Start(lab.subnet + ".254:53")
	if err != nil {
		t.Fatalf("DNS server on the host link: %v", err)
	}
	t.Cleanup(dns.Close)
	const name = "peers.sluice.test"
	c := newCluster(t, lab)
	var ips []string
	for _, n := range c.nodes {
		i := slices.Index(n.args, "--bootstrap-peers")
		n.args[i], n.args[i+1] = "--join", "dns:"+name
		if err := lab.useNameserver(n.idx+1, lab.subnet+".254"); err != nil {
			t.Fatal(err)
		}
		ips = append(ips, strings.Split(n.resp, ":")[0])
	}
	dns.SetIPs(name, ips...)
	c.startAll()
	wantMembers(t, c)

	// n2 (not the bootstrapper) is killed and restarts on its data.
	n := c.nodes[1]
	n.kill()
	if err := n.start(t, c.bin); err != nil {
		t.Fatal(err)
	}
	if _, err := c.leader(60 * time.Second); err != nil {
		t.Fatal(err)
	}
	wantMembers(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := n.client.Do(ctx, "RL.BUDGET", "SET", "dns/after", "RATE", 5).Err(); err != nil {
		t.Fatalf("write through the restarted node: %v", err)
	}
	boots := 0
	for _, n := range c.nodes {
		log, _ := os.ReadFile(n.logPath)
		if k := strings.Count(string(log), "discovery: bootstrapped a new cluster"); k > 0 {
			boots += k
			if n.id != "n1" {
				t.Errorf("%s bootstrapped, not n1 (the lowest id)", n.id)
			}
		}
	}
	if boots != 1 {
		t.Errorf("%d bootstraps in the node logs, want 1", boots)
	}
}

// wantMembers waits until every node lists exactly n1, n2 and n3 as
// voters in RL.CLUSTER NODES, with their RESP addresses.
func wantMembers(t *testing.T, c *cluster) {
	t.Helper()
	var want []string
	for _, n := range c.nodes {
		want = append(want, n.id+" "+n.resp+" "+n.raft+" voter")
	}
	err := eventually(60*time.Second, func() error {
		for _, n := range c.nodes {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			rows, err := n.client.Do(ctx, "RL.CLUSTER", "NODES").Slice()
			cancel()
			if err != nil {
				return fmt.Errorf("%s: %v", n.id, err)
			}
			var got []string
			for _, r := range rows {
				f, _ := r.([]any)
				if len(f) == 5 {
					got = append(got, fmt.Sprintf("%v %v %v %v", f[0], f[1], f[2], f[3]))
				}
			}
			slices.Sort(got)
			if !slices.Equal(got, want) {
				return fmt.Errorf("%s lists %q, want %q", n.id, got, want)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
