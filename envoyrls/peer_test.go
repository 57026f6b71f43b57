package envoyrls

// Expectations of envoyproxy/ratelimit's own tests, re-written for the
// server under PeerOptions; each names the test it comes from.

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

const peerYAML = `
domain: domain
descriptors:
  - {key: key4, value: value4, rate_limit: {unit: hour, requests_per_unit: 15}}
  - {key: key5, value: value5, rate_limit: {unit: hour, requests_per_unit: 14}}
  - {key: key7, value: value7, rate_limit: {unit: second, requests_per_unit: 20}}
  - {key: key8, value: value8, rate_limit: {unit: second, requests_per_unit: 20}}
  - {key: foo, rate_limit: {unit: minute, requests_per_unit: 10}}
  - {key: zero, rate_limit: {unit: minute, requests_per_unit: 0}}
  - {key: shadow, shadow_mode: true, rate_limit: {unit: minute, requests_per_unit: 1}}
`

// peer is a server under PeerOptions (changed by with) on a clock at *now.
func peer(t *testing.T, now *int64, with func(*Options)) *Server {
	t.Helper()
	s := newServer(t, peerYAML, now)
	o := PeerOptions()
	if with != nil {
		with(&o)
	}
	s.SetOptions(o)
	return s
}

// hits is one descriptor of domain "domain" with its own hits_addend.
func hits(n uint64, kv ...string) *rlcommon.RateLimitDescriptor {
	d := desc(kv...)
	d.HitsAddend = wrapperspb.UInt64(n)
	return d
}

func ask(t *testing.T, s *Server, ds ...*rlcommon.RateLimitDescriptor) *rlsv3.RateLimitResponse {
	t.Helper()
	resp, err := s.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "domain", Descriptors: ds})
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// statuses renders each status as "CODE remaining".
func statuses(resp *rlsv3.RateLimitResponse) string {
	var b strings.Builder
	for i, st := range resp.Statuses {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(st.Code.String())
		if st.CurrentLimit != nil {
			b.WriteString(" " + itoa(int64(st.LimitRemaining)))
		}
	}
	return resp.OverallCode.String() + ": " + b.String()
}

func itoa(n int64) string {
	if n < 0 {
		return "-" + itoa(-n)
	}
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}

type peerStep struct {
	ds   []*rlcommon.RateLimitDescriptor
	want string
}

func runPeer(t *testing.T, s *Server, steps []peerStep) {
	t.Helper()
	for i, st := range steps {
		if got := statuses(ask(t, s, st.ds...)); got != st.want {
			t.Fatalf("step %d: %s; want %s", i, got, st.want)
		}
	}
}

func ds(d ...*rlcommon.RateLimitDescriptor) []*rlcommon.RateLimitDescriptor { return d }

// From test/redis/fixed_cache_impl_test.go TestNearLimit (key7, key8):
// 20 per second, 19 used, 3 more hits are over with remaining 0; and the
// refused hits stay counted (the window refuses even hits_addend 0).
func TestPeerRefusedHitsAreCounted(t *testing.T) {
	now := t0
	s := peer(t, &now, nil)
	runPeer(t, s, []peerStep{
		{ds(hits(16, "key7", "value7")), "OK: OK 4"},
		{ds(hits(3, "key7", "value7")), "OK: OK 1"}, // TestNearLimit key7: 19 of 20, remaining 1
		{ds(hits(3, "key7", "value7")), "OVER_LIMIT: OVER_LIMIT 0"},
		{ds(hits(1, "key7", "value7")), "OVER_LIMIT: OVER_LIMIT 0"}, // sluice's own semantics: OK, 19 used
		{ds(hits(0, "key7", "value7")), "OVER_LIMIT: OVER_LIMIT 0"}, // count 22 > 20
		{ds(hits(20, "key8", "value8")), "OK: OK 0"},
		{ds(hits(0, "key8", "value8")), "OK: OK 0"}, // count 20, not past 20
		{ds(hits(16, "key4", "value4")), "OVER_LIMIT: OVER_LIMIT 0"},
		{ds(hits(0, "key4", "value4")), "OVER_LIMIT: OVER_LIMIT 0"}, // count 16 > 15, right after
	})
	now = t0 + int64(time.Second) // the next window
	runPeer(t, s, []peerStep{{ds(hits(0, "key7", "value7")), "OK: OK 20"}})
}

// From test/redis/fixed_cache_impl_test.go
// TestOverLimitWithStopCacheKeyIncrementWhenOverlimitConfig: with the stop
// setting, when one descriptor would go over, the others are not charged.
func TestPeerStopIncrementWhenOverLimit(t *testing.T) {
	now := t0
	s := peer(t, &now, func(o *Options) { o.StopIncrementWhenOverLimit = true })
	runPeer(t, s, []peerStep{
		{ds(hits(10, "key4", "value4"), hits(10, "key5", "value5")), "OK: OK 5, OK 4"},
		{ds(hits(1, "key4", "value4"), hits(1, "key5", "value5")), "OK: OK 4, OK 3"},
		{ds(hits(2, "key4", "value4"), hits(2, "key5", "value5")), "OK: OK 2, OK 1"},
		{ds(hits(2, "key4", "value4"), hits(2, "key5", "value5")), "OVER_LIMIT: OK 2, OVER_LIMIT 0"},
		// key4 was not charged: 13 of 15 used.
		{ds(hits(2, "key4", "value4")), "OK: OK 0"},
	})
}

// Without the stop setting the peer charges every descriptor (the INCRBY
// of test/redis/fixed_cache_impl_test.go TestRedis for each one): a
// descriptor over its limit does not keep the other from being charged.
func TestPeerChargesDescriptorsOneByOne(t *testing.T) {
	now := t0
	s := peer(t, &now, nil)
	runPeer(t, s, []peerStep{
		{ds(hits(14, "key5", "value5")), "OK: OK 0"},
		{ds(hits(5, "key4", "value4"), hits(1, "key5", "value5")), "OVER_LIMIT: OK 10, OVER_LIMIT 0"},
		{ds(hits(5, "key4", "value4"), hits(1, "key5", "value5")), "OVER_LIMIT: OK 5, OVER_LIMIT 0"},
	})
	// Sluice's own semantics charge neither.
	s.SetOptions(SluiceOptions())
	runPeer(t, s, []peerStep{{ds(hits(5, "key4", "value4"), hits(1, "key5", "value5")), "OVER_LIMIT: OK 5, OVER_LIMIT 0"}})
	runPeer(t, s, []peerStep{{ds(hits(5, "key4", "value4")), "OK: OK 0"}})
}

// From src/utils CalculateReset as test/redis/fixed_cache_impl_test.go
// expects it: whole seconds, unit − now % unit.
func TestPeerWholeSecondReset(t *testing.T) {
	now := t0 + int64(5*time.Second+300*time.Millisecond)
	s := peer(t, &now, nil)
	resp := ask(t, s, desc("foo", "x"), desc("key7", "value7"))
	if d := resp.Statuses[0].DurationUntilReset; d.Seconds != 55 || d.Nanos != 0 {
		t.Fatalf("minute at :05.3: %v, want 55s", d)
	}
	if d := resp.Statuses[1].DurationUntilReset; d.Seconds != 1 || d.Nanos != 0 {
		t.Fatalf("second: %v, want 1s", d)
	}
	s.SetOptions(SluiceOptions())
	if d := ask(t, s, desc("foo", "y")).Statuses[0].DurationUntilReset.AsDuration(); d != 54700*time.Millisecond {
		t.Fatalf("sluice's exact reset: %v, want 54.7s", d)
	}
}

// From test/service/ratelimit_test.go TestServiceWithCustomRatelimitHeaders
// and TestServiceWithDefaultRatelimitHeaders: none unless enabled; then
// the three headers of the descriptor over its limit, reset in seconds.
func TestPeerHeaders(t *testing.T) {
	now := t0 + int64(2*time.Second)
	s := peer(t, &now, nil)
	for i := 0; i < 10; i++ {
		ask(t, s, desc("foo", "bar"))
	}
	if h := ask(t, s, desc("foo", "bar"), desc("hello", "world")).ResponseHeadersToAdd; len(h) != 0 {
		t.Fatalf("headers by default: %v", h)
	}
	s.SetOptions(Options{PerDescriptor: true, WholeSecondReset: true, RulesOnly: true,
		LimitHeaders: &HeaderNames{"A-Ratelimit-Limit", "A-Ratelimit-Remaining", "A-Ratelimit-Reset"}})
	resp := ask(t, s, desc("foo", "bar"), desc("hello", "world"))
	if got, want := statuses(resp)+" "+fmtHeaders(resp), "OVER_LIMIT: OVER_LIMIT 0, OK A-Ratelimit-Limit=10 A-Ratelimit-Remaining=0 A-Ratelimit-Reset=58"; got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	s.SetOptions(Options{PerDescriptor: true, RulesOnly: true, LimitHeaders: &PeerHeaderNames})
	resp = ask(t, s, desc("foo", "other"), desc("key4", "value4"))
	if got, want := fmtHeaders(resp), "RateLimit-Limit=10 RateLimit-Remaining=9 RateLimit-Reset=58"; got != want {
		t.Fatalf("the fewest left: %s, want %s", got, want)
	}
}

func fmtHeaders(resp *rlsv3.RateLimitResponse) string {
	var out []string
	for _, h := range resp.ResponseHeadersToAdd {
		out = append(out, h.Key+"="+h.Value)
	}
	return strings.Join(out, " ")
}

// From test/service/ratelimit_test.go TestServiceGlobalShadowMode and
// TestRuleShadowMode: the overall code is OK, the statuses say what they
// would have.
func TestPeerShadowModes(t *testing.T) {
	now := t0
	s := peer(t, &now, nil)
	runPeer(t, s, []peerStep{
		{ds(desc("shadow", "a")), "OK: OK 0"},
		{ds(desc("shadow", "a")), "OK: OK 0"}, // rule shadow_mode
		{ds(desc("zero", "a")), "OVER_LIMIT: OVER_LIMIT 0"},
		{ds(hits(0, "zero", "a")), "OK: OK 0"},
	})
	s.SetOptions(Options{PerDescriptor: true, RulesOnly: true, GlobalShadowMode: true})
	runPeer(t, s, []peerStep{{ds(desc("zero", "a")), "OK: OVER_LIMIT 0"}})
}

// From test/service/ratelimit_test.go TestInitialLoadError, TestEmptyDomain
// and TestEmptyDescriptors: plain errors (gRPC Unknown); and from
// src/config GetLimit: an unknown domain, a descriptor with no entries,
// and a limit override in a domain with no rules are not limited.
func TestPeerRequestsWithoutLimits(t *testing.T) {
	now := t0
	s := peer(t, &now, nil)
	override := desc("foo", "bar")
	override.Limit = &rlcommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 0, Unit: typeSecond}
	for _, domain := range []string{"unknown", "domain"} {
		resp, err := s.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: domain,
			Descriptors: ds(&rlcommon.RateLimitDescriptor{}, override)})
		if err != nil {
			t.Fatal(err)
		}
		want := "OK: OK, OK"
		if domain == "domain" {
			want = "OVER_LIMIT: OK, OVER_LIMIT 0" // the override counts in a domain with rules
		}
		if got := statuses(resp); got != want {
			t.Fatalf("domain %s: %s, want %s", domain, got, want)
		}
	}
	for _, req := range []*rlsv3.RateLimitRequest{{Domain: "", Descriptors: ds(desc("a", "b"))}, {Domain: "domain"}} {
		if _, err := s.ShouldRateLimit(context.Background(), req); status.Code(err) != codes.Unknown {
			t.Fatalf("%v: %v, want a plain error", req, err)
		}
	}
	s.SetConfig(nil)
	_, err := s.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "domain", Descriptors: ds(desc("foo", "x"))})
	if status.Code(err) != codes.Unknown || status.Convert(err).Message() != "no rate limit configuration loaded" {
		t.Fatalf("no configuration: %v", err)
	}
}

const typeSecond = 1 // envoy.type.v3.RateLimitUnit SECOND

const quotaYAML = `
domain: domain
descriptors:
  - {key: q1, quota_mode: true, rate_limit: {unit: minute, requests_per_unit: 1}}
  - {key: q2, quota_mode: true, rate_limit: {unit: minute, requests_per_unit: 1}}
  - {key: plain, rate_limit: {unit: minute, requests_per_unit: 1}}
`

// From test/service/ratelimit_test.go TestServicePerDescriptorQuotaMode,
// TestServiceQuotaModeOnlySomeOverTheLimit,
// TestServiceQuotaModeOnlyAllOverTheLimit, TestServiceMixedPerDescriptorModes
// and TestServiceGlobalQuotaMode: a quota descriptor over its limit fails
// the request only when every quota descriptor of it is over.
func TestPeerQuotaMode(t *testing.T) {
	now := t0
	if _, err := ParseConfig("q.yaml", []byte(quotaYAML)); err == nil {
		t.Fatal("quota_mode accepted under sluice's own semantics")
	}
	cfg, err := ParseConfigWith("q.yaml", []byte(quotaYAML), LoadOptions{QuotaMode: true})
	if err != nil {
		t.Fatal(err)
	}
	s := newServer(t, "domain: domain\n", &now)
	s.SetConfig(cfg)
	s.SetOptions(PeerOptions())
	runPeer(t, s, []peerStep{
		{ds(desc("q1", "a"), desc("plain", "a")), "OK: OK 0, OK 0"},
		{ds(desc("q1", "a"), desc("q2", "a")), "OK: OVER_LIMIT 0, OK 0"},                 // some quota over
		{ds(desc("q1", "a"), desc("q2", "a")), "OVER_LIMIT: OVER_LIMIT 0, OVER_LIMIT 0"}, // all over
		{ds(desc("q1", "a"), desc("plain", "b")), "OVER_LIMIT: OVER_LIMIT 0, OK 0"},      // the only quota one is over
		{ds(desc("q1", "b"), desc("plain", "a")), "OVER_LIMIT: OK 0, OVER_LIMIT 0"},      // a plain one over
	})
	o := PeerOptions()
	o.GlobalQuotaMode = true
	s.SetOptions(o)
	runPeer(t, s, []peerStep{
		{ds(desc("plain", "a"), desc("plain", "c")), "OK: OVER_LIMIT 0, OK 0"},
		{ds(desc("plain", "a"), desc("plain", "c")), "OVER_LIMIT: OVER_LIMIT 0, OVER_LIMIT 0"},
	})
}

const metadataYAML = `
domain: domain
descriptors:
  - {key: regular, metadata: {name: service_1, nested: {a: 1}}, rate_limit: {unit: minute, requests_per_unit: 10}}
  - {key: quota, quota_mode: true, metadata: {name: service_2, nested: {b: 2}}, rate_limit: {unit: minute, requests_per_unit: 1}}
`

// From test/service/ratelimit_test.go TestMetadataReturnedForPassedDescriptors,
// TestMetadataReturnedForAllPassedDescriptors and
// TestOverlappingMetadataReturnsTheFirstValue: the request in
// dynamic_metadata, with the metadata of the descriptors that passed, the
// first value of a name winning and mappings merged.
func TestPeerDynamicMetadata(t *testing.T) {
	now := t0
	cfg, err := ParseConfigWith("m.yaml", []byte(metadataYAML), LoadOptions{QuotaMode: true})
	if err != nil {
		t.Fatal(err)
	}
	s := newServer(t, "domain: domain\n", &now)
	s.SetConfig(cfg)
	o := PeerOptions()
	o.DynamicMetadata, o.GlobalQuotaMode = true, true // QUOTA_MODE as in the peer's tests
	s.SetOptions(o)
	want := func(resp *rlsv3.RateLimitResponse, metadata string) {
		t.Helper()
		md := resp.DynamicMetadata.AsMap()
		got, _ := json.Marshal(md["metadata"])
		if string(got) != metadata || md["domain"] != "domain" || len(md["descriptors"].([]any)) != 2 {
			t.Fatalf("dynamic_metadata %v; want metadata %s", md, got)
		}
	}
	want(ask(t, s, desc("regular", "x"), desc("quota", "x")), `{"name":"service_1","nested":{"a":1,"b":2}}`)
	resp := ask(t, s, desc("regular", "x"), desc("quota", "x")) // quota over: only regular passed
	if resp.OverallCode != codeOK {
		t.Fatalf("overall %v", resp.OverallCode)
	}
	want(resp, `{"name":"service_1","nested":{"a":1}}`)
	if got, _ := json.Marshal(cfg.domains["domain"].rules["regular"].any.Metadata.AsMap()); string(got) != `{"name":"service_1","nested":{"a":1}}` {
		t.Fatalf("a rule's metadata changed by a merge: %s", got)
	}
	s.SetOptions(PeerOptions())
	if md := ask(t, s, desc("regular", "x")).DynamicMetadata; md != nil {
		t.Fatalf("dynamic_metadata without the setting: %v", md)
	}
}
