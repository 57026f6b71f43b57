package budget

import (
	"testing"

	"github.com/sluice-rl/sluice/engine"
)

// peekInline reports the tokens left in an inline bucket.
func peekInline(s *engine.Store, key string, lim *engine.Limit) int64 {
	return s.Acquire(t0, engine.Request{Space: engine.SpaceInline, Key: []byte(key), Limit: lim}, 0, true).Remaining
}

// TestPartsAreAdmittedTogether: a call with parts charges every part's
// levels or none — inline and budget parts alike — and a refusal names
// the part that refused.
func TestPartsAreAdmittedTogether(t *testing.T) {
	tr := buildTree(t, map[string]string{
		"api":        `{"sharing":"enforce","sustained":{"rate":100,"window":"minute"}}`,
		"api/tenant": `{"sustained":{"rate":5,"window":"minute"},"scope":"user"}`,
	})
	s := engine.New(engine.Options{Shards: 8})
	a, _ := engine.NewLimit(engine.FixedWindow, 3, 60e9, 3)
	b, _ := engine.NewLimit(engine.FixedWindow, 10, 60e9, 10)
	var sc Scratch
	call := func(cost int64) Outcome {
		t.Helper()
		c := Call{Path: []byte("a"), Rate: &a, HasWait: true, With: []Call{
			{Path: []byte("b"), Rate: &b, Cost: cost, HasCost: true},
			{Path: []byte("api/tenant"), Subject: []byte("u1")},
		}}
		o, err := tr.Acquire(s, t0, &c, &sc)
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	// Three admitted: a at 0, b at 10-3·2, the tenant's user at 5-3.
	for i := 0; i < 3; i++ {
		if o := call(2); o.Allowed != 1 || o.Levels != 4 {
			t.Fatalf("call %d: %+v", i, o)
		}
	}
	if r := peekInline(s, "a", &a); r != 0 {
		t.Fatalf("a has %d left, want 0", r)
	}
	// The fourth is refused by a, and charges neither b nor the budget levels.
	o := call(2)
	if o.Allowed != 0 || string(o.LimitedBy) != "a" || o.Result.RetryAfter <= 0 {
		t.Fatalf("fourth: %+v limited_by=%s", o, o.LimitedBy)
	}
	if r := peekInline(s, "b", &b); r != 4 {
		t.Fatalf("b has %d left after a refused call, want 4", r)
	}
	runCalls(t, tr, s, []acq{{path: "api/tenant", subject: "u1", allowed: 1, remaining: 1, limitedBy: "api/tenant#u1"}})
}

// TestPartsRefusedByABudgetLevel: the refusing level of a budget part is
// named as a single call names it, and nothing is charged.
func TestPartsRefusedByABudgetLevel(t *testing.T) {
	tr := buildTree(t, map[string]string{"api": `{"sustained":{"rate":2,"window":"minute"}}`})
	s := engine.New(engine.Options{Shards: 8})
	a, _ := engine.NewLimit(engine.FixedWindow, 10, 60e9, 10)
	var sc Scratch
	for i, want := range []int{1, 1, 0} {
		c := Call{Path: []byte("a"), Rate: &a, With: []Call{{Path: []byte("api")}}}
		o, err := tr.Acquire(s, t0, &c, &sc)
		if err != nil {
			t.Fatal(err)
		}
		if o.Allowed != want {
			t.Fatalf("call %d: allowed %d, want %d", i, o.Allowed, want)
		}
		if want == 0 && string(o.LimitedBy) != "api" {
			t.Fatalf("refused by %s, want api", o.LimitedBy)
		}
	}
	if r := peekInline(s, "a", &a); r != 8 {
		t.Fatalf("a has %d left, want 8", r)
	}
}

// TestPartsChargingOneBucketAddTheirCosts: two parts on the same key are
// one request of both costs (the engine needs distinct keys).
func TestPartsChargingOneBucketAddTheirCosts(t *testing.T) {
	s := engine.New(engine.Options{Shards: 8})
	a, _ := engine.NewLimit(engine.FixedWindow, 5, 60e9, 5)
	var sc Scratch
	var tr *Tree // inline parts only: no tree
	c := Call{Path: []byte("a"), Rate: &a, Cost: 2, HasCost: true, With: []Call{{Path: []byte("a"), Rate: &a, Cost: 2, HasCost: true}}}
	if o, err := tr.Acquire(s, t0, &c, &sc); err != nil || o.Allowed != 1 || o.Result.Remaining != 1 || o.Levels != 1 {
		t.Fatalf("%+v %v", o, err)
	}
	if o, _ := tr.Acquire(s, t0, &c, &sc); o.Allowed != 0 {
		t.Fatalf("4 more tokens from 1 left: %+v", o)
	}
}

// TestPartsErrors: a missing budget, too many buckets, and WAIT are
// refused before anything is charged.
func TestPartsErrors(t *testing.T) {
	tr := buildTree(t, map[string]string{"api": `{"sustained":{"rate":2,"window":"minute"},"strategy":"queue"}`})
	s := engine.New(engine.Options{Shards: 8})
	a, _ := engine.NewLimit(engine.FixedWindow, 10, 60e9, 10)
	var sc Scratch
	c := Call{Path: []byte("a"), Rate: &a, With: []Call{{Path: []byte("nothing/here")}}}
	if _, err := tr.Acquire(s, t0, &c, &sc); err == nil || err.(*Error).Code != "NOBUDGET" {
		t.Fatalf("missing budget: %v", err)
	}
	many := Call{Path: []byte("k0"), Rate: &a, HasWait: true}
	for i := 1; i <= engine.MaxLevels; i++ {
		many.With = append(many.With, Call{Path: []byte{'k', byte('a' + i)}, Rate: &a})
	}
	if _, err := tr.Acquire(s, t0, &many, &sc); err == nil {
		t.Fatal("more parts than levels accepted")
	}
	q := Call{Path: []byte("api"), With: []Call{{Path: []byte("a"), Rate: &a}}}
	if _, err := tr.Acquire(s, t0, &q, &sc); err != errWaitParts {
		t.Fatalf("queue strategy with parts: %v", err)
	}
	if r := peekInline(s, "a", &a); r != 10 {
		t.Fatalf("a was charged by a refused call: %d left", r)
	}
}

// TestPartsAllocateNothing: a warm call of three parts allocates nothing.
func TestPartsAllocateNothing(t *testing.T) {
	tr := buildTree(t, map[string]string{"api/tenant": `{"sustained":{"rate":1000000,"window":"minute"},"scope":"user"}`})
	s := engine.New(engine.Options{Shards: 8})
	a, _ := engine.NewLimit(engine.FixedWindow, 1000000, 60e9, 1000000)
	var sc Scratch
	c := Call{Path: []byte("a"), Rate: &a, HasWait: true, With: []Call{{Path: []byte("b"), Rate: &a}, {Path: []byte("api/tenant"), Subject: []byte("u")}}}
	tr.Acquire(s, t0, &c, &sc)
	if n := testing.AllocsPerRun(100, func() { tr.Acquire(s, t0, &c, &sc) }); n != 0 {
		t.Fatalf("%v allocations per call", n)
	}
}
