package main

import (
	"math"
	"strconv"
	"testing"
	"time"
)

// epoch is a start on a whole second (and a whole day) of Unix time, so
// that window algorithms' windows line up with the timeline.
var epoch = time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC).UnixNano()

// steady returns n calls, one every step from 0, replied to at once.
func steady(n int, step time.Duration) []call {
	out := make([]call, n)
	for i := range out {
		t := int64(i) * int64(step)
		out[i] = call{sent: t, recv: t}
	}
	return out
}

// over returns calls at perSec for d from 0.
func over(perSec int, d time.Duration) []call {
	return steady(int(int64(perSec)*int64(d)/int64(time.Second)), time.Second/time.Duration(perSec))
}

func mustSim(t *testing.T, s *scenario, rate int64) (simulator, int64) {
	t.Helper()
	sim, burst, err := s.newSimulator(rate, "k")
	if err != nil {
		t.Fatal(err)
	}
	return sim, burst
}

func TestIdealContinuousUnderSteadyOverload(t *testing.T) {
	// Under steady overload the GCRA family admits the burst at once and
	// then one call per emission interval: burst + rate × span, where the
	// last call comes one step before the end of 10 s.
	for _, tc := range []struct {
		algo  string
		burst int64
	}{
		{"", 0}, {"token_bucket", 10}, {"gcra", 1000}, {"gcra", 10}, {"leaky_bucket", 10}, {"leaky_bucket", 1000},
	} {
		s := &scenario{name: "t", algo: tc.algo, burst: tc.burst}
		sim, burst := mustSim(t, s, 1000)
		want := int64(1000)
		if tc.burst > 0 {
			want = tc.burst
		}
		if burst != want {
			t.Errorf("%s burst %d: allowance %d, want %d", tc.algo, tc.burst, burst, want)
		}
		calls := over(3000, 10*time.Second) // the last at 9.999666666 s
		got := idealAdmitted(sim, epoch, calls)
		if want := burst + 9999; got != want {
			t.Errorf("%s burst %d: ideal %d, want burst + 9999 = %d", tc.algo, tc.burst, got, want)
		}
	}
}

func TestIdealBelowTheLimitAdmitsEverything(t *testing.T) {
	sim, _ := mustSim(t, &scenario{name: "t", burst: 10}, 1000)
	calls := over(900, 5*time.Second)
	if got := idealAdmitted(sim, epoch, calls); got != int64(len(calls)) {
		t.Errorf("ideal %d of %d calls at 90 %% of the limit", got, len(calls))
	}
}

func TestIdealGapsLoseRefillBeyondTheBurst(t *testing.T) {
	// BURST 10 at 1000/s: a 100 ms pause refills only 10 tokens, not 100.
	sim, _ := mustSim(t, &scenario{name: "t", burst: 10}, 1000)
	var calls []call
	for _, start := range []time.Duration{0, 200 * time.Millisecond} {
		for _, c := range over(3000, 100*time.Millisecond) {
			c.sent += int64(start)
			c.recv = c.sent
			calls = append(calls, c)
		}
	}
	// Each 100 ms stretch: the 10 of the burst, then one a millisecond
	// (99 more in 99.67 ms).
	if got := idealAdmitted(sim, epoch, calls); got != 2*(10+99) {
		t.Errorf("ideal %d, want %d", got, 2*(10+99))
	}
}

func TestIdealFixedWindowFollowsTheEpoch(t *testing.T) {
	// 10 per second, windows on whole Unix seconds. 3 s of dense calls
	// starting on a whole second cover 3 windows; starting half-way into
	// one they touch 4.
	sim, burst := mustSim(t, &scenario{name: "t", algo: "fixed_window"}, 10)
	if burst != 10 {
		t.Errorf("allowance %d, want RATE 10", burst)
	}
	if got := idealAdmitted(sim, epoch, over(100, 3*time.Second)); got != 30 {
		t.Errorf("aligned: ideal %d, want 30", got)
	}
	sim, _ = mustSim(t, &scenario{name: "t", algo: "fixed_window"}, 10)
	if got := idealAdmitted(sim, epoch+int64(500*time.Millisecond), over(100, 3*time.Second)); got != 40 {
		t.Errorf("half a window off: ideal %d, want 40", got)
	}
}

func TestIdealSlidingWindowMatchesTheEstimate(t *testing.T) {
	// The two-counter estimate, computed here in floating point: admit when
	// prev × (1 − e) + cur + 1 ≤ rate.
	const rate = 50
	sim, _ := mustSim(t, &scenario{name: "t", algo: "sliding_window"}, rate)
	calls := over(400, 4*time.Second)
	var want int64
	k, prev, cur := int64(-1), 0.0, 0.0
	for _, c := range calls {
		now := epoch + c.at()
		w := now / int64(time.Second)
		if w != k {
			if w == k+1 {
				prev = cur
			} else {
				prev = 0
			}
			cur, k = 0, w
		}
		e := float64(now%int64(time.Second)) / float64(time.Second)
		if prev*(1-e)+cur+1 <= rate+1e-9 {
			cur++
			want++
		}
	}
	if got := idealAdmitted(sim, epoch, calls); got != want {
		t.Errorf("ideal %d, want %d", got, want)
	}
}

func TestIdealQuotaIsMinOfCallsAndQuota(t *testing.T) {
	for _, tc := range []struct{ quota, calls, want int64 }{
		{100, 3000, 100}, {100, 60, 60}, {5000, 3000, 3000}, {5000, 30000, 5000},
	} {
		sim, burst := mustSim(t, &scenario{name: "q", kind: inlineQuota, quota: tc.quota}, 1000)
		if burst != 0 {
			t.Errorf("quota %d: allowance %d, want 0 (a quota alone has no bucket)", tc.quota, burst)
		}
		calls := steady(int(tc.calls), time.Millisecond/3)
		if got := idealAdmitted(sim, epoch, calls); got != tc.want {
			t.Errorf("quota %d, %d calls: ideal %d, want %d", tc.quota, tc.calls, got, tc.want)
		}
	}
}

func TestIdealQuotaStartsAgainAtMidnightUTC(t *testing.T) {
	sim, _ := mustSim(t, &scenario{name: "q", kind: inlineQuota, quota: 100}, 1000)
	// 2 s of calls at 1000/s, the first second before midnight.
	start := epoch - int64(time.Second)
	if got := idealAdmitted(sim, start, over(1000, 2*time.Second)); got != 200 {
		t.Errorf("ideal %d, want 100 per day, 200", got)
	}
}

func TestIdealBudgetEnforcingParent(t *testing.T) {
	// budget-3level: the system's 1000/s binds (partner 2000, tenant 4000).
	sim, burst := mustSim(t, &scenario{name: "b", kind: budgetTree}, 1000)
	if burst != 1000 {
		t.Errorf("allowance %d, want the system's burst 1000", burst)
	}
	if got := idealAdmitted(sim, epoch, over(3000, 10*time.Second)); got != 1000+9999 {
		t.Errorf("ideal %d, want %d", got, 1000+9999)
	}
}

func TestIdealBudgetEveryLevelMustAdmit(t *testing.T) {
	// The tightest level decides, whichever it is, and its burst is the
	// allowance.
	for _, tc := range []struct {
		name  string
		setup [][]string
		burst int64
		want  int64
	}{
		{"tenant tightest", [][]string{
			{"RL.BUDGET", "SET", "system", "RATE", "1000", "SHARING", "enforce"},
			{"RL.BUDGET", "SET", "system/partner", "RATE", "1000", "SHARING", "enforce"},
			{"RL.BUDGET", "SET", budgetPath, "RATE", "100", "BURST", "5", "SCOPE", "user"},
		}, 5, 5 + 99},
		{"partner tightest", [][]string{
			{"RL.BUDGET", "SET", "system", "RATE", "1000", "SHARING", "enforce"},
			{"RL.BUDGET", "SET", "system/partner", "RATE", "200", "BURST", "20", "SHARING", "enforce"},
			{"RL.BUDGET", "SET", budgetPath, "RATE", "1000", "SCOPE", "user"},
		}, 20, 20 + 199},
	} {
		sim, burst, err := newBudgetSim(tc.setup)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if burst != tc.burst {
			t.Errorf("%s: allowance %d, want %d", tc.name, burst, tc.burst)
		}
		if got := idealAdmitted(sim, epoch, over(3000, time.Second)); got != tc.want {
			t.Errorf("%s: ideal %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestBudgetSetupErrors(t *testing.T) {
	for _, setup := range [][][]string{
		{{"RL.BUDGET", "GET", "system"}},
		{{"RL.BUDGET", "SET", "system", "RATE", "0"}},
		{{"RL.BUDGET", "SET", "other", "RATE", "10"}},
	} {
		if _, _, err := newBudgetSim(setup); err == nil {
			t.Errorf("%q: no error", setup)
		}
	}
}

func TestSortCallsByMidpointKeepsTies(t *testing.T) {
	calls := []call{
		{sent: 10, recv: 30, ok: true}, // at 20
		{sent: 0, recv: 10},            // at 5
		{sent: 20, recv: 20},           // at 20, after the first
		{sent: 0, recv: 3},             // at 1
	}
	sortCalls(calls)
	var got []int64
	for _, c := range calls {
		got = append(got, c.at())
	}
	want := []int64{1, 5, 20, 20}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("times %v, want %v", got, want)
		}
	}
	if !calls[2].ok || calls[3].ok {
		t.Errorf("calls at the same time changed order: %+v", calls)
	}
}

func TestJudge(t *testing.T) {
	for _, tc := range []struct {
		admitted, ideal, burst int64
		why                    string
	}{
		{1000, 1000, 0, "ok"},
		{1010, 1000, 0, "ok"},   // +1 % exactly
		{1011, 1000, 0, "over"}, // beyond +1 %
		{1110, 1000, 100, "ok"}, // one burst, then +1 %
		{1111, 1000, 100, "over"},
		{980, 1000, 100, "ok"}, // −2 % exactly
		{979, 1000, 100, "under"},
		{0, 0, 0, "ok"},
		{10, 0, 10, "ok"},
		{11, 0, 10, "over"},
	} {
		v := judge(tc.admitted, tc.ideal, tc.burst)
		if v.why != tc.why || v.ok != (tc.why == "ok") || v.overOK() != (tc.why != "over") {
			t.Errorf("judge(%d, %d, %d) = %+v, want %s", tc.admitted, tc.ideal, tc.burst, v, tc.why)
		}
	}
	v := judge(1050, 1000, 30)
	if math.Abs(v.ratio-0.05) > 1e-12 || math.Abs(v.over-0.02) > 1e-12 {
		t.Errorf("judge(1050, 1000, 30): ratio %v over %v, want 0.05 and 0.02", v.ratio, v.over)
	}
	if v := judge(5, 0, 10); !math.IsNaN(v.ratio) || pct(v.ratio) != "n/a" {
		t.Errorf("ideal 0: ratio %v (%s), want NaN (n/a)", v.ratio, pct(v.ratio))
	}
}

func TestEveryScenarioSimulates(t *testing.T) {
	seen := map[string]bool{}
	for i := range scenarios {
		s := &scenarios[i]
		if seen[s.name] {
			t.Errorf("scenario %s listed twice", s.name)
		}
		seen[s.name] = true
		sim, burst := mustSim(t, s, 1000)
		calls := over(3000, 200*time.Millisecond)
		got := idealAdmitted(sim, epoch, calls)
		if got <= 0 || got > int64(len(calls)) {
			t.Errorf("%s: ideal %d of %d calls", s.name, got, len(calls))
		}
		if burst < 0 || (s.kind != inlineQuota && burst == 0) {
			t.Errorf("%s: allowance %d", s.name, burst)
		}
		if cmd := s.command(1000, "k"); cmd[0] != "RL.ACQUIRE" {
			t.Errorf("%s: command %q", s.name, cmd)
		}
	}
	for _, name := range []string{"even", "saturating", "rotate-150ms", "rotate-5s", "pulse", "one-node",
		"small-burst", "large-burst", "quota-100-day", "quota-5000-day", "budget-3level"} {
		if !seen[name] {
			t.Errorf("no scenario %s", name)
		}
	}
	for _, a := range []string{"token_bucket", "gcra", "leaky_bucket", "fixed_window", "sliding_window"} {
		if !seen["algo-"+a] {
			t.Errorf("no scenario algo-%s", a)
		}
	}
}

func TestCommands(t *testing.T) {
	for _, tc := range []struct {
		name string
		want string
	}{
		{"even", "RL.ACQUIRE k RATE 1000"},
		{"small-burst", "RL.ACQUIRE k RATE 1000 BURST 10"},
		{"algo-sliding_window", "RL.ACQUIRE k RATE 1000 ALGO sliding_window"},
		{"quota-100-day", "RL.ACQUIRE k QUOTA 100 PER day"},
		{"budget-3level", "RL.ACQUIRE system/partner/tenant KEY u1"},
	} {
		s, ok := findScenario(tc.name)
		if !ok {
			t.Fatalf("no scenario %s", tc.name)
		}
		got := ""
		for i, a := range s.command(1000, "k") {
			if i > 0 {
				got += " "
			}
			got += a
		}
		if got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
	b, _ := findScenario("budget-3level")
	setup := b.setup(1000)
	if len(setup) != 3 || setup[0][4] != strconv.Itoa(1000) || setup[2][2] != budgetPath {
		t.Errorf("budget setup %q", setup)
	}
}
