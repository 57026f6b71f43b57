package bounds

import (
	"testing"
	"time"
)

func TestMessages(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{Rate.Msg("RATE"), "RATE must be an integer between 1 and 1000000000000"},
		{Wait.Msg("wait_ms"), "wait_ms must be an integer between 0 and 60000"},
		{RequestsPerUnit.Msg("requests_per_unit"), "requests_per_unit must be an integer between 0 and 4294967295"},
		{WindowMsg("PER"), "PER must be second, minute, hour, day, week or a duration such as 250ms, 5m, 1h30m, 7d, between 1ms and 3650d"},
		{OneOfMsg("algo", []string{"a", "b"}), "algo must be one of a, b"},
		{YesNoMsg("RESPONSE_HEADERS"), "RESPONSE_HEADERS must be yes or no"},
	} {
		if c.got != c.want {
			t.Errorf("got  %s\nwant %s", c.got, c.want)
		}
	}
}

func TestRanges(t *testing.T) {
	for _, c := range []struct {
		b  Int
		n  int64
		in bool
	}{{Rate, 0, false}, {Rate, 1, true}, {Rate, MaxRate, true}, {Rate, MaxRate + 1, false}, {Cost, 0, true}, {Cost, -1, false}} {
		if c.b.In(c.n) != c.in {
			t.Errorf("%v.In(%d) = %v", c.b, c.n, !c.in)
		}
	}
}

func TestParseWindow(t *testing.T) {
	for s, want := range map[string]time.Duration{"1ms": time.Millisecond, "minute": time.Minute, "3650d": MaxWindow, "1h30m": 90 * time.Minute} {
		if d, ok := ParseWindow([]byte(s)); !ok || d != want {
			t.Errorf("ParseWindow(%q) = %v, %v; want %v", s, d, ok, want)
		}
	}
	for _, s := range []string{"", "0s", "999us", "3650d1ns", "3651d", "fortnight", "5", "-1s"} {
		if d, ok := ParseWindow([]byte(s)); ok {
			t.Errorf("ParseWindow(%q) = %v, want a refusal", s, d)
		}
	}
}

func TestParseYesNo(t *testing.T) {
	for s, want := range map[string]bool{"yes": true, "YES": true, "1": true, "True": true, "no": false, "0": false, "FALSE": false} {
		if v, ok := ParseYesNo([]byte(s)); !ok || v != want {
			t.Errorf("ParseYesNo(%q) = %v, %v", s, v, ok)
		}
	}
	for _, s := range []string{"", "y", "maybe", "2"} {
		if _, ok := ParseYesNo([]byte(s)); ok {
			t.Errorf("ParseYesNo(%q) accepted", s)
		}
	}
}
