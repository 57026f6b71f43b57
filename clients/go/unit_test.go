package client

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestFormatWindow(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want string
	}{
		{time.Second, "second"},
		{time.Minute, "minute"},
		{time.Hour, "hour"},
		{24 * time.Hour, "day"},
		{250 * time.Millisecond, "250ms"},
		{90 * time.Minute, "1h30m"},
		{1500 * time.Millisecond, "1s500ms"},
		{2 * time.Second, "2s"},
		{5 * time.Minute, "5m"},
		{48 * time.Hour, "2d"},
		{7 * 24 * time.Hour, "7d"},
		{36 * time.Hour, "1d12h"},
		{3650 * 24 * time.Hour, "3650d"},
		{time.Millisecond, "1ms"},
		{1500 * time.Microsecond, "1ms500us"},
		{time.Hour + time.Nanosecond, "1h1ns"},
		{0, "0s"},
		{-time.Second, "-1s"},
	} {
		if got := FormatWindow(c.d); got != c.want {
			t.Errorf("FormatWindow(%v) = %q, want %q", c.d, got, c.want)
		}
		if c.d > 0 {
			if back, err := ParseWindow(c.want); err != nil || back != c.d {
				t.Errorf("ParseWindow(%q) = %v, %v; want %v", c.want, back, err, c.d)
			}
		}
	}
}

func TestParseWindow(t *testing.T) {
	for _, c := range []struct {
		s    string
		want time.Duration
	}{
		{"second", time.Second}, {"Minute", time.Minute}, {"hours", time.Hour}, {"day", 24 * time.Hour},
		{"week", 7 * 24 * time.Hour}, {"2w", 14 * 24 * time.Hour}, {"7d", 7 * 24 * time.Hour},
		{"1h30m", 90 * time.Minute}, {"1h30m0s", 90 * time.Minute}, {"1s500ms", 1500 * time.Millisecond},
		{"250ms", 250 * time.Millisecond}, {"3µs", 3 * time.Microsecond},
	} {
		if got, err := ParseWindow(c.s); err != nil || got != c.want {
			t.Errorf("ParseWindow(%q) = %v, %v; want %v", c.s, got, err, c.want)
		}
	}
	for _, s := range []string{"", "0s", "-1s", "1.5s", "fortnight", "1x", "99999999999999999999d", "ms"} {
		if d, err := ParseWindow(s); err == nil {
			t.Errorf("ParseWindow(%q) = %v, want an error", s, d)
		}
	}
	_, err := ParseWindow("fortnight")
	if want := `client: window "fortnight" is not second, minute, hour, day, week or a duration such as 250ms, 1h30m, 7d`; err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
}

func TestCallArgs(t *testing.T) {
	for _, c := range []struct {
		cmd  string
		lim  *Limit
		peek bool
		opts []Option
		want string
		err  string
	}{
		{"RL.ACQUIRE", nil, false, nil, "[RL.ACQUIRE p]", ""},
		{"RL.ACQUIRE", nil, false, []Option{Key("u1"), Cost(3), Wait(1500 * time.Microsecond), DryRun()}, "[RL.ACQUIRE p KEY u1 COST 3 WAIT 2 DRYRUN]", ""},
		{"RL.ACQUIRE", nil, false, []Option{Wait(time.Millisecond)}, "[RL.ACQUIRE p WAIT 1]", ""},
		{"RL.ACQUIRE", nil, false, []Option{Wait(time.Nanosecond)}, "[RL.ACQUIRE p WAIT 1]", ""},
		{"RL.ACQUIRE", nil, false, []Option{Wait(0)}, "[RL.ACQUIRE p WAIT 0]", ""},
		{"RL.ACQUIRE", nil, false, []Option{Wait(-time.Millisecond)}, "", "client: Wait must not be negative, got -1ms"},
		{"RL.ACQUIRE", &Limit{Rate: 10}, false, nil, "[RL.ACQUIRE p RATE 10]", ""},
		{"RL.ACQUIRE", &Limit{Rate: 10, Per: time.Minute, Burst: 20, Algo: "gcra"}, false, []Option{Cost(2)},
			"[RL.ACQUIRE p RATE 10 PER minute BURST 20 ALGO gcra COST 2]", ""},
		{"RL.ACQUIRE", &Limit{Rate: 10, Burst: -1}, false, nil, "", "client: Limit.Burst must be positive (0 means Rate), got -1"},
		{"RL.PEEK", nil, true, []Option{Key("u"), Cost(0)}, "[RL.PEEK p KEY u COST 0]", ""},
		{"RL.PEEK", nil, true, []Option{Wait(time.Second)}, "", "client: RL.PEEK takes no Wait or DryRun option: it never consumes"},
	} {
		var o callOpts
		for _, f := range c.opts {
			f(&o)
		}
		err := o.check(c.cmd, c.lim, c.peek)
		var a []any
		if err == nil {
			a = callArgs(c.cmd, "p", c.lim, &o)
		}
		if c.err != "" {
			if err == nil || err.Error() != c.err {
				t.Errorf("%s %v: error %v, want %q", c.cmd, c.lim, err, c.err)
			}
			continue
		}
		if err != nil || fmt.Sprint(a) != c.want {
			t.Errorf("%s %v: %v %v, want %s", c.cmd, c.lim, a, err, c.want)
		}
	}
}

func TestParseDecision(t *testing.T) {
	d, err := parseDecision("RL.ACQUIRE", []any{int64(2), int64(0), int64(5), int64(1200), int64(3001), "a#b"})
	want := Decision{Allowed: true, Degraded: true, Limit: 5, RetryAfter: 1200 * time.Millisecond, ResetAfter: 3001 * time.Millisecond, LimitedBy: "a#b"}
	if err != nil || !reflect.DeepEqual(d, want) {
		t.Fatalf("%+v %v", d, err)
	}
	d, _ = parseDecision("RL.ACQUIRE", []any{int64(0), int64(0), int64(5), int64(-1), int64(0), "a"})
	if d.Allowed || d.RetryAfter != Never {
		t.Fatalf("never: %+v", d)
	}
	for _, bad := range []any{"OK", []any{int64(1)}, []any{int64(3), int64(0), int64(0), int64(0), int64(0), "a"},
		[]any{int64(1), "x", int64(0), int64(0), int64(0), "a"}, []any{int64(1), int64(0), int64(0), int64(0), int64(0), int64(9)}} {
		if _, err := parseDecision("RL.ACQUIRE", bad); err == nil {
			t.Errorf("parseDecision(%v): no error", bad)
		}
	}
}

var bg = context.Background()

// Every go-redis client is a Doer.
var (
	_ Doer = (*redis.Client)(nil)
	_ Doer = (*redis.ClusterClient)(nil)
	_ Doer = (*redis.Ring)(nil)
	_ Doer = redis.UniversalClient(nil)
	_ Doer = redis.Pipeliner(nil)
)
