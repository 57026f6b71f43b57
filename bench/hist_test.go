package main

import (
	"testing"
	"time"
)

// within reports whether got is want within the histogram's 0.1%
// precision (and at least one unit).
func within(got, want int64) bool {
	tol := want / 1000
	if tol < 1 {
		tol = 1
	}
	return got >= want-tol && got <= want+tol
}

func TestPercentilesOfKnownData(t *testing.T) {
	h := newHist()
	for us := 1; us <= 10000; us++ {
		record(h, time.Duration(us)*time.Microsecond)
	}
	l := summarize(h)
	checks := []struct {
		name      string
		got, want int64
	}{
		{"p50", l.P50, 5000}, {"p90", l.P90, 9000}, {"p99", l.P99, 9900},
		{"p99.9", l.P999, 9990}, {"max", l.Max, 10000}, {"min", l.Min, 1},
	}
	for _, c := range checks {
		if !within(c.got, c.want) {
			t.Errorf("%s = %d, want %d ± 0.1%%", c.name, c.got, c.want)
		}
	}
	if l.Mean < 5000 || l.Mean > 5001.5 {
		t.Errorf("mean = %.2f, want about 5000.5", l.Mean)
	}
}

func TestPercentilesOfSkewedData(t *testing.T) {
	// 990 fast requests and 10 slow ones: p99 is still fast, p99.9 slow.
	h := newHist()
	for i := 0; i < 990; i++ {
		record(h, 200*time.Microsecond)
	}
	for i := 0; i < 10; i++ {
		record(h, 50*time.Millisecond)
	}
	l := summarize(h)
	if !within(l.P50, 200) || !within(l.P99, 200) {
		t.Errorf("p50 %d, p99 %d, want 200", l.P50, l.P99)
	}
	if !within(l.P999, 50000) || !within(l.Max, 50000) {
		t.Errorf("p99.9 %d, max %d, want 50000", l.P999, l.Max)
	}
}

func TestRecordClampsAndRounds(t *testing.T) {
	h := newHist()
	record(h, 0)
	record(h, -time.Second) // a clock step must not lose the sample
	record(h, 1499*time.Nanosecond)
	record(h, 5*time.Minute)
	if n := h.TotalCount(); n != 4 {
		t.Fatalf("recorded %d values, want 4", n)
	}
	if h.Min() != 1 {
		t.Errorf("min %d, want 1", h.Min())
	}
	if !within(h.Max(), histHighest) {
		t.Errorf("max %d, want %d", h.Max(), histHighest)
	}
	if v := h.ValueAtQuantile(75); v != 1 {
		t.Errorf("p75 = %d, want 1 (1.499µs rounds to 1µs)", v)
	}
}

func TestMergeKeepsEverySample(t *testing.T) {
	a, b, all := newHist(), newHist(), newHist()
	for us := 1; us <= 2000; us++ {
		d := time.Duration(us) * time.Microsecond
		if us%2 == 0 {
			record(a, d)
		} else {
			record(b, d)
		}
		record(all, d)
	}
	m := newHist()
	if dropped := m.Merge(a) + m.Merge(b); dropped != 0 {
		t.Fatalf("merge dropped %d values", dropped)
	}
	if m.TotalCount() != 2000 {
		t.Fatalf("merged count %d, want 2000", m.TotalCount())
	}
	if summarize(m) != summarize(all) {
		t.Errorf("merged %+v, want %+v", summarize(m), summarize(all))
	}
}

func TestEmptyHistogram(t *testing.T) {
	if l := summarize(newHist()); l.P50 != 0 || l.Max != 0 {
		t.Errorf("empty histogram summarised as %+v", l)
	}
}
