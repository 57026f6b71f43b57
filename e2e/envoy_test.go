package e2e

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

const (
	ok   = rlsv3.RateLimitResponse_OK
	over = rlsv3.RateLimitResponse_OVER_LIMIT
)

// rls is a ShouldRateLimit client of one running sluice.
type rls struct {
	t      *testing.T
	client rlsv3.RateLimitServiceClient
	health healthpb.HealthClient
	md     metadata.MD
}

func dialRLS(t *testing.T, addr string) *rls {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &rls{t: t, client: rlsv3.NewRateLimitServiceClient(conn), health: healthpb.NewHealthClient(conn)}
}

// desc builds a descriptor from key, value pairs.
func desc(kv ...string) *rlcommon.RateLimitDescriptor {
	d := &rlcommon.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func (r *rls) call(req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if r.md != nil {
		ctx = metadata.NewOutgoingContext(ctx, r.md)
	}
	return r.client.ShouldRateLimit(ctx, req)
}

func (r *rls) must(domain string, ds ...*rlcommon.RateLimitDescriptor) *rlsv3.RateLimitResponse {
	r.t.Helper()
	resp, err := r.call(&rlsv3.RateLimitRequest{Domain: domain, Descriptors: ds})
	if err != nil {
		r.t.Fatalf("ShouldRateLimit %s: %v", domain, err)
	}
	return resp
}

// codes returns the overall code of a sequence of identical requests.
func (r *rls) sequence(n int, domain string, ds ...*rlcommon.RateLimitDescriptor) []rlsv3.RateLimitResponse_Code {
	r.t.Helper()
	var out []rlsv3.RateLimitResponse_Code
	for i := 0; i < n; i++ {
		out = append(out, r.must(domain, ds...).OverallCode)
	}
	return out
}

func codeList(cs ...rlsv3.RateLimitResponse_Code) string { return fmt.Sprint(cs) }

// headers returns response_headers_to_add as "Name: value" lines in order.
func headers(resp *rlsv3.RateLimitResponse) []string {
	var out []string
	for _, h := range resp.ResponseHeadersToAdd {
		out = append(out, h.Key+": "+h.Value)
	}
	return out
}

// ceilSec rounds a status's duration_until_reset up to whole seconds.
func ceilSec(st *rlsv3.RateLimitResponse_DescriptorStatus) int64 {
	d := st.DurationUntilReset.AsDuration()
	return int64((d + time.Second - 1) / time.Second)
}

// awayFromMinuteEnd waits, if the current minute has less than 15 s left,
// until the next minute begins, so that a sequence against limits per
// minute (fixed windows aligned to the minute, as in envoyproxy/ratelimit)
// runs inside one window.
func awayFromMinuteEnd(t *testing.T) {
	t.Helper()
	for {
		left := time.Minute - time.Duration(time.Now().UnixNano()%int64(time.Minute))
		if left > 15*time.Second {
			return
		}
		time.Sleep(left + 10*time.Millisecond)
	}
}

func envoyServer(t *testing.T, args ...string) (*proc, *rls) {
	t.Helper()
	p := single(t, append([]string{"--grpc-addr", "127.0.0.1:0", "--envoy-config", "testdata/envoy"}, args...)...)
	if p.GRPC == "" {
		t.Fatal("no gRPC address logged")
	}
	return p, dialRLS(t, p.GRPC)
}

// TestEnvoyRLS drives ShouldRateLimit with go-control-plane's generated
// client: OK then OVER_LIMIT at the limit with exact statuses and headers,
// hits_addend, a limit override, shadow mode, a request of several
// descriptors refused as a whole, the budget tree mapping and health.
func TestEnvoyRLS(t *testing.T) {
	p, c := envoyServer(t)
	awayFromMinuteEnd(t)

	t.Run("ok then over limit, statuses and headers exact", func(t *testing.T) {
		for i := 0; i < 6; i++ {
			resp := c.must("mongo_cps", desc("database", "users"))
			st := resp.Statuses[0]
			if len(resp.Statuses) != 1 {
				t.Fatalf("%d statuses", len(resp.Statuses))
			}
			lim := st.CurrentLimit
			if lim == nil || lim.RequestsPerUnit != 5 || lim.Unit != rlsv3.RateLimitResponse_RateLimit_MINUTE {
				t.Fatalf("request %d: current_limit %v", i, lim)
			}
			reset := ceilSec(st)
			if reset < 1 || reset > 60 {
				t.Fatalf("request %d: duration_until_reset %v", i, st.DurationUntilReset.AsDuration())
			}
			r := strconv.FormatInt(reset, 10)
			if i < 5 {
				left := 4 - i
				if resp.OverallCode != ok || st.Code != ok || st.LimitRemaining != uint32(left) {
					t.Fatalf("request %d: %v %v remaining %d", i, resp.OverallCode, st.Code, st.LimitRemaining)
				}
				want := []string{`RateLimit-Policy: "burst";q=5;w=60`, fmt.Sprintf(`RateLimit: "burst";r=%d;t=%s`, left, r),
					"X-RateLimit-Limit: 5", fmt.Sprintf("X-RateLimit-Remaining: %d", left), "X-RateLimit-Reset: " + r}
				if got := headers(resp); strings.Join(got, "\n") != strings.Join(want, "\n") {
					t.Fatalf("request %d headers:\n%s\nwant:\n%s", i, strings.Join(got, "\n"), strings.Join(want, "\n"))
				}
				continue
			}
			if resp.OverallCode != over || st.Code != over || st.LimitRemaining != 0 {
				t.Fatalf("request 6: %v %v remaining %d", resp.OverallCode, st.Code, st.LimitRemaining)
			}
			want := []string{`RateLimit-Policy: "burst";q=5;w=60`, `RateLimit: "burst";r=0;t=` + r,
				"X-RateLimit-Limit: 5", "X-RateLimit-Remaining: 0", "X-RateLimit-Reset: " + r, "Retry-After: " + r}
			if got := headers(resp); strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Fatalf("refusal headers:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		}
	})

	t.Run("hits_addend is the cost, all or nothing", func(t *testing.T) {
		d := desc("database", "default")
		steps := []struct {
			hits      uint32
			code      rlsv3.RateLimitResponse_Code
			remaining uint32
		}{{3, ok, 2}, {3, over, 2}, {2, ok, 0}, {1, over, 0}}
		for i, s := range steps {
			resp, err := c.call(&rlsv3.RateLimitRequest{Domain: "mongo_cps", Descriptors: []*rlcommon.RateLimitDescriptor{d}, HitsAddend: s.hits})
			if err != nil {
				t.Fatal(err)
			}
			if st := resp.Statuses[0]; resp.OverallCode != s.code || st.LimitRemaining != s.remaining {
				t.Fatalf("step %d (hits %d): %v remaining %d, want %v %d", i, s.hits, resp.OverallCode, st.LimitRemaining, s.code, s.remaining)
			}
		}
		// A descriptor's own hits_addend overrides the request's.
		dd := desc("database", "users")
		dd.HitsAddend = wrapperspb.UInt64(0)
		resp, err := c.call(&rlsv3.RateLimitRequest{Domain: "mongo_cps", Descriptors: []*rlcommon.RateLimitDescriptor{dd}, HitsAddend: 9})
		if err != nil || resp.OverallCode != ok || resp.Statuses[0].LimitRemaining != 0 {
			t.Fatalf("hits 0 on a full limit: %v %v", resp, err)
		}
	})

	t.Run("limit override", func(t *testing.T) {
		d := desc("route", "checkout")
		d.Limit = &rlcommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 2, Unit: typev3.RateLimitUnit_MINUTE}
		if got, want := codeList(c.sequence(3, "rl", d)...), codeList(ok, ok, over); got != want {
			t.Fatalf("override sequence %s, want %s", got, want)
		}
		// As in envoyproxy/ratelimit, an override counts only in a domain
		// with rules: "gateway" has none (and no budget node).
		if got, want := codeList(c.sequence(3, "gateway", d)...), codeList(ok, ok, ok); got != want {
			t.Fatalf("override in a domain without rules: %s, want %s", got, want)
		}
		resp := c.must("rl", d)
		if l := resp.Statuses[0].CurrentLimit; l.RequestsPerUnit != 2 || l.Unit != rlsv3.RateLimitResponse_RateLimit_MINUTE {
			t.Fatalf("override current_limit %v", l)
		}
	})

	t.Run("shadow mode counts and never refuses", func(t *testing.T) {
		d := desc("foo", "s1", "baz", "shady")
		for i := 0; i < 3; i++ {
			resp := c.must("rl", d)
			st := resp.Statuses[0]
			if resp.OverallCode != ok || st.Code != ok || st.CurrentLimit.GetRequestsPerUnit() != 1 || st.LimitRemaining != 0 {
				t.Fatalf("shadow request %d: %v", i, resp)
			}
		}
		m := metricsText(t, p.HTTP)
		if !strings.Contains(m, `sluice_envoy_descriptors_total{descriptor="rl.foo.baz_shady",domain="rl",result="shadow_over_limit"} 2`) {
			t.Fatalf("shadow metric missing:\n%s", grepLines(m, "sluice_envoy"))
		}
	})

	t.Run("several descriptors are refused as a whole", func(t *testing.T) {
		mock := desc("source_cluster", "proxy", "destination_cluster", "mock")
		foo := desc("foo", "m")
		resp := c.must("rl", mock, foo)
		if resp.OverallCode != ok || resp.Statuses[0].LimitRemaining != 0 || resp.Statuses[1].LimitRemaining != 1 {
			t.Fatalf("first: %v", resp)
		}
		resp = c.must("rl", mock, foo)
		if resp.OverallCode != over || resp.Statuses[0].Code != over || resp.Statuses[1].Code != ok || resp.Statuses[1].LimitRemaining != 1 {
			t.Fatalf("second: %v", resp)
		}
		// foo was not charged by the refused request: one token is left.
		if got, want := codeList(c.sequence(2, "rl", foo)...), codeList(ok, over); got != want {
			t.Fatalf("foo alone afterwards %s, want %s", got, want)
		}
	})

	t.Run("budget tree mapping", func(t *testing.T) {
		rdb := redis.NewClient(&redis.Options{Addr: p.Resp})
		defer rdb.Close()
		ctx := context.Background()
		if err := rdb.Do(ctx, "RL.BUDGET", "SET", "api/remote_address", `{"sharing":"inherit","sustained":{"rate":2,"window":"minute"}}`).Err(); err != nil {
			t.Fatal(err)
		}
		if got, want := codeList(c.sequence(3, "api", desc("remote_address", "10.0.0.1"))...), codeList(ok, ok, over); got != want {
			t.Fatalf("per-address limit %s, want %s", got, want)
		}
		resp := c.must("api", desc("remote_address", "10.0.0.2"))
		if resp.OverallCode != ok || resp.Statuses[0].LimitRemaining != 1 || resp.Statuses[0].CurrentLimit.GetUnit() != rlsv3.RateLimitResponse_RateLimit_MINUTE {
			t.Fatalf("another address: %v", resp)
		}
		v, err := rdb.Do(ctx, "RL.PEEK", "api/remote_address/10.0.0.2", "COST", 0).Slice()
		if err != nil || v[1] != int64(1) {
			t.Fatalf("RL.PEEK of the mapped path: %v %v", v, err)
		}
		// Nothing configured on the path: not limited.
		resp = c.must("nowhere", desc("k", "v"))
		if resp.OverallCode != ok || resp.Statuses[0].CurrentLimit != nil {
			t.Fatalf("unconfigured: %v", resp)
		}
	})

	t.Run("bad requests", func(t *testing.T) {
		for _, req := range []*rlsv3.RateLimitRequest{
			{Domain: "", Descriptors: []*rlcommon.RateLimitDescriptor{desc("a", "b")}},
			{Domain: "rl"},
			{Domain: "rl", Descriptors: []*rlcommon.RateLimitDescriptor{{}}},
		} {
			if _, err := c.call(req); status.Code(err) != codes.InvalidArgument {
				t.Fatalf("%v: %v, want InvalidArgument", req, err)
			}
		}
	})

	t.Run("health", func(t *testing.T) {
		c.waitServing()
		ctx := context.Background()
		for _, svc := range []string{"", "envoy.service.ratelimit.v3.RateLimitService"} {
			r, err := c.health.Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
			if err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
				t.Fatalf("health %q: %v %v", svc, r, err)
			}
		}
		if _, err := c.health.Check(ctx, &healthpb.HealthCheckRequest{Service: "other"}); status.Code(err) != codes.NotFound {
			t.Fatalf("unknown service: %v", err)
		}
	})
}

// TestEnvoyExampleConfigs loads envoyproxy/ratelimit's example
// configurations unchanged (testdata/envoy: examples/ratelimit/config and
// the README's examples) and checks the admit/deny sequences its
// documentation gives.
func TestEnvoyExampleConfigs(t *testing.T) {
	_, c := envoyServer(t)
	awayFromMinuteEnd(t)
	seq := func(name string, n int, want []rlsv3.RateLimitResponse_Code, domain string, ds ...*rlcommon.RateLimitDescriptor) {
		t.Helper()
		if got := c.sequence(n, domain, ds...); codeList(got...) != codeList(want...) {
			t.Errorf("%s: %v, want %v", name, got, want)
		}
	}
	// examples/ratelimit/config/example.yaml (domain rl).
	seq("rl: proxy→mock 1/minute", 2, []rlsv3.RateLimitResponse_Code{ok, over}, "rl", desc("source_cluster", "proxy", "destination_cluster", "mock"))
	seq("rl: other destination, no rule", 3, []rlsv3.RateLimitResponse_Code{ok, ok, ok}, "rl", desc("source_cluster", "proxy", "destination_cluster", "other"))
	seq("rl: foo 2/minute per value", 3, []rlsv3.RateLimitResponse_Code{ok, ok, over}, "rl", desc("foo", "a"))
	seq("rl: another foo value counts apart", 1, []rlsv3.RateLimitResponse_Code{ok}, "rl", desc("foo", "b"))
	seq("rl: foo/bar 3/minute", 4, []rlsv3.RateLimitResponse_Code{ok, ok, ok, over}, "rl", desc("foo", "a", "bar", "x"))
	seq("rl: foo/bar=banned 0", 1, []rlsv3.RateLimitResponse_Code{over}, "rl", desc("foo", "a", "bar", "banned"))
	seq("rl: foo/bay unlimited", 5, []rlsv3.RateLimitResponse_Code{ok, ok, ok, ok, ok}, "rl", desc("foo", "a", "bay", "x"))
	seq("rl: foo/baz=shady shadow", 3, []rlsv3.RateLimitResponse_Code{ok, ok, ok}, "rl", desc("foo", "a", "baz", "shady"))
	seq("rl: qux unlimited", 5, []rlsv3.RateLimitResponse_Code{ok, ok, ok, ok, ok}, "rl", desc("qux", "any"))
	seq("rl: deeper than the config", 4, []rlsv3.RateLimitResponse_Code{ok, ok, ok, ok}, "rl", desc("foo", "c", "bar", "x", "extra", "1"))
	if st := c.must("rl", desc("qux", "q")).Statuses[0]; st.LimitRemaining != math.MaxUint32 || st.CurrentLimit != nil {
		t.Errorf("unlimited status: %v", st)
	}
	// examples/ratelimit/config/config.yaml (domain mongo_cps).
	seq("mongo_cps: users 5/minute", 6, []rlsv3.RateLimitResponse_Code{ok, ok, ok, ok, ok, over}, "mongo_cps", desc("database", "users"))
	seq("mongo_cps: default counts apart", 1, []rlsv3.RateLimitResponse_Code{ok}, "mongo_cps", desc("database", "default"))
	seq("mongo_cps: no rule for other", 7, []rlsv3.RateLimitResponse_Code{ok, ok, ok, ok, ok, ok, ok}, "mongo_cps", desc("database", "other"))
	// README example 2: 5 marketing messages a day per number, 100 to any number.
	seq("messaging: marketing", 6, []rlsv3.RateLimitResponse_Code{ok, ok, ok, ok, ok, over}, "messaging",
		desc("message_type", "marketing", "to_number", "2061111111"), desc("to_number", "2061111111"))
	resp := c.must("messaging", desc("to_number", "2061111111"))
	if st := resp.Statuses[0]; resp.OverallCode != ok || st.LimitRemaining != 94 || st.CurrentLimit.GetUnit() != rlsv3.RateLimitResponse_RateLimit_DAY {
		t.Errorf("messaging: the refused request must not count against the number's 100/day: %v", st)
	}
	// README example 3: the most specific match wins; 0 blacklists.
	seq("edge_proxy_per_ip: blacklisted", 2, []rlsv3.RateLimitResponse_Code{over, over}, "edge_proxy_per_ip", desc("remote_address", "50.0.0.5"))
	if st := c.must("edge_proxy_per_ip", desc("remote_address", "50.0.0.1")).Statuses[0]; st.CurrentLimit.GetRequestsPerUnit() != 10 || st.LimitRemaining != 9 {
		t.Errorf("edge_proxy_per_ip 50.0.0.1: %v", st)
	}
	// README example 5: unlimited, and a descriptor that matches nothing.
	seq("internal: ldap unlimited", 3, []rlsv3.RateLimitResponse_Code{ok, ok, ok}, "internal", desc("ldap", "x"))
	if st := c.must("internal", desc("azure", "x")).Statuses[0]; st.CurrentLimit.GetRequestsPerUnit() != 100 || st.LimitRemaining != 99 {
		t.Errorf("internal azure: %v", st)
	}
	// README example 6: user-a in shadow mode never refused; user-b limited.
	seq("example6: user-a shadow", 15, []rlsv3.RateLimitResponse_Code{ok, ok, ok, ok, ok, ok, ok, ok, ok, ok, ok, ok, ok, ok, ok}, "example6", desc("service", "auth-service", "user", "user-a"))
	if st := c.must("example6", desc("service", "auth-service", "user", "user-b")).Statuses[0]; st.CurrentLimit.GetRequestsPerUnit() != 20 {
		t.Errorf("example6 user-b: %v", st)
	}
	// README example 7: the replacing rule applies, the replaced one is not charged.
	resp = c.must("example7", desc("key_1", "value_1", "user", "bkthomps"), desc("key_2", "value_2", "user", "bkthomps"))
	if s := resp.Statuses; s[0].CurrentLimit != nil || s[1].CurrentLimit.GetRequestsPerUnit() != 10 || s[1].LimitRemaining != 9 {
		t.Errorf("example7 both: %v", resp)
	}
	if st := c.must("example7", desc("key_1", "value_1", "user", "bkthomps")).Statuses[0]; st.CurrentLimit.GetRequestsPerUnit() != 5 || st.LimitRemaining != 4 {
		t.Errorf("example7 key_1 alone (5/s, untouched before): %v", st)
	}
	// README example 8: the explicit value wins over the key alone.
	if st := c.must("example8", desc("key1", "value1")).Statuses[0]; st.CurrentLimit.GetRequestsPerUnit() != 20 {
		t.Errorf("example8 value1: %v", st)
	}
	if st := c.must("example8", desc("key1", "other")).Statuses[0]; st.CurrentLimit.GetRequestsPerUnit() != 10 {
		t.Errorf("example8 other: %v", st)
	}
	// README example 9: a wildcard in the middle of a value.
	if st := c.must("example9", desc("path", "/api/123/action")).Statuses[0]; st.CurrentLimit.GetRequestsPerUnit() != 20 {
		t.Errorf("example9 match: %v", st)
	}
	if st := c.must("example9", desc("path", "/api/123/other")).Statuses[0]; st.CurrentLimit != nil {
		t.Errorf("example9 no match: %v", st)
	}
}

// TestEnvoyConfigErrors: a bad file stops the server at start with the
// file and line.
func TestEnvoyConfigErrors(t *testing.T) {
	dir := t.TempDir()
	bad := dir + "/bad.yaml"
	if err := writeFile(bad, "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 1\n"); err != nil {
		t.Fatal(err)
	}
	out, err := runBinary("--grpc-addr", "127.0.0.1:0", "--envoy-config", bad, "--resp-addr", "127.0.0.1:0",
		"--http-addr", "", "--raft-addr", "127.0.0.1:0", "--data-dir", t.TempDir())
	if err == nil || !strings.Contains(out, bad+":5: invalid rate limit unit 'fortnight'") {
		t.Fatalf("exit %v, output:\n%s", err, out)
	}
}

// TestEnvoyAuth: with a password, calls need credentials; health checks
// do not.
func TestEnvoyAuth(t *testing.T) {
	_, c := envoyServer(t, "--requirepass", "s3cret")
	req := &rlsv3.RateLimitRequest{Domain: "rl", Descriptors: []*rlcommon.RateLimitDescriptor{desc("qux", "x")}}
	if _, err := c.call(req); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("no credentials: %v", err)
	}
	c.md = metadata.Pairs("authorization", "Bearer wrong")
	if _, err := c.call(req); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("wrong password: %v", err)
	}
	c.md = metadata.Pairs("authorization", "Bearer s3cret")
	if _, err := c.call(req); err != nil {
		t.Fatalf("with the password: %v", err)
	}
	c.md = nil
	c.waitServing()
}

// waitServing waits until the health check says SERVING (the node is
// ready once it has a leader and has applied the log), for at most 30 s.
func (r *rls) waitServing() {
	r.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		h, err := r.health.Check(context.Background(), &healthpb.HealthCheckRequest{})
		if err != nil {
			r.t.Fatalf("health check without credentials: %v", err)
		}
		if h.Status == healthpb.HealthCheckResponse_SERVING {
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("health: %v after 30 s", h.Status)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func metricsText(t *testing.T, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func writeFile(path, content string) error { return os.WriteFile(path, []byte(content), 0o644) }

// runBinary runs sluice to completion (it must stop on its own, as on a
// bad setting) and returns what it printed.
func runBinary(args ...string) (string, error) {
	cmd := exec.Command(binary, args...)
	done := make(chan struct{})
	timer := time.AfterFunc(30*time.Second, func() {
		select {
		case <-done:
		default:
			cmd.Process.Kill()
		}
	})
	defer timer.Stop()
	out, err := cmd.CombinedOutput()
	close(done)
	return string(out), err
}
