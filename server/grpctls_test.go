package server

import (
	"context"
	"crypto/tls"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/sluice-rl/sluice/testsupport/testpki"
)

// clientCert writes a client certificate named san, signed by a new CA,
// and returns the CA's file and the certificate.
func clientCert(t *testing.T, san string) (caFile string, cert tls.Certificate) {
	t.Helper()
	ca := testpki.NewCA(t, t.TempDir(), "clients-ca")
	return ca.File, ca.Issue("client", san, testpki.Client, san).TLS
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
