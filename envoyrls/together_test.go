package envoyrls

import (
	"context"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/sluice-rl/sluice/testsupport/testlimiter"
)

// TestDescriptorsDescribedFromTheAcquire: the descriptors of a request of
// several are described from the one Acquire that decided them, not from
// a second look at their buckets. The service's clock moves a second at
// every reading, so a look after the acquire would see a later instant
// (a shorter duration_until_reset, a descriptor after another a shorter
// one still); every status must carry the acquire's instant, and each
// request read the clock twice: once for itself, once for its acquire.
func TestDescriptorsDescribedFromTheAcquire(t *testing.T) {
	cfg, err := ParseConfig("test.yaml", []byte(`
domain: d
descriptors:
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: b
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: z
    rate_limit: {unit: minute, requests_per_unit: 0}
`))
	if err != nil {
		t.Fatal(err)
	}
	now, reads := t0+int64(10*time.Second), 0
	svc := testlimiter.New(t, "", 8, func() int64 {
		reads++
		v := now
		now += int64(time.Second)
		return v
	})
	s := NewServer(svc, cfg, nil, 1024)
	const ok, over = rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT
	type st struct {
		code      rlsv3.RateLimitResponse_Code
		remaining uint32
		reset     time.Duration
	}
	for i, step := range []struct {
		name    string
		keys    []string
		overall rlsv3.RateLimitResponse_Code
		want    []st
	}{
		// Request at 0:10, its acquire at 0:11: 49 s left in the window.
		{"admitted", []string{"a", "b"}, ok, []st{{ok, 4, 49 * time.Second}, {ok, 0, 49 * time.Second}}},
		// b refuses at 0:13; a, untouched, would admit on its own.
		{"refused", []string{"a", "b"}, over, []st{{ok, 4, 47 * time.Second}, {over, 0, 47 * time.Second}}},
		// z (requests_per_unit 0) denies: the others are decided as a dry
		// run at 0:15; z's own reset is the request's (0:14).
		{"denied", []string{"a", "b", "z"}, over, []st{{ok, 4, 45 * time.Second}, {over, 0, 45 * time.Second}, {over, 0, 46 * time.Second}}},
	} {
		req := &rlsv3.RateLimitRequest{Domain: "d"}
		for _, k := range step.keys {
			req.Descriptors = append(req.Descriptors, desc(k, "x"))
		}
		reads = 0
		resp, err := s.ShouldRateLimit(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.OverallCode != step.overall {
			t.Errorf("%s: %v, want %v", step.name, resp.OverallCode, step.overall)
		}
		for j, w := range step.want {
			ds := resp.Statuses[j]
			if got := (st{ds.Code, ds.LimitRemaining, ds.DurationUntilReset.AsDuration()}); got != w {
				t.Errorf("%s: descriptor %s: %v remaining %d reset %v; want %v %d %v", step.name, step.keys[j],
					got.code, got.remaining, got.reset, w.code, w.remaining, w.reset)
			}
		}
		if reads != 2 {
			t.Errorf("%s (request %d): the clock was read %d times; want 2 (the request, its one acquire)", step.name, i, reads)
		}
	}
}
