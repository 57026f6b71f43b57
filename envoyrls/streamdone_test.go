package envoyrls

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// streamDoneYAML is the rule of a token-per-minute limit whose costs come
// from Envoy's apply_on_stream_done: a check of hits_addend 0 when the
// request arrives, the tokens used when its response is done.
const streamDoneYAML = `
domain: llm
descriptors:
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 1000, algorithm: token_bucket, apply_on_stream_done: true}
  - key: window
    rate_limit: {unit: minute, requests_per_unit: 1000, apply_on_stream_done: true}
`

// tokens is one descriptor of key=value with its own hits_addend.
func tokens(key, value string, hits uint64) *rlcommon.RateLimitDescriptor {
	d := desc(key, value)
	d.HitsAddend = wrapperspb.UInt64(hits)
	return d
}

// TestApplyOnStreamDone: a rule with apply_on_stream_done charges every
// cost and refuses none; the request-time check (hits_addend 0) is refused
// while the charges left the limit in debt, and admitted again once it
// has refilled. Without the key the same cost past what is left is
// refused and charges nothing.
func TestApplyOnStreamDone(t *testing.T) {
	now := t0
	s := newServer(t, streamDoneYAML, &now)
	call := func(d *rlcommon.RateLimitDescriptor) *rlsv3.RateLimitResponse_DescriptorStatus {
		t.Helper()
		resp, err := s.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "llm", Descriptors: []*rlcommon.RateLimitDescriptor{d}})
		if err != nil {
			t.Fatal(err)
		}
		if resp.OverallCode != resp.Statuses[0].Code {
			t.Fatalf("overall %v, descriptor %v", resp.OverallCode, resp.Statuses[0].Code)
		}
		return resp.Statuses[0]
	}
	expect := func(what string, st *rlsv3.RateLimitResponse_DescriptorStatus, code rlsv3.RateLimitResponse_Code, remaining uint32) {
		t.Helper()
		if st.Code != code || st.LimitRemaining != remaining {
			t.Fatalf("%s: %v with %d remaining, want %v with %d", what, st.Code, st.LimitRemaining, code, remaining)
		}
	}
	expect("check before the first call", call(tokens("tenant", "acme", 0)), rlsv3.RateLimitResponse_OK, 1000)
	expect("800 tokens used", call(tokens("tenant", "acme", 800)), rlsv3.RateLimitResponse_OK, 200)
	expect("check with 200 left", call(tokens("tenant", "acme", 0)), rlsv3.RateLimitResponse_OK, 200)
	// 700 more than the 200 left: charged all the same, 500 in debt.
	expect("700 tokens used past the limit", call(tokens("tenant", "acme", 700)), rlsv3.RateLimitResponse_OK, 0)
	expect("check in debt", call(tokens("tenant", "acme", 0)), rlsv3.RateLimitResponse_OVER_LIMIT, 0)
	// 1000 a minute: the 500 of debt refill in 30 s; 36 s leave 100.
	now += int64(29 * time.Second)
	expect("check after 29 s, 17 tokens of debt left", call(tokens("tenant", "acme", 0)), rlsv3.RateLimitResponse_OVER_LIMIT, 0)
	now += int64(7 * time.Second)
	expect("check after 36 s", call(tokens("tenant", "acme", 0)), rlsv3.RateLimitResponse_OK, 100)
	// Other tenants are untouched.
	expect("another tenant", call(tokens("tenant", "globex", 0)), rlsv3.RateLimitResponse_OK, 1000)

	// A fixed window: charged past its limit, refused until the window ends.
	now = t0
	expect("window: 1500 used", call(tokens("window", "acme", 1500)), rlsv3.RateLimitResponse_OK, 0)
	expect("window: check", call(tokens("window", "acme", 0)), rlsv3.RateLimitResponse_OVER_LIMIT, 0)
	now = t0 + int64(time.Minute)
	expect("window: the next minute", call(tokens("window", "acme", 0)), rlsv3.RateLimitResponse_OK, 1000)

	// Without the key, a cost past what is left is refused and charges
	// nothing.
	now = t0
	plain := newServer(t, `
domain: llm
descriptors:
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 1000, algorithm: token_bucket}
`, &now)
	s = plain
	expect("plain: 800", call(tokens("tenant", "acme", 800)), rlsv3.RateLimitResponse_OK, 200)
	expect("plain: 700 refused", call(tokens("tenant", "acme", 700)), rlsv3.RateLimitResponse_OVER_LIMIT, 200)
	expect("plain: check", call(tokens("tenant", "acme", 0)), rlsv3.RateLimitResponse_OK, 200)
}

// TestApplyOnStreamDoneAsThePeer: run as envoyproxy/ratelimit (every hit
// counted, descriptors charged one by one), a cost past the limit is
// counted and answered OK, and the next check of the window is refused.
func TestApplyOnStreamDoneAsThePeer(t *testing.T) {
	now := t0
	s := newServer(t, streamDoneYAML, &now)
	s.SetOptions(Options{PerDescriptor: true, RulesOnly: true})
	call := func(hits uint64) rlsv3.RateLimitResponse_Code {
		t.Helper()
		resp, err := s.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "llm", Descriptors: []*rlcommon.RateLimitDescriptor{tokens("window", "acme", hits)}})
		if err != nil {
			t.Fatal(err)
		}
		return resp.OverallCode
	}
	if got := call(1500); got != rlsv3.RateLimitResponse_OK {
		t.Fatalf("1500 tokens used of 1000: %v, want OK (counted, never refused)", got)
	}
	if got := call(0); got != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("the check after: %v, want OVER_LIMIT", got)
	}
}

// TestCustomPeriods: a rule's unit may be a duration (sluice's extension):
// a fixed window of that length, reported to Envoy as UNKNOWN unless it is
// one of Envoy's units; run as the peer, its refused hits are remembered
// for the same window.
func TestCustomPeriods(t *testing.T) {
	now := t0
	yaml := `
domain: d
descriptors:
  - key: ten
    rate_limit: {unit: 10s, requests_per_unit: 2}
  - key: hour
    rate_limit: {unit: 60m, requests_per_unit: 1}
`
	for _, peerMode := range []bool{false, true} {
		s := newServer(t, yaml, &now)
		if peerMode {
			s.SetOptions(PeerOptions())
		}
		call := func(k string, hits uint64) *rlsv3.RateLimitResponse_DescriptorStatus {
			t.Helper()
			resp, err := s.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*rlcommon.RateLimitDescriptor{tokens(k, "x", hits)}})
			if err != nil {
				t.Fatal(err)
			}
			return resp.Statuses[0]
		}
		now = t0 + int64(3*time.Second)
		if st := call("ten", 1); st.Code != rlsv3.RateLimitResponse_OK || st.CurrentLimit.Unit != rlsv3.RateLimitResponse_RateLimit_UNKNOWN || st.CurrentLimit.RequestsPerUnit != 2 {
			t.Fatalf("peer %v: first of a 10 s window: %v", peerMode, st)
		}
		call("ten", 1)
		if st := call("ten", 1); st.Code != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("peer %v: third in the window: %v", peerMode, st)
		}
		if st := call("ten", 0); peerMode && st.Code != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("peer: the window counted the refused hit: %v", st)
		}
		now = t0 + int64(10*time.Second) // the next window
		if st := call("ten", 1); st.Code != rlsv3.RateLimitResponse_OK {
			t.Fatalf("peer %v: the next 10 s window: %v", peerMode, st)
		}
		if st := call("hour", 1); st.CurrentLimit.Unit != rlsv3.RateLimitResponse_RateLimit_HOUR {
			t.Fatalf("peer %v: 60m is Envoy's HOUR: %v", peerMode, st)
		}
	}
}

// TestChangedLimitKeepsTheCount: when a rule's limit changes (a file
// edited, an xDS push), a window keeps its count, as the peer's counter
// does: 3 of 3 used this hour, raised to 5, admits 2 more at once;
// lowered to 2 with 4 used, refuses; raised back to 5, admits 1.
func TestChangedLimitKeepsTheCount(t *testing.T) {
	now := t0
	rules := func(n int) *Config {
		cfg, err := ParseConfig("r.yaml", []byte(fmt.Sprintf("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: %d}\n", n)))
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	for _, peerMode := range []bool{false, true} {
		s := newServer(t, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 3}\n", &now)
		if peerMode {
			s.SetOptions(PeerOptions())
		}
		codes := func(n int) string {
			t.Helper()
			var out []string
			for i := 0; i < n; i++ {
				resp, err := s.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*rlcommon.RateLimitDescriptor{desc("k", "x")}})
				if err != nil {
					t.Fatal(err)
				}
				out = append(out, resp.OverallCode.String())
			}
			return strings.Join(out, " ")
		}
		if got := codes(3); got != "OK OK OK" {
			t.Fatalf("peer %v: 3 of 3: %s", peerMode, got)
		}
		s.SetConfig(rules(5))
		if got := codes(3); got != "OK OK OVER_LIMIT" {
			t.Fatalf("peer %v: raised to 5 with 3 used: %s, want OK OK OVER_LIMIT", peerMode, got)
		}
		if !peerMode {
			s.SetConfig(rules(2))
			if got := codes(1); got != "OVER_LIMIT" {
				t.Fatalf("lowered to 2 with 5 used: %s", got)
			}
			s.SetConfig(rules(6))
			if got := codes(2); got != "OK OVER_LIMIT" {
				t.Fatalf("raised to 6 with 5 used: %s, want OK OVER_LIMIT", got)
			}
		}
		now += int64(time.Hour) // the next window: a fresh count
		if got := codes(1); got != "OK" {
			t.Fatalf("peer %v: the next hour: %s", peerMode, got)
		}
	}
}

// TestCalendarUnits: with timezone (sluice's extension), a day is the
// zone's calendar day and a month its calendar month, counted as a
// calendar quota; the reset is the time to the period's end there. Run as
// the peer, refused hits are remembered for the same period.
func TestCalendarUnits(t *testing.T) {
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Fatal(err)
	}
	yaml := `
domain: d
descriptors:
  - key: daily
    rate_limit: {unit: day, requests_per_unit: 2, timezone: Europe/Paris}
  - key: monthly
    rate_limit: {unit: month, requests_per_unit: 1, timezone: Europe/Paris}
`
	for _, peerMode := range []bool{false, true} {
		// 23:30 in Paris on 31 March 2027 (CEST, UTC+2).
		now := time.Date(2027, 3, 31, 23, 30, 0, 0, paris).UnixNano()
		s := newServer(t, yaml, &now)
		if peerMode {
			s.SetOptions(PeerOptions())
		}
		call := func(k string) *rlsv3.RateLimitResponse_DescriptorStatus {
			t.Helper()
			resp, err := s.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*rlcommon.RateLimitDescriptor{desc(k, "x")}})
			if err != nil {
				t.Fatal(err)
			}
			return resp.Statuses[0]
		}
		st := call("daily")
		if st.Code != rlsv3.RateLimitResponse_OK || st.CurrentLimit.Unit != rlsv3.RateLimitResponse_RateLimit_DAY || st.LimitRemaining != 1 {
			t.Fatalf("peer %v: first of the day: %v", peerMode, st)
		}
		// Thirty minutes to Paris' midnight (not UTC's, two hours later).
		if d := st.DurationUntilReset.AsDuration(); d != 30*time.Minute {
			t.Fatalf("peer %v: reset in %v, want 30m (Paris midnight)", peerMode, d)
		}
		call("daily")
		if st := call("daily"); st.Code != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("peer %v: third of the day: %v", peerMode, st)
		}
		if st := call("monthly"); st.Code != rlsv3.RateLimitResponse_OK {
			t.Fatalf("peer %v: first of the month: %v", peerMode, st)
		}
		if st := call("monthly"); st.Code != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("peer %v: second of the month: %v", peerMode, st)
		}
		// 00:10 in Paris on 1 April: a new day and a new month there,
		// while UTC is still on 31 March.
		now = time.Date(2027, 4, 1, 0, 10, 0, 0, paris).UnixNano()
		if st := call("daily"); st.Code != rlsv3.RateLimitResponse_OK {
			t.Fatalf("peer %v: a new Paris day: %v", peerMode, st)
		}
		if st := call("monthly"); st.Code != rlsv3.RateLimitResponse_OK {
			t.Fatalf("peer %v: a new Paris month: %v", peerMode, st)
		}
	}
}

// TestCalendarUnitErrors: timezone goes with calendar units only.
func TestCalendarUnitErrors(t *testing.T) {
	for in, want := range map[string]string{
		"{unit: minute, requests_per_unit: 1, timezone: UTC}":                          "timezone needs a unit of hour, day, week, month or year",
		"{unit: day, requests_per_unit: 1, timezone: Mars/Olympus}":                    "invalid timezone 'Mars/Olympus'",
		"{unit: day, requests_per_unit: 1, timezone: UTC, algorithm: token_bucket}":    "takes no algorithm or burst",
		"{unit: day, requests_per_unit: 1, timezone: UTC, apply_on_stream_done: true}": "do not go together",
	} {
		_, err := ParseConfig("c.yaml", []byte("domain: d\ndescriptors:\n  - key: a\n    rate_limit: "+in+"\n"))
		if err == nil || !strings.Contains(err.Error(), want) || !strings.HasPrefix(err.Error(), "c.yaml:4: ") {
			t.Errorf("%s: %v, want c.yaml:4: …%s…", in, err, want)
		}
	}
}
