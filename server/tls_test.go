package server

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/testsupport/resptest"
	"github.com/sluice-rl/sluice/testsupport/testkit"
)

// testPKI writes a CA and a node certificate for 127.0.0.1 signed by it,
// and returns their paths and the CA pool.
func testPKI(t *testing.T) (cert, key, ca string, pool *x509.CertPool) {
	t.Helper()
	dir := t.TempDir()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "sluice test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	nodeKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	nodeTmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "sluice node"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	nodeDER, err := x509.CreateCertificate(rand.Reader, nodeTmpl, caCert, &nodeKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
		return p
	}
	keyDER, _ := x509.MarshalECPrivateKey(nodeKey)
	pool = x509.NewCertPool()
	pool.AddCert(caCert)
	return write("node.pem", "CERTIFICATE", nodeDER), write("node.key", "EC PRIVATE KEY", keyDER), write("ca.pem", "CERTIFICATE", caDER), pool
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
