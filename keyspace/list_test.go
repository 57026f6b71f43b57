package keyspace

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
)

// Lists against a plain slice: random pushes at both ends, pops with and
// without a count and trims give the same elements in the same order, and
// the bytes charged are always the elements' own with their overheads.
func TestListsFollowAModel(t *testing.T) {
	seed := rand.Uint64()
	rng := rand.New(rand.NewPCG(seed, 1))
	s := New(Options{})
	var model []string
	for i := range 6000 {
		switch op := rng.IntN(10); {
		case op < 3:
			n := 1 + rng.IntN(4)
			args := []string{"LPUSH", "l"}
			for j := range n {
				x := fmt.Sprint(i, ".", j)
				args = append(args, x)
				model = append([]string{x}, model...)
			}
			run(s, 0, args...)
		case op < 6:
			n := 1 + rng.IntN(4)
			args := []string{"RPUSH", "l"}
			for j := range n {
				x := fmt.Sprint(i, ":", j, "-", rng.IntN(1000))
				args = append(args, x)
				model = append(model, x)
			}
			run(s, 0, args...)
		case op == 6 && len(model) > 0:
			run(s, 0, "LPOP", "l")
			model = model[1:]
		case op == 7 && len(model) > 0:
			n := min(1+rng.IntN(3), len(model))
			run(s, 0, "RPOP", "l", strconv.Itoa(n))
			model = model[:len(model)-n]
		case op == 8 && len(model) > 0:
			lo, hi := rng.IntN(3), len(model)-1-rng.IntN(3)
			run(s, 0, "LTRIM", "l", strconv.Itoa(lo), strconv.Itoa(hi))
			if lo > hi {
				model = nil
			} else {
				model = slices.Clone(model[lo : hi+1])
			}
		}
		if i%97 == 0 || len(model) < 3 {
			got := run(s, 0, "LRANGE", "l", "0", "-1")
			var have []string
			for _, e := range got.Elems {
				have = append(have, e.Str)
			}
			if !slices.Equal(have, model) {
				t.Fatalf("seed %d, step %d: LRANGE %q, want %q", seed, i, have, model)
			}
			want := int64(0)
			if len(model) > 0 {
				want = int64(len("l") + keyOverhead)
				for _, x := range model {
					want += int64(len(x) + fieldOverhead)
				}
			}
			if s.Bytes() != want {
				t.Fatalf("seed %d, step %d: %d bytes charged, the elements are %d", seed, i, s.Bytes(), want)
			}
		}
	}
}

// A push the memory bound refuses leaves the list as it was.
func TestRefusedPushKeepsTheList(t *testing.T) {
	s := New(Options{MaxBytes: 4096})
	for i := range 20 {
		run(s, 0, "RPUSH", "l", fmt.Sprint(i))
	}
	before, bytes := show(run(s, 0, "LRANGE", "l", "0", "-1")), s.Bytes()
	big := make([]byte, 8192)
	for _, cmd := range []string{"LPUSH", "RPUSH"} {
		if r := run(s, 0, cmd, "l", string(big)); r.Kind != Error {
			t.Fatalf("%s past the bound: %s", cmd, show(r))
		}
		if after := show(run(s, 0, "LRANGE", "l", "0", "-1")); after != before || s.Bytes() != bytes {
			t.Fatalf("after a refused %s: %s (%d bytes), was %s (%d bytes)", cmd, after, s.Bytes(), before, bytes)
		}
	}
}

// A moving window's push and trim cost the same at any length.
func BenchmarkMovingWindow(b *testing.B) {
	for _, n := range []int{10, 1000, 100000} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			s := New(Options{})
			for range n {
				run(s, 0, "LPUSH", "w", "1733097600.123456")
			}
			lim := strconv.Itoa(n - 1)
			b.ResetTimer()
			for range b.N {
				run(s, 0, "LPUSH", "w", "1733097600.123456")
				run(s, 0, "LTRIM", "w", "0", lim)
			}
		})
	}
}
