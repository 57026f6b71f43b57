package server

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// clientCert writes a client certificate named san, signed by a new CA,
// and returns the CA's file and the certificate.
func clientCert(t *testing.T, san string) (caFile string, cert tls.Certificate) {
	t.Helper()
	dir := t.TempDir()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(10), Subject: pkix.Name{CommonName: "clients CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(11), Subject: pkix.Name{CommonName: san},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), DNSNames: []string{san},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caFile = filepath.Join(dir, "clients-ca.pem")
	os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o600)
	return caFile, tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func grpcHealth(t *testing.T, addr string, tc *tls.Config) (healthpb.HealthCheckResponse_ServingStatus, error) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(tc)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: "ratelimit"})
	if err != nil {
		return 0, err
	}
	return r.Status, nil
}

// TestGRPCOwnTLSFlags: under sluice's own flags --grpc-addr takes
// --tls-cert's certificate, or its own (--grpc-tls-cert) with client
// certificates required (--grpc-tls-client-ca) carrying a name
// (--grpc-tls-client-san), while RESP keeps --tls-cert's.
func TestGRPCOwnTLSFlags(t *testing.T) {
	cert, key, _, pool := testPKI(t)
	shared := startNode(t, func(c *Config) { c.GRPCAddr, c.TLSCert, c.TLSKey = "127.0.0.1:0", cert, key })
	if st, err := grpcHealth(t, shared.Server.GRPCAddr(), &tls.Config{RootCAs: pool}); err != nil || st != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("--tls-cert on gRPC: %v %v", st, err)
	}
	grpcCert, grpcKey, _, grpcPool := testPKI(t)
	ca, good := clientCert(t, "envoy.internal")
	_, bad := clientCert(t, "envoy.internal") // another CA
	ca2, wrong := clientCert(t, "other.internal")
	n := startNode(t, func(c *Config) {
		c.GRPCAddr, c.TLSCert, c.TLSKey = "127.0.0.1:0", cert, key
		c.GRPCTLSCert, c.GRPCTLSKey, c.GRPCTLSClientCA, c.GRPCTLSClientSAN = grpcCert, grpcKey, ca, "envoy.internal"
	})
	addr := n.Server.GRPCAddr()
	if st, err := grpcHealth(t, addr, &tls.Config{RootCAs: grpcPool, Certificates: []tls.Certificate{good}}); err != nil || st != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("mutual TLS with the client certificate: %v %v", st, err)
	}
	for what, tc := range map[string]*tls.Config{
		"no client certificate":       {RootCAs: grpcPool},
		"a certificate of another CA": {RootCAs: grpcPool, Certificates: []tls.Certificate{bad}},
		"the RESP certificate's CA":   {RootCAs: pool, Certificates: []tls.Certificate{good}},
	} {
		if _, err := grpcHealth(t, addr, tc); status.Code(err) != codes.Unavailable {
			t.Errorf("%s: %v, want UNAVAILABLE", what, err)
		}
	}
	// The SAN: a certificate of the right CA with another name.
	n2 := startNode(t, func(c *Config) {
		c.GRPCAddr, c.GRPCTLSCert, c.GRPCTLSKey, c.GRPCTLSClientCA, c.GRPCTLSClientSAN = "127.0.0.1:0", grpcCert, grpcKey, ca2, "envoy.internal"
	})
	if _, err := grpcHealth(t, n2.Server.GRPCAddr(), &tls.Config{RootCAs: grpcPool, Certificates: []tls.Certificate{wrong}}); status.Code(err) != codes.Unavailable {
		t.Errorf("a client certificate without the SAN: %v, want UNAVAILABLE", err)
	}
}

// TestGRPCHealthDraining: once the node drains, Check says NOT_SERVING
// for every name while the gRPC port still answers.
func TestGRPCHealthDraining(t *testing.T) {
	n := startNode(t, func(c *Config) { c.GRPCAddr = "127.0.0.1:0" })
	h := &healthServer{n.Server}
	for _, name := range []string{"", "ratelimit", "envoy.service.ratelimit.v3.RateLimitService"} {
		if st := h.check(t, name); st != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("%q: %v", name, st)
		}
	}
	n.Server.draining.Store(true)
	defer n.Server.draining.Store(false)
	for _, name := range []string{"", "ratelimit", "envoy.service.ratelimit.v3.RateLimitService"} {
		if st := h.check(t, name); st != healthpb.HealthCheckResponse_NOT_SERVING {
			t.Fatalf("draining: %q: %v", name, st)
		}
	}
}

type healthServer struct{ s *Server }

func (h *healthServer) check(t *testing.T, name string) healthpb.HealthCheckResponse_ServingStatus {
	t.Helper()
	conn, err := grpc.NewClient(h.s.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	r, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{Service: name})
	if err != nil {
		t.Fatal(err)
	}
	return r.Status
}
