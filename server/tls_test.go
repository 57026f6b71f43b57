package server

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/testsupport/resptest"
	"github.com/sluice-rl/sluice/testsupport/testkit"
	"github.com/sluice-rl/sluice/testsupport/testpki"
)

// testPKI writes a CA and a node certificate for 127.0.0.1 signed by it
// (for servers and clients both: peers dial each other), and returns their
// paths and the CA pool.
func testPKI(t *testing.T) (cert, key, ca string, pool *x509.CertPool) {
	t.Helper()
	c := testpki.NewCA(t, t.TempDir(), "ca")
	node := c.Issue("node", "sluice node", testpki.Both)
	return node.Cert, node.Key, c.File, c.Pool
}

func TestTLSClientsAndClusterTraffic(t *testing.T) {
	cert, key, ca, pool := testPKI(t)
	withTLS := func(join string) func(*Config) {
		return func(c *Config) {
			c.TLSCert, c.TLSKey, c.TLSCA, c.RequirePass, c.Join = cert, key, ca, "pw", join
		}
	}
	first := startNodeHook(t, withTLS(""), nil)
	// A client verifying the server against the CA.
	tc, err := tls.Dial("tcp", first.Server.RespAddr(), &tls.Config{RootCAs: pool})
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	tc.Write(resptest.Encode("AUTH", "pw"))
	tc.Write(resptest.Encode("PING"))
	r := bufio.NewReader(tc)
	if a, _ := resptest.Parse(r); a != "+OK" {
		t.Fatalf("AUTH over TLS: %s", a)
	}
	if p, _ := resptest.Parse(r); p != "+PONG" {
		t.Fatalf("PING over TLS: %s", p)
	}
	// Plain text on the TLS port gets nowhere.
	plain := resptest.Dial(t, first.Server.RespAddr())
	plain.Write(resptest.Encode("PING"))
	if _, err := plain.TryRead(2 * time.Second); err == nil {
		t.Fatal("plain-text client answered on a TLS port")
	}
	// Two more nodes join over TLS (RESP for the join, Raft over mutual TLS),
	// and a write through a follower is forwarded over TLS.
	second := startNodeHook(t, withTLS(first.Server.RespAddr()), nil)
	third := startNodeHook(t, withTLS(first.Server.RespAddr()), nil)
	nodes := []*Node{first, second, third}
	testkit.WaitFor(t, 15*time.Second, "three TLS members", func() bool {
		return len(first.Raft.State().Members) == 3 && len(second.Raft.State().Members) == 3 && len(third.Raft.State().Members) == 3
	})
	leader := leaderOf(t, nodes...)
	follower := second
	if leader == second {
		follower = third
	}
	fc, err := tls.Dial("tcp", follower.Server.RespAddr(), &tls.Config{RootCAs: pool})
	if err != nil {
		t.Fatal(err)
	}
	defer fc.Close()
	fc.Write(resptest.Encode("AUTH", "pw"))
	fc.Write(resptest.Encode("RL.BUDGET", "SET", "secure", "RATE", "5"))
	fr := bufio.NewReader(fc)
	resptest.Parse(fr)
	if got, _ := resptest.Parse(fr); got != "+OK" {
		t.Fatalf("forwarded write over TLS: %s", got)
	}
	testkit.WaitForApplied(t, leader.Raft.FSM().Applied(), first.Raft, second.Raft, third.Raft)
	for _, n := range nodes {
		if n.Raft.State().Tree.Get("secure") == nil {
			t.Fatalf("%s lacks the budget", n.Raft.ID())
		}
	}
}
