package limiter_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/limiter"
	"github.com/sluice-rl/sluice/reserve"
)

// plan3 is a three-level plan with a quota: org and org/team enforce
// their aggregates, org/team/app has its own bucket and a monthly quota.
const plan3 = `{"budgets":{
 "org": {"sharing":"enforce","sustained":{"rate":1000,"window":"minute"},"burst":{"capacity":1000}},
 "org/team": {"sharing":"enforce","sustained":{"rate":500,"window":"minute"},"burst":{"capacity":500}},
 "org/team/app": {"sustained":{"rate":100,"window":"minute"},"burst":{"capacity":100},"quota":{"limit":10000,"period":"month"}},
 "chat": {"scope":"user","concurrency":1,"sustained":{"rate":100,"window":"second"}}
}}`

func reserving(t *testing.T, budgets string, max int) (*limiter.Service, *int64) {
	t.Helper()
	s, now := service(t, budgets)
	s.Holds = reserve.New("n1", max, 0)
	return s, now
}

// levels returns what is left on org, org/team and org/team/app, and
// the quota used, at the service clock.
func levels(t *testing.T, s *limiter.Service) [4]int64 {
	t.Helper()
	var sc limiter.Scratch
	var out [4]int64
	for i, p := range []string{"org", "org/team", "org/team/app"} {
		o, err := s.Peek(&limiter.Call{Path: []byte(p), HasCost: true}, &sc)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = o.Result.Remaining
	}
	q, err := s.Quota(&limiter.Call{Path: []byte("org/team/app")}, &sc)
	if err != nil {
		t.Fatal(err)
	}
	out[3] = q.Used
	return out
}

func reserveApp(t *testing.T, s *limiter.Service, est int64, ttl time.Duration) (limiter.Outcome, string) {
	t.Helper()
	var sc limiter.Scratch
	out, id, err := s.Reservation(&limiter.Call{Path: []byte("org/team/app"), Cost: est, HasCost: true},
		limiter.ReserveOpts{TTL: int64(ttl)}, &sc, nil)
	if err != nil {
		t.Fatal(err)
	}
	return out, id
}

// Settling below, at and above the estimate leaves every level and the
// quota as if the real cost had been charged in the first place; above,
// the own bucket goes into debt and the next call waits for it.
func TestSettleChargesTheRealCostOnEveryLevel(t *testing.T) {
	cases := []struct {
		actual int64
		want   [4]int64
		retry  time.Duration // of a call of cost 1 afterwards; 0 admitted
	}{
		{25, [4]int64{975, 475, 75, 25}, 0},
		{40, [4]int64{960, 460, 60, 40}, 0},
		{130, [4]int64{870, 370, 0, 130}, 31 * 600 * time.Millisecond}, // 30 in debt, T = 600ms
	}
	for _, c := range cases {
		s, _ := reserving(t, plan3, 10)
		out, id := reserveApp(t, s, 40, time.Minute)
		if out.Allowed != 1 || id == "" || out.Levels != 4 {
			t.Fatalf("reserve: %+v id %q", out, id)
		}
		if got := levels(t, s); got != [4]int64{960, 460, 60, 40} {
			t.Fatalf("held: %v", got)
		}
		set, err := s.Settle(id, c.actual)
		if err != nil || set.Allowed != 1 || string(set.LimitedBy) != "org/team/app" || set.Result.Remaining != c.want[2] {
			t.Fatalf("settle %d: %+v %v", c.actual, set, err)
		}
		if got := levels(t, s); got != c.want {
			t.Fatalf("settled at %d: %v, want %v", c.actual, got, c.want)
		}
		var sc limiter.Scratch
		p, _ := s.Peek(&limiter.Call{Path: []byte("org/team/app"), Cost: 1, HasCost: true}, &sc)
		if time.Duration(p.Result.RetryAfter) != c.retry {
			t.Fatalf("settled at %d: next call retry %v, want %v", c.actual, time.Duration(p.Result.RetryAfter), c.retry)
		}
		if _, err := s.Settle(id, c.actual); err == nil || !strings.HasPrefix(err.Error(), "NORESERVATION") {
			t.Fatalf("second settle: %v", err)
		}
	}
}

// RELEASE gives the whole estimate back, quota included; a second one
// finds nothing.
func TestReleaseGivesTheEstimateBack(t *testing.T) {
	s, _ := reserving(t, plan3, 10)
	var events []string
	s.Reserved = func(e, budget string) { events = append(events, e+" "+budget) }
	_, id := reserveApp(t, s, 40, time.Minute)
	if ok, err := s.Release(id); !ok || err != nil {
		t.Fatalf("release: %v %v", ok, err)
	}
	if got := levels(t, s); got != [4]int64{1000, 500, 100, 0} {
		t.Fatalf("released: %v", got)
	}
	if ok, err := s.Release(id); ok || err != nil || s.Holds.Len() != 0 {
		t.Fatalf("second release: %v %v", ok, err)
	}
	_, id = reserveApp(t, s, 1, time.Second)
	s.Settle(id, 1)
	reserveApp(t, s, 1, time.Second)
	s.ExpireReservations(t0 + int64(time.Second))
	want := "[reserved org released org reserved org settled org reserved org expired org]"
	if fmt.Sprint(events) != want {
		t.Fatalf("events %v, want %s", events, want)
	}
}

// A reservation left alone is settled at its estimate when its TTL is
// up, not before; RENEW moves that time.
func TestExpirySettlesAtTheEstimateAndRenewExtends(t *testing.T) {
	s, now := reserving(t, plan3, 10)
	_, a := reserveApp(t, s, 40, time.Second)
	_, b := reserveApp(t, s, 10, time.Second)
	*now += int64(500 * time.Millisecond)
	if ok, err := s.Renew(b, int64(time.Second)); !ok || err != nil {
		t.Fatalf("renew: %v %v", ok, err)
	}
	if ok, _ := s.Renew("00000000000000990000000000000000@n1", int64(time.Second)); ok {
		t.Fatal("renewed an unknown id")
	}
	if n := s.ExpireReservations(t0 + int64(999*time.Millisecond)); n != 0 {
		t.Fatalf("%d expired early", n)
	}
	if n := s.ExpireReservations(t0 + int64(time.Second)); n != 1 {
		t.Fatalf("%d expired at the TTL, want 1", n)
	}
	*now = t0 + int64(time.Second)
	// 50 charged at t0 (30 s of refill at 600ms a token); at 1 s, 29 s
	// of debt are left: 49 tokens owed.
	if got := levels(t, s); got[3] != 50 || got[2] != 100-49 {
		t.Fatalf("after expiry: %v", got)
	}
	if _, err := s.Settle(a, 1); err == nil {
		t.Fatal("settled an expired reservation")
	}
	if n := s.ExpireReservations(t0 + int64(1500*time.Millisecond)); n != 1 || s.Holds.Len() != 0 {
		t.Fatalf("the renewed one: %d expired, %d open", n, s.Holds.Len())
	}
}

// A refused reservation holds nothing: no tokens, no quota, no id, no
// place among the open ones.
func TestRefusedReservationHoldsNothing(t *testing.T) {
	s, _ := reserving(t, plan3, 10)
	out, id := reserveApp(t, s, 101, time.Minute)
	if out.Allowed != 0 || id != "" || out.Result.RetryAfter != -1 || s.Holds.Len() != 0 {
		t.Fatalf("over the burst: %+v %q", out, id)
	}
	_, id = reserveApp(t, s, 90, time.Minute)
	out, id2 := reserveApp(t, s, 20, time.Minute)
	if id == "" || out.Allowed != 0 || id2 != "" || s.Holds.Len() != 1 {
		t.Fatalf("second: %+v %q", out, id2)
	}
	if got := levels(t, s); got != [4]int64{910, 410, 10, 90} {
		t.Fatalf("after the refusals: %v", got)
	}
}

// CONCURRENCY n admits n in flight; one more is refused until the
// earliest expires, or admitted once a slot frees; WAIT waits for one.
func TestConcurrencyInline(t *testing.T) {
	s, now := reserving(t, "", 10)
	lim, _ := engine.NewLimit(engine.TokenBucket, 1000, time.Second, 1000)
	call := func(wait int64) (limiter.Outcome, string, error) {
		var sc limiter.Scratch
		return s.Reservation(&limiter.Call{Path: []byte("k"), Rate: &lim, Cost: 1, HasCost: true, WaitMs: wait, HasWait: wait > 0},
			limiter.ReserveOpts{Concurrency: 2, TTL: int64(10 * time.Second)}, &sc, nil)
	}
	_, a, _ := call(0)
	*now += int64(time.Second)
	_, _, _ = call(0)
	out, id, err := call(0)
	if err != nil || id != "" || out.Allowed != 0 || out.Result.RetryAfter != int64(9*time.Second) ||
		string(out.LimitedBy) != "concurrency:k" || out.Result.Limit != 2 {
		t.Fatalf("third: %+v %q %v", out, id, err)
	}
	done := make(chan string)
	go func() { _, id, _ := call(5000); done <- id }()
	for s.Holds.Len() != 2 || !waiting(s) {
		time.Sleep(time.Millisecond)
	}
	if ok, _ := s.Release(a); !ok {
		t.Fatal("release")
	}
	if id := <-done; id == "" {
		t.Fatal("the waiter got no slot")
	}
}

// waiting reports whether a reservation waits for a slot (the service's
// Waiting hook is not set here: the group's wake channel is the sign).
func waiting(s *limiter.Service) bool { return s.Holds.Waiters("concurrency:k") > 0 }

// A budget node's concurrency counts per subject under its scope.
func TestConcurrencyPerSubject(t *testing.T) {
	s, _ := reserving(t, plan3, 10)
	var sc limiter.Scratch
	res := func(user string) string {
		_, id, err := s.Reservation(&limiter.Call{Path: []byte("chat"), Subject: []byte(user)}, limiter.ReserveOpts{}, &sc, nil)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	if res("a") == "" || res("a") != "" || res("b") == "" {
		t.Fatal("one in flight per user")
	}
	if _, _, err := s.Reservation(&limiter.Call{Path: []byte("chat")}, limiter.ReserveOpts{}, &sc, nil); err == nil || s.Holds.Len() != 2 {
		t.Fatalf("no KEY on a user-scoped node: %v, %d open", err, s.Holds.Len())
	}
	// Refused calls hold nothing: an unknown path, a call of several parts.
	if _, _, err := s.Reservation(&limiter.Call{Path: []byte("nosuch")}, limiter.ReserveOpts{}, &sc, nil); err == nil || s.Holds.Len() != 2 {
		t.Fatalf("no budget node: %v, %d open", err, s.Holds.Len())
	}
	inline, _ := engine.NewLimit(engine.TokenBucket, 10, time.Second, 10)
	if _, _, err := s.Reservation(&limiter.Call{Path: []byte("k"), Rate: &inline, Cost: 1, HasCost: true, With: []limiter.Call{{Path: []byte("j"), Rate: &inline}}},
		limiter.ReserveOpts{Concurrency: 1}, &sc, nil); err == nil || s.Holds.Len() != 2 || s.Holds.InFlight("concurrency:k") != 0 {
		t.Fatalf("a call of parts: %v, %d open", err, s.Holds.Len())
	}
}

// At --max-reservations further ones are refused with a clear error;
// expiry makes room again. Another node's id is answered with where it
// lives.
func TestReservationCapAndForeignIDs(t *testing.T) {
	s, _ := reserving(t, plan3, 3)
	for i := 0; i < 3; i++ {
		reserveApp(t, s, 1, time.Second)
	}
	var sc limiter.Scratch
	_, _, err := s.Reservation(&limiter.Call{Path: []byte("org/team/app")}, limiter.ReserveOpts{}, &sc, nil)
	if err == nil || !strings.Contains(err.Error(), "--max-reservations") {
		t.Fatalf("at the cap: %v", err)
	}
	if got := levels(t, s); got[3] != 3 {
		t.Fatalf("the refused one charged: %v", got)
	}
	s.ExpireReservations(t0 + int64(time.Second))
	if _, id := reserveApp(t, s, 1, time.Second); id == "" {
		t.Fatal("no room after expiry")
	}
	if _, err := s.Settle("00000000000000010000000000000000@n2", 1); err == nil || !strings.Contains(err.Error(), "'n2'") {
		t.Fatalf("foreign id: %v", err)
	}
}

// In a cluster, a reservation with a concurrency slot is decided by the
// owner of the slot's key; one without a slot, one of this node's keys,
// and one whose owner did not answer (for SlotOwnerPause) are decided
// here.
func TestSlotOwner(t *testing.T) {
	s, now := reserving(t, plan3, 100)
	s.Store.SetOwners("n1", []string{"n1", "n2", "n3"})
	var sc limiter.Scratch
	owner := func(key string) string {
		o, err := s.SlotOwner(&limiter.Call{Path: []byte(key), Cost: 1, HasCost: true, Now: *now},
			limiter.ReserveOpts{Concurrency: 2}, &sc)
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	var mine, theirs string
	for i := 0; mine == "" || theirs == ""; i++ {
		k := fmt.Sprintf("gpu:%d", i)
		if o := owner(k); o == "" {
			mine = k
		} else if o != "n1" {
			theirs = k
		} else {
			t.Fatalf("SlotOwner named this node for %s", k)
		}
	}
	if o, err := s.SlotOwner(&limiter.Call{Path: []byte("org/team/app"), Cost: 1, HasCost: true, Now: *now}, limiter.ReserveOpts{}, &sc); err != nil || o != "" {
		t.Fatalf("a reservation without a slot goes to %q (%v), want this node", o, err)
	}
	o := owner(theirs)
	s.SlotOwnerUnreachable(o, *now)
	next := s.Store.Ranking(engine.SpaceInline, []byte("concurrency:"+theirs), nil)[1] // its backup
	if next == "n1" {
		next = ""
	}
	if got := owner(theirs); got != next {
		t.Fatalf("an owner that did not answer: the key goes to %q, want its backup %q", got, next)
	}
	*now += int64(limiter.SlotOwnerPause)
	if got := owner(theirs); got != o {
		t.Fatalf("after the pause the owner is %q, want %q again", got, o)
	}
	// An owner the leases found down is still asked: only what answers
	// about slots decides who decides them (a mark the leases keep could
	// outlive the owner's return, and two members would decide).
	s.Store.SetOwnerDown(o, true)
	if got := owner(theirs); got != o {
		t.Fatalf("an owner the leases found down is skipped (%q)", got)
	}
	// The budget form: the node's slot key, per subject.
	s.Store.SetOwnerDown(o, false)
	for _, subj := range []string{"ann", "bob", "cy", "dee", "ed"} {
		got, err := s.SlotOwner(&limiter.Call{Path: []byte("chat"), Subject: []byte(subj), Cost: 1, HasCost: true, Now: *now}, limiter.ReserveOpts{}, &sc)
		if err != nil {
			t.Fatal(err)
		}
		want, self := s.Store.Owner(engine.SpaceInline, []byte("concurrency:chat#"+subj))
		if self {
			want = ""
		}
		if got != want {
			t.Fatalf("chat#%s goes to %q, want %q", subj, got, want)
		}
	}
}

// One node limits tokens and requests: each reservation counts its
// estimate of tokens and 1 request; a settlement moves the tokens only
// (the call happened), a release gives both back, and a refund leaves the
// request counted.
func TestTokensAndRequestsInOneNode(t *testing.T) {
	s, _ := reserving(t, `{"budgets":{
 "llm": {"scope":"user","sustained":{"rate":100000,"window":"minute"},"requests":{"rate":3,"window":"minute"},"quota":{"limit":5000000,"period":"month"},"concurrency":4}
}}`, 10)
	var sc limiter.Scratch
	call := func(subject string, cost int64) *limiter.Call {
		return &limiter.Call{Path: []byte("llm"), Subject: []byte(subject), Cost: cost, HasCost: true}
	}
	reserve := func(cost int64) (limiter.Outcome, string) {
		t.Helper()
		out, id, err := s.Reservation(call("acme", cost), limiter.ReserveOpts{TTL: int64(time.Minute)}, &sc, nil)
		if err != nil {
			t.Fatal(err)
		}
		return out, id
	}
	refused := func(what string, cost int64, by string, limit int64) {
		t.Helper()
		if out, id := reserve(cost); out.Allowed != 0 || id != "" || string(out.LimitedBy) != by || out.Result.Limit != limit {
			t.Fatalf("%s: allowed %d id %q limited by %s %+v, want refused by %s of %d", what, out.Allowed, id, out.LimitedBy, out.Result, by, limit)
		}
	}
	admitted := func(what string, cost int64) string {
		t.Helper()
		out, id := reserve(cost)
		if out.Allowed != 1 || id == "" {
			t.Fatalf("%s: %+v %s, want admitted", what, out.Result, out.LimitedBy)
		}
		return id
	}
	id1 := admitted("first", 4000)
	if o, err := s.Settle(id1, 2750); err != nil || string(o.LimitedBy) != "llm#acme" || o.Result.Remaining != 97250 {
		t.Fatalf("settle: %+v %s %v", o.Result, o.LimitedBy, err)
	}
	// The tokens: 97250 left after the settlement.
	refused("97251 tokens", 97251, "llm#acme", 100000)
	id2 := admitted("second", 1000)
	admitted("third", 1)
	// Three requests this minute (the settled one included): the fourth
	// is refused by the requests, tokens to spare.
	refused("fourth request", 1, "requests:llm#acme", 3)
	// A release gives the request back.
	if ok, err := s.Release(id2); !ok || err != nil {
		t.Fatalf("release: %v %v", ok, err)
	}
	admitted("after a release", 1)
	// A refund gives tokens back, not requests.
	if _, err := s.Refund(call("acme", 0), 500, &sc); err != nil {
		t.Fatal(err)
	}
	refused("after a refund", 1, "requests:llm#acme", 3)
	// Another subject has its own requests.
	if out, _, err := s.Reservation(call("globex", 10), limiter.ReserveOpts{TTL: int64(time.Minute)}, &sc, nil); err != nil || out.Allowed != 1 {
		t.Fatalf("another subject: %+v %v", out, err)
	}
	// The monthly quota: 2750 settled + 1 + 1 held − 500 refunded.
	q, err := s.Quota(call("acme", 0), &sc)
	if err != nil || q.Used != 2252 {
		t.Fatalf("quota used %d, want 2252 (%v)", q.Used, err)
	}
	// An admitted call is described by its tokens, not by the few
	// requests left; COST 0 only looks (and counts no request).
	if o, err := s.Peek(call("acme", 0), &sc); err != nil || o.Allowed != 1 || string(o.LimitedBy) != "llm#acme" || o.Result.Remaining != 97748 {
		t.Fatalf("peek: %+v %s %v", o.Result, o.LimitedBy, err)
	}
	// An acquire counts a request too.
	if o, err := s.Acquire(call("acme", 1), &sc, nil); err != nil || o.Allowed != 0 || string(o.LimitedBy) != "requests:llm#acme" {
		t.Fatalf("acquire: %+v %s %v", o.Result, o.LimitedBy, err)
	}
}
