package envoyrls

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/sluice-rl/sluice/testsupport/testkit"
	"github.com/sluice-rl/sluice/testsupport/testlimiter"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// t0 is a minute boundary: fixed windows start there.
var t0 = time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC).UnixNano()

func newServer(t testing.TB, yaml string, now *int64) *Server {
	t.Helper()
	cfg, err := ParseConfig("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	svc := testlimiter.New(t, "", 8, func() int64 { return *now })
	return NewServer(svc, cfg, nil, 1024)
}

func desc(kv ...string) *rlcommon.RateLimitDescriptor {
	d := &rlcommon.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

const cfgYAML = `
domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: k
    value: vip
    rate_limit: {unit: minute, requests_per_unit: 4}
  - key: files
    value: files/*
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 2}
`

// TestFixedWindowsOnTheTimeline: a rule is a fixed window aligned to its
// unit; a new window admits again, and duration_until_reset counts down
// to the window's end.
func TestFixedWindowsOnTheTimeline(t *testing.T) {
	now := t0
	s := newServer(t, cfgYAML, &now)
	steps := []struct {
		at        time.Duration
		code      rlsv3.RateLimitResponse_Code
		remaining uint32
		reset     time.Duration
	}{
		{0, rlsv3.RateLimitResponse_OK, 1, time.Minute},
		{10 * time.Second, rlsv3.RateLimitResponse_OK, 0, 50 * time.Second},
		{59 * time.Second, rlsv3.RateLimitResponse_OVER_LIMIT, 0, time.Second},
		{60 * time.Second, rlsv3.RateLimitResponse_OK, 1, time.Minute},
	}
	for i, st := range steps {
		now = t0 + int64(st.at)
		resp, err := s.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*rlcommon.RateLimitDescriptor{desc("k", "a")}})
		if err != nil {
			t.Fatal(err)
		}
		ds := resp.Statuses[0]
		if resp.OverallCode != st.code || ds.LimitRemaining != st.remaining || ds.DurationUntilReset.AsDuration() != st.reset {
			t.Fatalf("step %d at %v: %v remaining %d reset %v; want %v %d %v", i, st.at, resp.OverallCode, ds.LimitRemaining,
				ds.DurationUntilReset.AsDuration(), st.code, st.remaining, st.reset)
		}
	}
}

// TestAlgorithmAndBurst: sluice's extensions of the rule format. A token
// bucket of 10 a second with a burst of 20 admits 20 at once, then one
// every 100 ms; a sliding window counts across the window's edge.
func TestAlgorithmAndBurst(t *testing.T) {
	now := t0
	s := newServer(t, `
domain: d
descriptors:
  - key: bucket
    rate_limit: {unit: second, requests_per_unit: 10, algorithm: token_bucket, burst: 20}
  - key: sliding
    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: sliding_window}
`, &now)
	call := func(k string) rlsv3.RateLimitResponse_Code {
		resp, err := s.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*rlcommon.RateLimitDescriptor{desc(k, "x")}})
		if err != nil {
			t.Fatal(err)
		}
		return resp.OverallCode
	}
	for i := 0; i < 20; i++ {
		if got := call("bucket"); got != rlsv3.RateLimitResponse_OK {
			t.Fatalf("call %d of the burst: %v", i+1, got)
		}
	}
	if got := call("bucket"); got != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("past the burst: %v", got)
	}
	now += int64(100 * time.Millisecond)
	if got := call("bucket"); got != rlsv3.RateLimitResponse_OK {
		t.Fatalf("a token 100 ms later: %v", got)
	}
	// Sliding: two at 0:50; at 1:10 the last window still counts for
	// 50/60 of its 2, and one more would make 2.67 > 2: refused; at 1:40
	// it counts for 20/60 (0.67 + 1 ≤ 2): admitted.
	now = t0 + int64(50*time.Second)
	call("sliding")
	call("sliding")
	now = t0 + int64(70*time.Second)
	if got := call("sliding"); got != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("sliding window at 1:10: %v", got)
	}
	now = t0 + int64(100*time.Second)
	if got := call("sliding"); got != rlsv3.RateLimitResponse_OK {
		t.Fatalf("sliding window at 1:40: %v", got)
	}
}

// TestShareThreshold: values matched by a shared pattern count together.
func TestShareThreshold(t *testing.T) {
	now := t0
	s := newServer(t, cfgYAML, &now)
	var got []rlsv3.RateLimitResponse_Code
	for _, f := range []string{"files/a.pdf", "files/b.csv", "files/c.txt"} {
		resp, err := s.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*rlcommon.RateLimitDescriptor{desc("files", f)}})
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, resp.OverallCode)
	}
	if got[0] != rlsv3.RateLimitResponse_OK || got[1] != rlsv3.RateLimitResponse_OK || got[2] != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("shared threshold: %v", got)
	}
}

// TestMatch follows envoyproxy/ratelimit's choice of rule: value, then
// pattern, then key alone; the limit of the last entry's rule only.
func TestMatch(t *testing.T) {
	cfg, err := ParseConfig("m.yaml", []byte(`
domain: m
descriptors:
  - key: a
    value: x
    descriptors:
      - key: b
        rate_limit: {unit: second, requests_per_unit: 1}
  - key: a
    value: "pre*"
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: a
    rate_limit: {unit: second, requests_per_unit: 3}
  - key: c
    value: "/api/*/x/*/y"
    rate_limit: {unit: second, requests_per_unit: 4}
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		kv   []string
		want uint32 // requests_per_unit, 0: no rule
	}{
		{[]string{"a", "x", "b", "1"}, 1},
		{[]string{"a", "x"}, 0}, // a=x has no limit of its own
		{[]string{"a", "prefix"}, 2},
		{[]string{"a", "other"}, 3},
		{[]string{"a", "other", "b", "1"}, 0}, // deeper than the rule
		{[]string{"c", "/api/1/x/2/y"}, 4},
		{[]string{"c", "/api/1/x/y"}, 0},
		{[]string{"z", "1"}, 0},
	} {
		r := cfg.Match("m", len(tc.kv)/2, func(i int) (string, string) { return tc.kv[2*i], tc.kv[2*i+1] })
		got := uint32(0)
		if r != nil {
			got = r.Limit.RequestsPerUnit
		}
		if got != tc.want {
			t.Errorf("%v: requests_per_unit %d, want %d", tc.kv, got, tc.want)
		}
	}
	if cfg.Match("other", 1, func(int) (string, string) { return "a", "x" }) != nil {
		t.Error("an unknown domain matched")
	}
}

// TestConfigErrors: mistakes are refused with the file, the line and what
// is accepted.
func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: minute, requests_per_unit: 1}\n  - key: a\n    rate_limit: {unit: minute, requests_per_unit: 2}\n", "c.yaml:5: duplicate descriptor composite key 'd.a'"},
		{"descriptors: []\n", "c.yaml:1: the configuration has an empty or missing domain"},
		{"domain: d\nlimits: 1\n", "c.yaml:2: unknown key 'limits' in the file (accepted: domain, descriptors)"},
		{"domain: d\ndescriptors:\n  - value: x\n", "c.yaml:3: descriptor has empty key"},
		{"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unlimited: true, unit: second}\n", "c.yaml:4: should not specify rate limit unit when unlimited"},
		{"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: -1}\n", "c.yaml:4: requests_per_unit must be an integer between 0 and 4294967295"},
		{"domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      name: n\n      unit: second\n      requests_per_unit: 1\n      replaces:\n        - name: n\n", "c.yaml:9: replaces should not contain name of same descriptor"},
		{"domain: d\ndescriptors:\n  - key: a\n    share_threshold: true\n", "c.yaml:3: share_threshold can only be used with wildcard values"},
		{"domain: d\ndescriptors:\n  - key: a\n    quota_mode: true\n", "c.yaml:4: quota_mode is not supported"},
		{"domain: d\ndomain: e\n", "c.yaml:2: key 'domain' appears twice in the file"},
		{"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, algorithm: bucket}\n", "c.yaml:4: invalid algorithm 'bucket': must be one of token_bucket, gcra, sliding_window, fixed_window, leaky_bucket"},
		{"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, burst: 5}\n", "c.yaml:4: burst belongs to token_bucket, gcra and leaky_bucket: a fixed_window admits requests_per_unit a window"},
		{"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, algorithm: gcra, burst: 0}\n", "c.yaml:4: burst must be an integer between 1 and 1000000000000"},
		{"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, algorithm: gcra, burst: 1.5}\n", "c.yaml:4: burst must be an integer between 1 and 1000000000000"},
		{"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unlimited: true, algorithm: gcra}\n", "c.yaml:4: should not specify algorithm, burst or apply_on_stream_done when unlimited"},
		{"domain: d\n---\ndomain: d\n", "c.yaml:3: domain 'd' is already configured in c.yaml"},
		{"domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: 0s\n      requests_per_unit: 1\n", "c.yaml:5: unit must be second, minute, hour, day, week or a duration such as 250ms, 5m, 1h30m, 7d, between 1ms and 3650d"},
		{"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: 3651d, requests_per_unit: 1}\n", "c.yaml:4: unit must be second, minute, hour, day, week or a duration such as 250ms, 5m, 1h30m, 7d, between 1ms and 3650d"},
		{"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: 3650d, requests_per_unit: 1, algorithm: gcra, burst: 100000}\n", "c.yaml:4: burst is too large for this rate: an empty bucket would take over 100 years to refill"},
	} {
		_, err := ParseConfig("c.yaml", []byte(tc.yaml))
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.yaml, err, tc.want)
		}
	}
}

// TestSegments: values a budget path segment cannot hold are escaped.
func TestSegments(t *testing.T) {
	for in, want := range map[string]string{"10.0.0.1": "10.0.0.1", "/a b#c%": "%2Fa%20b%23c%25", "": "%00"} {
		if got := string(appendSegment(nil, in)); got != want {
			t.Errorf("%q → %q, want %q", in, got, want)
		}
	}
}

// BenchmarkShouldRateLimit is the gRPC handler without the transport: one
// descriptor matched by a rule, and requests of three and five, with
// sluice's answers and with the drop-in's (envoyproxy/ratelimit's:
// descriptors charged one by one).
func BenchmarkShouldRateLimit(b *testing.B) {
	benchShouldRateLimit(b, SluiceOptions(), 3)
}

func BenchmarkShouldRateLimitPeer(b *testing.B) {
	benchShouldRateLimit(b, PeerOptions(), 5)
}

func benchShouldRateLimit(b *testing.B, o Options, many int) {
	benchShouldRateLimitWith(b, o, many, func(*Server) {})
}

func benchShouldRateLimitWith(b *testing.B, o Options, many int, setup func(*Server)) {
	now := t0
	s := newServer(b, strings.Replace(cfgYAML, "requests_per_unit: 2}", "requests_per_unit: 1000000000}", 1), &now)
	s.SetOptions(o)
	setup(s)
	var ds []*rlcommon.RateLimitDescriptor
	for i := 0; i < many; i++ {
		ds = append(ds, desc("k", string(rune('a'+i))))
	}
	for _, bc := range []struct {
		name string
		req  *rlsv3.RateLimitRequest
	}{
		{"descriptors=1", &rlsv3.RateLimitRequest{Domain: "d", Descriptors: ds[:1]}},
		{"descriptors=" + strconv.Itoa(many), &rlsv3.RateLimitRequest{Domain: "d", Descriptors: ds}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			ctx := context.Background()
			for i := 0; i < b.N; i++ {
				if _, err := s.ShouldRateLimit(ctx, bc.req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkShouldRateLimitGRPC is the whole gRPC path over loopback, the
// generated client and the server in one process: its allocations are
// the client's and the server's together (gRPC's transport, the
// protobuf messages, this package's response).
func BenchmarkShouldRateLimitGRPC(b *testing.B) {
	now := t0
	s := newServer(b, strings.Replace(cfgYAML, "requests_per_unit: 2}", "requests_per_unit: 1000000000}", 1), &now)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	g := grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(g, s)
	go g.Serve(ln)
	defer g.Stop()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	client := rlsv3.NewRateLimitServiceClient(conn)
	req := &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*rlcommon.RateLimitDescriptor{desc("k", "a")}}
	ctx := context.Background()
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := client.ShouldRateLimit(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}

// The handler's allocations are the response's, which go to the
// transport: one block for a request of one descriptor, two more for
// several (the statuses and their pointers), whatever their number; the
// decision allocates nothing. Sluice's answers add their header values.
func TestShouldRateLimitAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's sync.Pool drops pooled buffers at random: allocations are counted without it")
	}
	now := t0
	s := newServer(t, strings.Replace(cfgYAML, "requests_per_unit: 2}", "requests_per_unit: 1000000000}", 1), &now)
	ctx := context.Background()
	one := &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*rlcommon.RateLimitDescriptor{desc("k", "a")}}
	five := &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*rlcommon.RateLimitDescriptor{desc("k", "a"), desc("k", "b"),
		desc("k", "c"), desc("k", "d"), desc("k", "e")}}
	for _, c := range []struct {
		name string
		o    Options
		req  *rlsv3.RateLimitRequest
		max  float64
	}{
		{"drop-in, 1 descriptor", PeerOptions(), one, 1},
		{"drop-in, 5 descriptors", PeerOptions(), five, 3},
		{"sluice, 1 descriptor", SluiceOptions(), one, 5},
		{"sluice, 5 descriptors", SluiceOptions(), five, 7},
	} {
		s.SetOptions(c.o)
		if _, err := s.ShouldRateLimit(ctx, c.req); err != nil { // warm the pools
			t.Fatal(err)
		}
		n := testkit.LeastAllocsPerRun(200, func() {
			if _, err := s.ShouldRateLimit(ctx, c.req); err != nil {
				t.Fatal(err)
			}
		})
		if n > c.max {
			t.Errorf("%s: %.0f allocations per request, want at most %.0f", c.name, n, c.max)
		}
	}
}
