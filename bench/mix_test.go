package main

import (
	"strings"
	"testing"
)

func TestParseMix(t *testing.T) {
	cases := []struct {
		in   string
		want Mix
	}{
		{"acquire=100", Mix{kindAcquire: 100}},
		{"acquire=90,throttle=5,budget=5,budget-write=0", Mix{kindAcquire: 90, kindThrottle: 5, kindBudget: 5}},
		{" budget-write = 1 , incr=2,evalsha=3", Mix{kindBudgetWrite: 1, kindIncr: 2, kindEvalSHA: 3}},
	}
	for _, tc := range cases {
		got, err := parseMix(tc.in)
		if err != nil {
			t.Errorf("%q: %v", tc.in, err)
			continue
		}
		if got != tc.want {
			t.Errorf("%q: got %v, want %v", tc.in, got, tc.want)
		}
		// String gives back a form parseMix reads to the same mix.
		again, err := parseMix(got.String())
		if err != nil || again != got {
			t.Errorf("%q: String %q parses to %v, %v", tc.in, got.String(), again, err)
		}
	}
}

func TestParseMixErrors(t *testing.T) {
	cases := []struct{ in, want string }{
		{"", "not kind=weight"},
		{"acquire", "not kind=weight"},
		{"acquire=1,", "not kind=weight"},
		{"fetch=1", `unknown kind "fetch"`},
		{"acquire=1,acquire=2", "acquire appears twice"},
		{"acquire=-1", "weight of acquire must be an integer between 0 and 1000000"},
		{"acquire=1000001", "between 0 and 1000000"},
		{"acquire=1.5", "between 0 and 1000000"},
		{"acquire=0,throttle=0", "at least one kind a positive weight"},
	}
	for _, tc := range cases {
		_, err := parseMix(tc.in)
		if err == nil {
			t.Errorf("%q: no error", tc.in)
			continue
		}
		if !strings.HasPrefix(err.Error(), "--mix: ") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %q, want --mix: …%s…", tc.in, err, tc.want)
		}
	}
}

func TestPickerProportions(t *testing.T) {
	m := Mix{kindAcquire: 90, kindThrottle: 5, kindBudget: 5}
	p := newPicker(m)
	rng := newRand(1, 0)
	const draws = 200000
	var got [numKinds]int
	for i := 0; i < draws; i++ {
		got[p.pick(rng)]++
	}
	for k := kind(0); k < numKinds; k++ {
		want := float64(draws) * float64(m[k]) / 100
		if m[k] == 0 {
			if got[k] != 0 {
				t.Errorf("%s drawn %d times with weight 0", k, got[k])
			}
			continue
		}
		if d := float64(got[k]) - want; d > 0.05*want || d < -0.05*want {
			t.Errorf("%s drawn %d times, want %.0f ± 5%%", k, got[k], want)
		}
	}
}

func TestPickerSingleKindDrawsNothing(t *testing.T) {
	p := newPicker(Mix{kindThrottle: 3})
	a, b := newRand(9, 0), newRand(9, 0)
	for i := 0; i < 10; i++ {
		if k := p.pick(a); k != kindThrottle {
			t.Fatalf("picked %s", k)
		}
	}
	// The key stream must not depend on whether the mix needed draws.
	if a.Uint64() != b.Uint64() {
		t.Error("a single-kind mix consumed random numbers")
	}
}
