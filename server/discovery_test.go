package server

import (
	"context"
	"io"
	"net"
	"slices"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/testsupport/testdns"
)

// testResolver is Go's resolver asking only the test's DNS server.
func testResolver(t *testing.T) (*testdns.Server, *net.Resolver) {
	srv, err := testdns.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	return srv, &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp", srv.Addr())
	}}
}

// --join dns: finds nodes by A/AAAA records (the port given, or the
// node's own) or by SRV records (their ports, unless one is given).
func TestDNSJoinResolves(t *testing.T) {
	srv, r := testResolver(t)
	srv.SetIPs("peers.sluice.test", "10.0.0.2", "10.0.0.1", "fd00::3", "10.0.0.1")
	srv.SetSRV("_resp._tcp.peers.sluice.test", testdns.SRV{Target: "sluice-1.peers.sluice.test", Port: 6390},
		testdns.SRV{Target: "sluice-0.peers.sluice.test", Port: 6390})
	for _, c := range []struct {
		join string
		want []string
	}{
		{"dns:peers.sluice.test", []string{"10.0.0.1:6380", "10.0.0.2:6380", "[fd00::3]:6380"}},
		{"dns:peers.sluice.test:7000", []string{"10.0.0.1:7000", "10.0.0.2:7000", "[fd00::3]:7000"}},
		{"dns:_resp._tcp.peers.sluice.test", []string{"sluice-0.peers.sluice.test:6390", "sluice-1.peers.sluice.test:6390"}},
		{"dns:_resp._tcp.peers.sluice.test:7000", []string{"sluice-0.peers.sluice.test:7000", "sluice-1.peers.sluice.test:7000"}},
	} {
		j, err := parseDNSJoin(c.join)
		if err != nil {
			t.Fatal(err)
		}
		got, err := j.discover(context.Background(), r, "6380")
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("%s: %v %v, want %v", c.join, got, err, c.want)
		}
	}
	j, _ := parseDNSJoin("dns:nobody.sluice.test")
	if got, err := j.discover(context.Background(), r, "6380"); err == nil || !strings.Contains(err.Error(), "no such host") {
		t.Errorf("unknown name: %v %v", got, err)
	}
}

// --bootstrap-expect is 3 with --join dns: unless given.
func TestBootstrapExpectDefault(t *testing.T) {
	for _, c := range []struct {
		args []string
		want int
	}{
		{[]string{"--join", "dns:peers.svc"}, 3},
		{[]string{"--join", "dns:peers.svc", "--bootstrap-expect", "5"}, 5},
		{[]string{"--join", "10.0.0.1:6380"}, 0},
	} {
		cfg, err := Load(append(c.args, "--advertise", "10.0.0.9:6380", "--raft-addr", "10.0.0.9:7380"), func(string) string { return "" }, io.Discard)
		if err == nil {
			err = cfg.Validate()
		}
		if got := cfg.WithDefaults().BootstrapExpect; err != nil || got != c.want {
			t.Errorf("%v: %v, bootstrap-expect %d, want %d", c.args, err, got, c.want)
		}
	}
}
