package server

import "testing"

// The limit counts client buffers once: the rest with the runtime's
// usual room for its garbage (twice), the buffers' share of the bound
// (seven eighths) and a sixteenth of the bound, which together stay
// within the bound; never below what is live plus that sixteenth.
func TestMemoryLimitCountsClientBuffersOnce(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct{ nonHeap, live, other, bound, want int64 }{
		{8 * mib, 20 * mib, 20 * mib, 1024 * mib, 8*mib + 40*mib + 896*mib + 64*mib},
		{8 * mib, 1044 * mib, 20 * mib, 1024 * mib, 8*mib + 1044*mib + 64*mib},
		// A stale estimate of the rest: what is live stands.
		{8 * mib, 2000 * mib, 20 * mib, 1024 * mib, 8*mib + 2000*mib + 64*mib},
	} {
		if got := memoryLimit(c.nonHeap, c.live, c.other, c.bound); got != c.want {
			t.Errorf("memoryLimit(%d, %d, %d, %d) = %d, want %d", c.nonHeap, c.live, c.other, c.bound, got, c.want)
		}
	}
}

// The estimate of what is not client buffers falls at once and rises
// slowly: one inflated sample moves it by a 64th.
func TestOtherEstimateFallsAtOnceRisesSlowly(t *testing.T) {
	est := otherEstimate(-1, 100)
	if est != 100 {
		t.Fatalf("first sample: %d", est)
	}
	if est = otherEstimate(est, 740); est != 110 {
		t.Fatalf("after a sample of 740: %d, want 110", est)
	}
	if est = otherEstimate(est, 50); est != 50 {
		t.Fatalf("after a sample of 50: %d, want 50", est)
	}
	if est = otherEstimate(est, -10); est != 0 {
		t.Fatalf("after a negative sample: %d, want 0", est)
	}
	for i := 0; i < 200; i++ {
		est = otherEstimate(est, 1000)
	}
	if est < 950 {
		t.Fatalf("a lasting rise to 1000 followed to %d after 200 steps", est)
	}
}
