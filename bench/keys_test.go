package main

import "testing"

func TestUniformCoversKeySpaceEvenly(t *testing.T) {
	const space, draws = 100, 200000
	g := newKeyGen("uniform", 0, space, newRand(1, 0))
	counts := make([]int, space)
	for i := 0; i < draws; i++ {
		k := g.next()
		if k >= space {
			t.Fatalf("key %d outside [0, %d)", k, space)
		}
		counts[k]++
	}
	want := draws / space // 2000, standard deviation about 44
	for k, n := range counts {
		if n < want*85/100 || n > want*115/100 {
			t.Errorf("key %d drawn %d times, want %d ± 15%%", k, n, want)
		}
	}
}

func TestZipfIsSkewed(t *testing.T) {
	const space, draws = 1000, 200000
	g := newKeyGen("zipf", 1.1, space, newRand(1, 0))
	counts := make([]int, space)
	for i := 0; i < draws; i++ {
		k := g.next()
		if k >= space {
			t.Fatalf("key %d outside [0, %d)", k, space)
		}
		counts[k]++
	}
	for k := 1; k < space; k++ {
		if counts[k] > counts[0] {
			t.Fatalf("key %d drawn %d times, more than key 0 (%d)", k, counts[k], counts[0])
		}
	}
	// P(0)/P(1) = 2^1.1 ≈ 2.14; far from uniform.
	if r := float64(counts[0]) / float64(counts[1]); r < 1.8 || r > 2.5 {
		t.Errorf("count(0)/count(1) = %.2f, want about 2.14", r)
	}
	if counts[0] < 50*draws/space {
		t.Errorf("key 0 drawn %d times, want at least 50× the uniform share", counts[0])
	}
	// Monotone over deciles of the key space.
	prev := draws + 1
	for d := 0; d < 10; d++ {
		sum := 0
		for _, n := range counts[d*space/10 : (d+1)*space/10] {
			sum += n
		}
		if sum >= prev {
			t.Errorf("decile %d drawn %d times, not fewer than the decile before (%d)", d, sum, prev)
		}
		prev = sum
	}
}

func TestKeysDeterministicPerConnection(t *testing.T) {
	for _, dist := range []string{"uniform", "zipf"} {
		seq := func(seed int64, conn int) []uint64 {
			g := newKeyGen(dist, 1.1, 1_000_000, newRand(seed, conn))
			out := make([]uint64, 20)
			for i := range out {
				out[i] = g.next()
			}
			return out
		}
		a, b := seq(42, 3), seq(42, 3)
		for i := range a {
			if a[i] != b[i] {
				t.Fatalf("%s: same seed and connection differ at %d: %d vs %d", dist, i, a[i], b[i])
			}
		}
		same := func(x, y []uint64) bool {
			for i := range x {
				if x[i] != y[i] {
					return false
				}
			}
			return true
		}
		if same(a, seq(42, 4)) {
			t.Errorf("%s: connections 3 and 4 draw the same keys", dist)
		}
		if same(a, seq(43, 3)) {
			t.Errorf("%s: seeds 42 and 43 draw the same keys", dist)
		}
	}
}

func TestKeySpaceOfOne(t *testing.T) {
	for _, dist := range []string{"uniform", "zipf"} {
		g := newKeyGen(dist, 1.1, 1, newRand(1, 0))
		for i := 0; i < 100; i++ {
			if k := g.next(); k != 0 {
				t.Fatalf("%s: key %d in a space of one", dist, k)
			}
		}
	}
}
