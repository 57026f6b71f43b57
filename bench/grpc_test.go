package main

import (
	"context"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"

	"github.com/sluice-rl/sluice/envoyrls"
	"github.com/sluice-rl/sluice/testsupport/testlimiter"
)

// rlsServer serves sluice's Envoy front on a loopback port.
func rlsServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	svc := testlimiter.New(t, "", 8, func() int64 { return time.Now().UnixNano() })
	g := grpc.NewServer()
	// A limit override counts only in a domain with rules.
	cfg, err := envoyrls.ParseConfig("bench.yaml", []byte("domain: bench\n"))
	if err != nil {
		t.Fatal(err)
	}
	rlsv3.RegisterRateLimitServiceServer(g, envoyrls.NewServer(svc, cfg, nil, 1024))
	go g.Serve(ln)
	t.Cleanup(g.Stop)
	return ln.Addr().String()
}

// TestGRPCRun: a --grpc run counts every ShouldRateLimit answer, admitted
// and refused, by the limit override of --rate per --per.
func TestGRPCRun(t *testing.T) {
	addr := rlsServer(t)
	c, err := parseArgs([]string{"--grpc", "-h", addr, "-c", "2", "-P", "3", "-n", "60", "-r", "1", "--rate", "10", "--per", "hour"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	res, err := execute(context.Background(), c, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests != 60 || res.Admitted != 10 || res.Denied != 50 || res.Errors != 0 {
		t.Fatalf("requests %d admitted %d denied %d errors %d %v", res.Requests, res.Admitted, res.Denied, res.Errors, res.ErrorTexts)
	}
}

func TestGRPCFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--grpc", "--mix", "throttle=100"}, "--grpc sends ShouldRateLimit only"},
		{[]string{"--grpc", "--per", "250ms"}, "--per must be second, minute, hour or day with --grpc"},
		{[]string{"--grpc", "--rate-limit", "100"}, "--grpc runs closed-loop"},
	} {
		if _, err := parseArgs(tc.args, io.Discard); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
		}
	}
}
