package server

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// --grpc-addr unix:PATH serves gRPC on a Unix socket (envoyproxy/
// ratelimit's GRPC_UDS), replacing a socket a previous run left behind;
// its callers pass protected mode as local ones do.
func TestGRPCOnAUnixSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "grpc.sock")
	// A socket file as a killed process leaves it.
	if ln, err := listenGRPCAddr("unix:" + sock); err != nil {
		t.Fatal(err)
	} else {
		ln.(interface{ SetUnlinkOnClose(bool) }).SetUnlinkOnClose(false)
		ln.Close()
	}
	if _, err := os.Stat(sock); err != nil {
		t.Fatalf("no stale socket to replace: %v", err)
	}
	n := startNode(t, func(c *Config) { c.GRPCAddr = "unix://" + sock })
	if got := n.Server.GRPCAddr(); got != "unix:"+sock {
		t.Fatalf("GRPCAddr %q, want unix:%s", got, sock)
	}
	h := &healthServer{n.Server}
	if st := h.check(t, "ratelimit"); st != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health over the socket: %v", st)
	}
	// A socket a live process listens on is not taken over.
	if _, err := listenGRPCAddr("unix:" + sock); err == nil || !strings.Contains(err.Error(), "a running process listens on it") {
		t.Fatalf("a live socket was replaced: %v", err)
	}
	if st := h.check(t, "ratelimit"); st != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health after another bind was tried: %v", st)
	}
	// Any other file at the path is not replaced.
	other := filepath.Join(t.TempDir(), "not-a-socket")
	if err := os.WriteFile(other, []byte("data"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := listenGRPCAddr("unix:" + other); err == nil {
		t.Fatal("a regular file at the socket's path was replaced")
	}
	if b, _ := os.ReadFile(other); string(b) != "data" {
		t.Fatal("the regular file was changed")
	}
}

// --grpc-max-connection-age ends a gRPC connection that old with a
// GOAWAY (envoyproxy/ratelimit's GRPC_MAX_CONNECTION_AGE): the client
// leaves READY and connects again for the next call.
func TestGRPCMaxConnectionAge(t *testing.T) {
	n := startNode(t, func(c *Config) {
		c.GRPCAddr = "127.0.0.1:0"
		c.GRPCMaxConnectionAge, c.GRPCMaxConnectionAgeGrace = 300*time.Millisecond, time.Second
	})
	conn, err := grpc.NewClient(n.Server.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	health := healthpb.NewHealthClient(conn)
	if _, err := health.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	for st := conn.GetState(); st == connectivity.Ready; st = conn.GetState() {
		if !conn.WaitForStateChange(ctx, st) {
			t.Fatal("the connection stayed open past --grpc-max-connection-age (30 s)")
		}
	}
	if _, err := health.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("after the GOAWAY: %v", err)
	}
}
