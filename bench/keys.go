package main

import "math/rand/v2"

// newRand returns connection conn's generator. PCG's two words keep the
// streams of different connections apart while the same seed and
// connection always replay the same sequence.
func newRand(seed int64, conn int) *rand.Rand {
	return rand.New(rand.NewPCG(uint64(seed), uint64(conn)))
}

// keyGen draws key numbers in [0, space): uniformly, or Zipf-distributed
// with key 0 the most frequent, then 1, and so on.
type keyGen struct {
	rng   *rand.Rand
	space uint64
	zipf  *rand.Zipf // nil for uniform
}

// newKeyGen returns a generator over [0, space) for dist "uniform" or
// "zipf" (exponent s > 1, already validated).
func newKeyGen(dist string, s float64, space uint64, rng *rand.Rand) *keyGen {
	g := &keyGen{rng: rng, space: space}
	if dist == "zipf" {
		g.zipf = rand.NewZipf(rng, s, 1, space-1)
	}
	return g
}

func (g *keyGen) next() uint64 {
	if g.zipf != nil {
		return g.zipf.Uint64()
	}
	return g.rng.Uint64N(g.space)
}
