package ratehdr

import (
	"strings"
	"testing"
	"time"
)

func TestEach(t *testing.T) {
	for _, tc := range []struct {
		limit, remaining int64
		degraded         bool
		reset, window    time.Duration
		want             string
	}{
		{100, 47, false, 1500 * time.Millisecond, time.Minute,
			`RateLimit-Policy: "burst";q=100;w=60|RateLimit: "burst";r=47;t=2|X-RateLimit-Limit: 100|X-RateLimit-Remaining: 47|X-RateLimit-Reset: 2`},
		{5, 3, true, 0, 0, `RateLimit: "burst";r=0;t=0|X-RateLimit-Limit: 5|X-RateLimit-Remaining: 0|X-RateLimit-Reset: 0`},
		{5, 1, false, time.Second, 250 * time.Millisecond, `RateLimit-Policy: "burst";q=5;w=1|RateLimit: "burst";r=1;t=1|X-RateLimit-Limit: 5|X-RateLimit-Remaining: 1|X-RateLimit-Reset: 1`},
		{-1, -1, false, 0, time.Second, ``},
	} {
		var got []string
		Each(tc.limit, tc.remaining, tc.degraded, tc.reset, tc.window, func(n, v string) { got = append(got, n+": "+v) })
		if g := strings.Join(got, "|"); g != tc.want {
			t.Errorf("%+v:\n got %s\nwant %s", tc, g, tc.want)
		}
	}
	for d, want := range map[time.Duration]string{-1: "", 0: "0", time.Millisecond: "1", 2 * time.Second: "2"} {
		if v, ok := RetryAfter(d); v != want || ok != (d >= 0) {
			t.Errorf("RetryAfter(%v) = %q %v", d, v, ok)
		}
	}
}
