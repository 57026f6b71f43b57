package window

import (
	"testing"
	"time"
)

func TestWindowRoundTrip(t *testing.T) {
	for _, d := range []time.Duration{time.Second, time.Minute, time.Hour, 24 * time.Hour, 7 * 24 * time.Hour,
		250 * time.Millisecond, 90 * time.Minute, 1500 * time.Millisecond, 36 * time.Hour, 3650 * 24 * time.Hour,
		time.Millisecond + 7*time.Microsecond, 61 * time.Second} {
		s := Format(d)
		back, ok := Parse([]byte(s))
		if !ok || back != d {
			t.Errorf("%v → %q → %v %v", d, s, back, ok)
		}
	}
	for s, want := range map[string]time.Duration{"SECOND": time.Second, "weeks": 7 * 24 * time.Hour, "1h30m": 90 * time.Minute,
		"30m1h": 90 * time.Minute, "2w": 14 * 24 * time.Hour, "5µs": 5 * time.Microsecond, "1500ms": 1500 * time.Millisecond} {
		if d, ok := Parse([]byte(s)); !ok || d != want {
			t.Errorf("Parse(%q) = %v %v, want %v", s, d, ok, want)
		}
	}
	for _, s := range []string{"", "1.5s", "-1s", "fortnight", "5", "s", "1x", "99999999999999999999h", "1h30m0.5s"} {
		if d, ok := Parse([]byte(s)); ok {
			t.Errorf("Parse(%q) = %v, want refusal", s, d)
		}
	}
	if got := Format(1500 * time.Millisecond); got != "1s500ms" {
		t.Errorf("Format(1.5s) = %q", got)
	}
}
