package budget

import (
	"math/rand"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/engine"
)

// lookAtPart is what a caller learnt of part p of a call before
// Call.EachPart, by looking at it again at the same instant: admitted, a
// look of cost zero after the charge; refused, a look at its own cost and,
// if that admits, one of cost zero (its tokens, untouched).
func lookAtPart(t *testing.T, tr *Tree, s *engine.Store, now int64, p Call, admitted bool) Outcome {
	t.Helper()
	var sc Scratch
	look := func(c Call) Outcome {
		c.With, c.DryRun, c.HasWait, c.WaitMs = nil, true, true, 0
		o, err := tr.Acquire(s, now, &c, &sc)
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	zero := p
	zero.Cost, zero.HasCost = 0, true
	if admitted {
		return look(zero)
	}
	o := look(p)
	if o.Allowed != 0 {
		o = look(zero)
		o.Allowed = 1
	}
	return o
}

// TestEachPartIsWhatALookWouldSay: Scratch.Parts describes each part of a
// call as a look at that part alone, at the same instant, would — budget
// parts of several levels (an enforcing aggregate, a node's requests, a
// quota) and inline ones, admitted, refused and dry — with no look.
func TestEachPartIsWhatALookWouldSay(t *testing.T) {
	tr := buildTree(t, map[string]string{
		"api":        `{"sharing":"enforce","sustained":{"rate":100000,"window":"minute"}}`,
		"api/tenant": `{"sustained":{"rate":6,"window":"minute"},"scope":"user","requests":{"rate":4,"window":"minute"}}`,
		"api/day":    `{"sustained":{"rate":50,"window":"minute"},"quota":{"limit":9,"period":"day"}}`,
		"slow":       `{"algorithm":"gcra","sustained":{"rate":3,"window":"second"}}`,
	})
	s := engine.New(engine.Options{Shards: 8})
	fixed, _ := engine.NewLimit(engine.FixedWindow, 5, 60e9, 5)
	bucket, _ := engine.NewLimit(engine.TokenBucket, 2, 1e9, 4)
	sliding, _ := engine.NewLimit(engine.SlidingWindow, 7, 10e9, 7)
	pool := []Call{
		{Path: []byte("f1"), Rate: &fixed},
		{Path: []byte("f2"), Rate: &fixed, Cost: 2, HasCost: true},
		{Path: []byte("tb"), Rate: &bucket},
		{Path: []byte("sw"), Rate: &sliding, Cost: 0, HasCost: true},
		{Path: []byte("sw2"), Rate: &sliding, Cost: 3, HasCost: true},
		{Path: []byte("api/tenant"), Subject: []byte("u1")},
		{Path: []byte("api/tenant"), Subject: []byte("u2"), Cost: 2, HasCost: true},
		{Path: []byte("api/day")},
		{Path: []byte("slow")},
	}
	rng := rand.New(rand.NewSource(34))
	var sc Scratch
	now := t0
	seen := [3]int{} // admitted, refused, dry
	for n := 0; n < 3000; n++ {
		now += rng.Int63n(int64(700 * time.Millisecond))
		k := 1 + rng.Intn(4)
		parts := make([]Call, 0, k)
		for _, i := range rng.Perm(len(pool))[:k] {
			parts = append(parts, pool[i])
		}
		c := parts[0]
		c.With, c.HasWait, c.EachPart, c.DryRun = parts[1:], true, true, rng.Intn(8) == 0
		out, err := tr.Acquire(s, now, &c, &sc)
		if err != nil {
			t.Fatal(err)
		}
		got := sc.Parts()
		if len(got) != k {
			t.Fatalf("call %d: %d parts described, want %d", n, len(got), k)
		}
		charged := out.Allowed == 1 && !c.DryRun
		switch {
		case c.DryRun:
			seen[2]++
		case charged:
			seen[0]++
		default:
			seen[1]++
		}
		for i, p := range parts {
			want := lookAtPart(t, tr, s, now, p, charged)
			g := got[i]
			if g.Allowed != want.Allowed || g.Unlimited != want.Unlimited || g.Result.Remaining != want.Result.Remaining ||
				g.Result.Limit != want.Result.Limit || g.Result.ResetAfter != want.Result.ResetAfter || g.Result.RetryAfter != want.Result.RetryAfter {
				t.Fatalf("call %d (allowed %d, dry %v), part %d %s#%s: described %d %+v, a look says %d %+v",
					n, out.Allowed, c.DryRun, i, p.Path, p.Subject, g.Allowed, g.Result, want.Allowed, want.Result)
			}
		}
	}
	if seen[0] == 0 || seen[1] == 0 || seen[2] == 0 {
		t.Fatalf("admitted, refused, dry: %v; want each", seen)
	}
	// A call that did not ask describes nothing.
	c := pool[0]
	c.With = pool[1:2]
	if _, err := tr.Acquire(s, now, &c, &sc); err != nil || len(sc.Parts()) != 0 {
		t.Fatalf("without EachPart: %d parts, %v", len(sc.Parts()), err)
	}
}
