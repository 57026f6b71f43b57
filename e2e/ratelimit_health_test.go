package e2e

// The drop-in's gRPC health (SPEC §11, issue #36): grpc.health.v1 as the
// peer's HealthChecker serves it (grpc-go's health server, service name
// "ratelimit"), Check and Watch, for "", "ratelimit" and the service's
// full name; NOT_SERVING while HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED
// waits for rules, and from SIGTERM while the node drains.

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

var healthNames = []string{"", "ratelimit", "envoy.service.ratelimit.v3.RateLimitService"}

// watchHealth opens a Watch stream of service and returns a function
// that reads its next status (or the error that ended it).
func watchHealth(t *testing.T, h healthpb.HealthClient, service string) func() (healthpb.HealthCheckResponse_ServingStatus, error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w, err := h.Watch(ctx, &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		t.Fatal(err)
	}
	type msg struct {
		st  healthpb.HealthCheckResponse_ServingStatus
		err error
	}
	ch := make(chan msg, 16)
	go func() {
		for {
			r, err := w.Recv()
			if err != nil {
				ch <- msg{err: err}
				return
			}
			ch <- msg{st: r.Status}
		}
	}()
	return func() (healthpb.HealthCheckResponse_ServingStatus, error) {
		t.Helper()
		select {
		case m := <-ch:
			return m.st, m.err
		case <-time.After(30 * time.Second):
			t.Fatalf("Watch %q: nothing within 30 s", service)
			return 0, nil
		}
	}
}

// waitStatus reads a Watch stream until it says want.
func waitStatus(t *testing.T, next func() (healthpb.HealthCheckResponse_ServingStatus, error), want healthpb.HealthCheckResponse_ServingStatus) {
	t.Helper()
	for {
		st, err := next()
		if err != nil {
			t.Fatalf("Watch ended (%v) before %v", err, want)
		}
		if st == want {
			return
		}
	}
}

func checkHealth(t *testing.T, c *rls, service string) healthpb.HealthCheckResponse_ServingStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := c.health.Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		t.Fatalf("Check %q: %v", service, err)
	}
	return r.Status
}

// TestRatelimitGRPCHealth: SERVING for the three names by Check and
// Watch; an unknown name NOT_FOUND by Check, SERVICE_UNKNOWN by Watch;
// on SIGTERM each Watch stream says NOT_SERVING before the node stops,
// and the stream ends with UNAVAILABLE.
func TestRatelimitGRPCHealth(t *testing.T) {
	p, c := startRatelimit(t, nil, peerRuntime(t)...)
	eventually(t, 30*time.Second, "health ratelimit SERVING", func() bool {
		r, err := c.health.Check(context.Background(), &healthpb.HealthCheckRequest{Service: "ratelimit"})
		return err == nil && r.Status == healthpb.HealthCheckResponse_SERVING
	})
	var watches []func() (healthpb.HealthCheckResponse_ServingStatus, error)
	for _, name := range healthNames {
		if st := checkHealth(t, c, name); st != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("Check %q: %v", name, st)
		}
		next := watchHealth(t, c.health, name)
		if st, err := next(); err != nil || st != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("Watch %q: first %v %v, want SERVING", name, st, err)
		}
		watches = append(watches, next)
	}
	if _, err := c.health.Check(context.Background(), &healthpb.HealthCheckRequest{Service: "nope"}); status.Code(err) != codes.NotFound {
		t.Fatalf("Check of an unknown name: %v, want NOT_FOUND", err)
	}
	unknown := watchHealth(t, c.health, "nope")
	if st, err := unknown(); err != nil || st != healthpb.HealthCheckResponse_SERVICE_UNKNOWN {
		t.Fatalf("Watch of an unknown name: %v %v, want SERVICE_UNKNOWN", st, err)
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for i, next := range watches {
		if st, err := next(); err != nil || st != healthpb.HealthCheckResponse_NOT_SERVING {
			t.Fatalf("Watch %q after SIGTERM: %v %v, want NOT_SERVING while draining", healthNames[i], st, err)
		}
		if _, err := next(); status.Code(err) != codes.Unavailable && err != io.EOF {
			t.Fatalf("Watch %q: after NOT_SERVING %v, want the stream ended (UNAVAILABLE)", healthNames[i], err)
		}
	}
	select {
	case err := <-p.exited:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the node did not stop within 60 s of SIGTERM")
	}
}

// TestRatelimitGRPCHealthAtLeastOneConfig: under
// HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED a node without rules is
// NOT_SERVING for every name, by Check and Watch, and SERVING once rules
// of a domain load (the peer's TestServiceHealthStatusAtLeastOneConfigLoaded
// over gRPC).
func TestRatelimitGRPCHealthAtLeastOneConfig(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "config")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p, c := startRatelimit(t, nil, "RUNTIME_ROOT="+root, "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED=true")
	eventually(t, 30*time.Second, "the node ready", func() bool {
		code, _ := httpGet(t, "http://"+p.HTTP+"/readyz")
		return code == 200
	})
	var watches []func() (healthpb.HealthCheckResponse_ServingStatus, error)
	for _, name := range healthNames {
		if st := checkHealth(t, c, name); st != healthpb.HealthCheckResponse_NOT_SERVING {
			t.Fatalf("no rules: Check %q %v, want NOT_SERVING", name, st)
		}
		next := watchHealth(t, c.health, name)
		if st, err := next(); err != nil || st != healthpb.HealthCheckResponse_NOT_SERVING {
			t.Fatalf("no rules: Watch %q %v %v, want NOT_SERVING", name, st, err)
		}
		watches = append(watches, next)
	}
	if err := writeFile(filepath.Join(dir, "a.yaml"), "domain: a\n"); err != nil {
		t.Fatal(err)
	}
	for _, next := range watches {
		waitStatus(t, next, healthpb.HealthCheckResponse_SERVING)
	}
	for _, name := range healthNames {
		if st := checkHealth(t, c, name); st != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("rules loaded: Check %q %v, want SERVING", name, st)
		}
	}
}
