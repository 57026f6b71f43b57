package envoyrls

import (
	"context"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// fakeADS is a management server that the test drives by hand: each
// stream's requests come out on reqs, and the test sends responses on
// the stream it got from streams.
type fakeADS struct {
	discoveryv3.UnimplementedAggregatedDiscoveryServiceServer
	reqs    chan *discoveryv3.DiscoveryRequest
	streams chan *adsStream
}

type adsStream struct {
	srv  discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesServer
	md   metadata.MD
	send chan *discoveryv3.DiscoveryResponse
	end  chan struct{} // closed by the test: the stream ends
}

func (f *fakeADS) StreamAggregatedResources(srv discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	md, _ := metadata.FromIncomingContext(srv.Context())
	st := &adsStream{srv: srv, md: md, send: make(chan *discoveryv3.DiscoveryResponse), end: make(chan struct{})}
	f.streams <- st
	go func() {
		for {
			req, err := srv.Recv()
			if err != nil {
				return
			}
			f.reqs <- req
		}
	}()
	for {
		select {
		case r := <-st.send:
			if err := srv.Send(r); err != nil {
				return err
			}
		case <-st.end:
			return io.EOF
		case <-srv.Context().Done():
			return nil
		}
	}
}

func startFakeADS(t *testing.T) (*fakeADS, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeADS{reqs: make(chan *discoveryv3.DiscoveryRequest, 16), streams: make(chan *adsStream, 4)}
	g := grpc.NewServer()
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(g, f)
	go g.Serve(ln)
	t.Cleanup(g.Stop)
	return f, ln.Addr().String()
}

// configs records what the client hands the node.
type configs struct {
	mu   sync.Mutex
	got  []*Config
	errs []error
}

func (c *configs) on(cfg *Config, version string, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.got = append(c.got, cfg)
	c.errs = append(c.errs, err)
}

func (c *configs) last() (*Config, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.got[len(c.got)-1], c.errs[len(c.errs)-1]
}

func response(t *testing.T, version, nonce string, rs ...*rlsconfv3.RateLimitConfig) *discoveryv3.DiscoveryResponse {
	t.Helper()
	resp := &discoveryv3.DiscoveryResponse{VersionInfo: version, Nonce: nonce, TypeUrl: RateLimitConfigType}
	for _, r := range rs {
		a, err := anypb.New(r)
		if err != nil {
			t.Fatal(err)
		}
		resp.Resources = append(resp.Resources, a)
	}
	return resp
}

func perMinute(domain, key string, n uint32) *rlsconfv3.RateLimitConfig {
	return &rlsconfv3.RateLimitConfig{Name: domain, Domain: domain, Descriptors: []*rlsconfv3.RateLimitDescriptor{
		{Key: key, RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_MINUTE, RequestsPerUnit: n}}}}
}

func nextReq(t *testing.T, f *fakeADS) *discoveryv3.DiscoveryRequest {
	t.Helper()
	select {
	case r := <-f.reqs:
		return r
	case <-time.After(20 * time.Second):
		t.Fatal("no request from the client within 20s")
		return nil
	}
}

func nextStream(t *testing.T, f *fakeADS) *adsStream {
	t.Helper()
	select {
	case s := <-f.streams:
		return s
	case <-time.After(20 * time.Second):
		t.Fatal("the client opened no stream within 20s")
		return nil
	}
}

// The client subscribes with its node, metadata and headers; ACKs a
// response whose rules load (its version and nonce); NACKs one that does
// not, or that does not decode, with the reason and the version in force;
// and after the stream ends subscribes again with that version.
func TestXDSClientAckNack(t *testing.T) {
	f, addr := startFakeADS(t)
	var got configs
	c := NewXDSClient(XDSSettings{ServerURL: addr, NodeID: "node-7", NodeMetadata: map[string]string{"zone": "a"},
		Headers: map[string]string{"authorization": "Bearer t0ken"}, ConnectRetry: 50 * time.Millisecond,
		Backoff: XDSBackoff{Initial: 20 * time.Millisecond, Max: time.Second, Factor: 0.5, Jitter: true},
		Load:    LoadOptions{QuotaMode: true}}, slog.New(slog.NewTextHandler(io.Discard, nil)), got.on)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	st := nextStream(t, f)
	if h := st.md.Get("authorization"); len(h) != 1 || h[0] != "Bearer t0ken" {
		t.Fatalf("stream metadata authorization %v", h)
	}
	sub := nextReq(t, f)
	if sub.TypeUrl != RateLimitConfigType || sub.VersionInfo != "" || sub.ResponseNonce != "" || sub.ErrorDetail != nil ||
		sub.Node.GetId() != "node-7" || sub.Node.GetMetadata().GetFields()["zone"].GetStringValue() != "a" || len(sub.ResourceNames) != 0 {
		t.Fatalf("subscription: %v", sub)
	}

	// v1 loads: ACK.
	st.send <- response(t, "v1", "n1", perMinute("shop", "user", 5), perMinute("api", "path", 9))
	ack := nextReq(t, f)
	if ack.VersionInfo != "v1" || ack.ResponseNonce != "n1" || ack.ErrorDetail != nil {
		t.Fatalf("ACK of v1: %v", ack)
	}
	cfg, err := got.last()
	if err != nil || strings.Join(cfg.Domains(), ",") != "api,shop" {
		t.Fatalf("v1 handed over as %v, %v", cfg.Domains(), err)
	}
	if r := cfg.Match("shop", 1, func(int) (string, string) { return "user", "x" }); r == nil || r.Limit.RequestsPerUnit != 5 {
		t.Fatalf("shop user=x: %+v", r)
	}

	// v2 does not load (a limit without a unit): NACK with the reason,
	// the version in force still v1.
	bad := perMinute("shop", "user", 5)
	bad.Descriptors[0].RateLimit.Unit = rlsconfv3.RateLimitUnit_UNKNOWN
	st.send <- response(t, "v2", "n2", bad)
	nack := nextReq(t, f)
	if nack.VersionInfo != "v1" || nack.ResponseNonce != "n2" || nack.ErrorDetail == nil ||
		!strings.Contains(nack.ErrorDetail.Message, `RateLimitConfig "shop": descriptor 'shop.user': invalid rate limit unit 'unknown'`) {
		t.Fatalf("NACK of v2: %v", nack)
	}
	if _, err := got.last(); err == nil {
		t.Fatal("v2 handed over without its error")
	}
	if c.AckedVersion() != "v1" {
		t.Fatalf("acked version %q after a NACK", c.AckedVersion())
	}
	// v2 sent again unchanged (as a snapshot cache does after a NACK):
	// NACKed again, not handed over again.
	st.send <- response(t, "v2", "n2b", bad)
	if r := nextReq(t, f); r.VersionInfo != "v1" || r.ResponseNonce != "n2b" || r.ErrorDetail == nil {
		t.Fatalf("NACK of v2 sent again: %v", r)
	}
	got.mu.Lock()
	handed := len(got.got)
	got.mu.Unlock()
	if handed != 2 {
		t.Fatalf("%d configurations handed over, want 2 (v1, and v2 once)", handed)
	}

	// v3 holds a resource of another type: NACK.
	other, _ := anypb.New(wrapperspb.String("not a config"))
	st.send <- &discoveryv3.DiscoveryResponse{VersionInfo: "v3", Nonce: "n3", TypeUrl: RateLimitConfigType, Resources: []*anypb.Any{other}}
	if r := nextReq(t, f); r.VersionInfo != "v1" || r.ResponseNonce != "n3" || r.ErrorDetail == nil {
		t.Fatalf("NACK of v3: %v", r)
	}

	// The stream ends: the client subscribes again on a new one with the
	// version in force and no nonce.
	close(st.end)
	st2 := nextStream(t, f)
	if r := nextReq(t, f); r.VersionInfo != "v1" || r.ResponseNonce != "" || r.ErrorDetail != nil {
		t.Fatalf("subscription after reconnecting: %v", r)
	}
	// An empty state of the world is a configuration without domains.
	st2.send <- response(t, "v4", "m1")
	if r := nextReq(t, f); r.VersionInfo != "v4" || r.ResponseNonce != "m1" || r.ErrorDetail != nil {
		t.Fatalf("ACK of v4: %v", r)
	}
	if cfg, err := got.last(); err != nil || cfg == nil || len(cfg.Domains()) != 0 {
		t.Fatalf("v4 handed over as %v, %v", cfg, err)
	}
}

// A server that is not there yet is waited for: the client connects when
// it comes up.
func TestXDSClientWaitsForServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	var got configs
	c := NewXDSClient(XDSSettings{ServerURL: addr, NodeID: "n", ConnectRetry: 50 * time.Millisecond,
		Backoff: XDSBackoff{Initial: 20 * time.Millisecond, Max: time.Second, Factor: 0.5}}, slog.New(slog.NewTextHandler(io.Discard, nil)), got.on)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	ln, err = net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeADS{reqs: make(chan *discoveryv3.DiscoveryRequest, 16), streams: make(chan *adsStream, 4)}
	g := grpc.NewServer()
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(g, f)
	go g.Serve(ln)
	t.Cleanup(g.Stop)
	st := nextStream(t, f)
	nextReq(t, f)
	st.send <- response(t, "1", "a", perMinute("d", "k", 1))
	if r := nextReq(t, f); r.VersionInfo != "1" || r.ErrorDetail != nil {
		t.Fatalf("ACK: %v", r)
	}
}

// The peer's backoff: Initial × Factor^attempt within [Initial, Max], the
// jitter a point between Initial and that.
func TestXDSBackoff(t *testing.T) {
	half := func() float64 { return 0.5 }
	b := XDSBackoff{Initial: 10 * time.Second, Max: 60 * time.Second, Factor: 0.5, Jitter: true}
	for a := 0; a < 5; a++ {
		if d := b.Delay(a, half); d != 10*time.Second {
			t.Fatalf("factor 0.5, attempt %d: %v, want the initial 10s", a, d)
		}
	}
	b = XDSBackoff{Initial: time.Second, Max: 10 * time.Second, Factor: 2}
	for a, want := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 10 * time.Second, 10 * time.Second} {
		if d := b.Delay(a, half); d != want {
			t.Fatalf("factor 2, attempt %d: %v, want %v", a, d, want)
		}
	}
	b.Jitter = true
	if d := b.Delay(3, half); d != 4500*time.Millisecond {
		t.Fatalf("jittered attempt 3 at 0.5: %v, want 4.5s (between 1s and 8s)", d)
	}
}

// Pushed rules load as their YAML does: the same matching and metrics
// names, the same refusals, naming the resource and the descriptor.
func TestConfigFromXDS(t *testing.T) {
	md, _ := structpb.NewStruct(map[string]any{"team": "checkout"})
	r := &rlsconfv3.RateLimitConfig{Name: "edge", Domain: "edge", Descriptors: []*rlsconfv3.RateLimitDescriptor{
		{Key: "remote_address", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_SECOND, RequestsPerUnit: 10}},
		{Key: "remote_address", Value: "50.0.0.5", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_SECOND}},
		{Key: "path", Value: "/free", RateLimit: &rlsconfv3.RateLimitPolicy{Unlimited: true}},
		{Key: "tenant", Descriptors: []*rlsconfv3.RateLimitDescriptor{
			{Key: "plan", Value: "gold", ShadowMode: true, DetailedMetric: true, QuotaMode: true, Metadata: md,
				RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_WEEK, RequestsPerUnit: 7, Name: "gold",
					Replaces: []*rlsconfv3.RateLimitReplace{{Name: "base"}}}}}},
	}}
	cfg, err := ConfigFromXDS([]*rlsconfv3.RateLimitConfig{r}, LoadOptions{QuotaMode: true})
	if err != nil {
		t.Fatal(err)
	}
	want, err := ParseConfigWith("edge.yaml", []byte(`domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: remote_address
    value: 50.0.0.5
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: path
    value: /free
    rate_limit: {unlimited: true}
  - key: tenant
    descriptors:
      - key: plan
        value: gold
        shadow_mode: true
        detailed_metric: true
        quota_mode: true
        metadata: {team: checkout}
        rate_limit: {unit: week, requests_per_unit: 7, name: gold, replaces: [{name: base}]}
`), LoadOptions{QuotaMode: true})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Dump() != want.Dump() {
		t.Fatalf("pushed rules:\n%s\nthe same in YAML:\n%s", cfg.Dump(), want.Dump())
	}
	gold := cfg.Match("edge", 2, func(i int) (string, string) {
		return [][2]string{{"tenant", "t"}, {"plan", "gold"}}[i][0], [][2]string{{"tenant", "t"}, {"plan", "gold"}}[i][1]
	})
	if gold == nil || !gold.ShadowMode || !gold.QuotaMode || gold.Limit.Name != "gold" || gold.Limit.Replaces[0] != "base" ||
		gold.Metadata.GetFields()["team"].GetStringValue() != "checkout" || gold.Metric() != "edge.tenant.plan_gold" {
		t.Fatalf("tenant/plan=gold: %+v", gold)
	}

	cases := []struct {
		rs    []*rlsconfv3.RateLimitConfig
		merge bool
		want  string
	}{
		{[]*rlsconfv3.RateLimitConfig{{Name: "x"}}, false, `RateLimitConfig "x": the configuration has an empty or missing domain`},
		{[]*rlsconfv3.RateLimitConfig{perMinute("a", "k", 1), perMinute("a", "j", 1)}, false, `RateLimitConfig "a": domain 'a' is already configured in RateLimitConfig "a"`},
		{[]*rlsconfv3.RateLimitConfig{perMinute("a", "k", 1), perMinute("a", "k", 1)}, true, `duplicate descriptor composite key 'a.k'`},
		{[]*rlsconfv3.RateLimitConfig{{Name: "e", Domain: "e", Descriptors: []*rlsconfv3.RateLimitDescriptor{{Key: ""}}}}, false, `RateLimitConfig "e": descriptor 'e.': descriptor has empty key`},
		{[]*rlsconfv3.RateLimitConfig{{Name: "u", Domain: "u", Descriptors: []*rlsconfv3.RateLimitDescriptor{{Key: "k",
			RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_HOUR, Unlimited: true}}}}}, false, `descriptor 'u.k': should not specify rate limit unit when unlimited`},
		{[]*rlsconfv3.RateLimitConfig{{Name: "r", Domain: "r", Descriptors: []*rlsconfv3.RateLimitDescriptor{{Key: "k", Value: "v",
			RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_HOUR, Name: "n", Replaces: []*rlsconfv3.RateLimitReplace{{Name: "n"}}}}}}}, false,
			`descriptor 'r.k_v': replaces should not contain name of same descriptor`},
	}
	for _, c := range cases {
		_, err := ConfigFromXDS(c.rs, LoadOptions{MergeDomains: c.merge})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v; want an error with %q", c.rs, err, c.want)
		}
	}
	// Merged, two resources of a domain add up.
	m, err := ConfigFromXDS([]*rlsconfv3.RateLimitConfig{perMinute("a", "k", 1), perMinute("a", "j", 2)}, LoadOptions{MergeDomains: true})
	if err != nil || m.Match("a", 1, func(int) (string, string) { return "j", "x" }) == nil {
		t.Fatalf("merged: %v, %v", m, err)
	}
}
