package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Calendar quotas across the end of their period, on the real binary whose
// clock (SLUICE_TEST_CLOCK) is set a few seconds before it: the quota is
// spent, calls are denied until the boundary with the time to it, and the
// first call after it is admitted with the length of the new period —
// whatever the hour the test runs at.

// A calendarCase is one quota and the boundary its period ends at.
type calendarCase struct {
	name  string
	quota []any     // QUOTA n PER period [TZ zone]
	end   time.Time // the end of the period the clock starts in
	next  time.Time // the end of the period after it
}

func TestCalendarQuotasAcrossTheirBoundary(t *testing.T) {
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Fatal(err)
	}
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	cases := []calendarCase{
		{name: "day UTC", quota: []any{"QUOTA", 2, "PER", "day"},
			end: date(2027, 1, 16, 0, time.UTC), next: date(2027, 1, 17, 0, time.UTC)},
		{name: "month UTC, end of February", quota: []any{"QUOTA", 2, "PER", "month"},
			end: date(2027, 3, 1, 0, time.UTC), next: date(2027, 4, 1, 0, time.UTC)},
		{name: "year New York", quota: []any{"QUOTA", 2, "PER", "year", "TZ", "America/New_York"},
			end: date(2028, 1, 1, 0, ny), next: date(2029, 1, 1, 0, ny)},
		// Clocks go forward in Paris on 28 March 2027 (02:00 CET becomes
		// 03:00 CEST): that day lasts 23 hours.
		{name: "day Paris, 23 hours", quota: []any{"QUOTA", 2, "PER", "day", "TZ", "Europe/Paris"},
			end: date(2027, 3, 28, 0, paris), next: date(2027, 3, 29, 0, paris)},
		// The hour 01:00–02:00 CET ends at 01:00 UTC; the next hour of
		// Paris is 03:00–04:00 CEST.
		{name: "hour Paris, at the change", quota: []any{"QUOTA", 2, "PER", "hour", "TZ", "Europe/Paris"},
			end: date(2027, 3, 28, 1, time.UTC), next: date(2027, 3, 28, 2, time.UTC)},
		// Back in autumn: 31 October 2027 lasts 25 hours in Paris.
		{name: "day Paris, 25 hours", quota: []any{"QUOTA", 2, "PER", "day", "TZ", "Europe/Paris"},
			end: date(2027, 10, 31, 0, paris), next: date(2027, 11, 1, 0, paris)},
	}
	if d := cases[3].next.Sub(cases[3].end); d != 23*time.Hour {
		t.Fatalf("28 March 2027 in Paris lasts %v by Go's zone data; the case expects 23h", d)
	}
	if d := cases[5].next.Sub(cases[5].end); d != 25*time.Hour {
		t.Fatalf("31 October 2027 in Paris lasts %v by Go's zone data; the case expects 25h", d)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// The node starts a few seconds before the boundary; a machine
			// too slow to spend the quota before it tries again with more.
			for _, lead := range []time.Duration{4 * time.Second, 15 * time.Second, time.Minute} {
				if acrossBoundary(t, tc, lead) {
					return
				}
				t.Logf("the quota was not spent before the boundary (%v ahead); again with more time", lead)
			}
			t.Fatal("the quota was never spent before its boundary")
		})
	}
}

func date(y int, m time.Month, d, h int, loc *time.Location) time.Time {
	return time.Date(y, m, d, h, 0, 0, 0, loc)
}

// acrossBoundary runs one case on a node whose clock starts lead before
// the boundary; it says false if the quota could not be spent before it.
func acrossBoundary(t *testing.T, tc calendarCase, lead time.Duration) bool {
	env, now := testClockAt(tc.end.Add(-lead))
	p := startEnv(t, []string{env}, "--resp-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0",
		"--raft-addr", "127.0.0.1:0", "--data-dir", t.TempDir())
	defer p.stop()
	c := client(t, p.Resp)
	waitReady(t, c)
	call := append([]any{"RL.ACQUIRE", "k"}, tc.quota...)

	before := now()
	r := acquire(t, c, append(call, "COST", 2)...)
	denied := acquire(t, c, call...)
	after := now()
	if !after.Before(tc.end) {
		return false
	}
	if r[0] != 1 || r[1] != 0 {
		t.Fatalf("%v COST 2: %v, want admitted with 0 left", call, r)
	}
	msUntil(t, "reset_after_ms of the call that spent the quota", r[4], tc.end, before, after)
	if denied[0] != 0 || denied[1] != 0 {
		t.Fatalf("%v once spent: %v, want denied", call, denied)
	}
	msUntil(t, "retry_after_ms of a call the quota denies", denied[3], tc.end, before, after)

	// Calls are denied until the boundary, then the first is admitted
	// and counted in the new period.
	var first []int64
	var at time.Time
	eventually(t, lead+30*time.Second, "the quota to be admitting again after its period ended", func() bool {
		before := now()
		first = acquire(t, c, call...)
		at = now()
		if first[0] == 1 {
			return true
		}
		msUntil(t, "retry_after_ms while waiting for the boundary", first[3], tc.end, before, at)
		return false
	})
	if at.Before(tc.end) {
		t.Fatalf("admitted at %v, before the period ends at %v: %v", at, tc.end, first)
	}
	if first[1] != 1 {
		t.Fatalf("the first call of the new period: %v, want 1 left of 2", first)
	}
	before = now()
	r = acquire(t, c, call...)
	after = now()
	if r[0] != 1 || r[1] != 0 {
		t.Fatalf("the second call of the new period: %v, want admitted with 0 left", r)
	}
	msUntil(t, "reset_after_ms in the new period", r[4], tc.next, before, after)
	return true
}

// acquire runs an RL.ACQUIRE and returns its five figures (allowed,
// remaining, limit, retry_after_ms, reset_after_ms).
func acquire(t *testing.T, c *redis.Client, args ...any) []int64 {
	t.Helper()
	r := do(t, c, args...).([]any)
	out := make([]int64, 5)
	for i := range out {
		out[i] = r[i].(int64)
	}
	return out
}

// msUntil checks that ms is the time from a moment between before and
// after to end, in milliseconds (rounded either way).
func msUntil(t *testing.T, what string, v int64, end, before, after time.Time) {
	t.Helper()
	hi, lo := end.Sub(before).Milliseconds()+1, end.Sub(after).Milliseconds()-1
	if v < lo || v > hi {
		t.Fatalf("%s: %d ms, want between %d and %d (to %v)", what, v, lo, hi, end)
	}
}

// Three nodes sharing one test clock: a quota spent across them before
// midnight admits, after it, exactly its limit again over the three.
func TestClusterQuotaAcrossMidnight(t *testing.T) {
	end := date(2027, 1, 16, 0, time.UTC)
	for _, lead := range []time.Duration{8 * time.Second, 20 * time.Second, time.Minute} {
		if clusterAcrossMidnight(t, end, lead) {
			return
		}
		t.Logf("the quota was not spent before midnight (%v ahead); again with more time", lead)
	}
	t.Fatal("the quota was never spent before midnight")
}

func clusterAcrossMidnight(t *testing.T, end time.Time, lead time.Duration) bool {
	env, now := testClockAt(end.Add(-lead))
	var ms []*member
	var peers []string
	for i := 1; i <= 3; i++ {
		m := &member{id: fmt.Sprintf("n%d", i), resp: "127.0.0.1:" + freePort(t), raft: "127.0.0.1:" + freePort(t),
			dir: t.TempDir(), env: []string{env}}
		ms = append(ms, m)
		peers = append(peers, m.id+"="+m.raft+"="+m.resp)
	}
	for _, m := range ms {
		m.start(t, strings.Join(peers, ","))
	}
	defer func() {
		for _, m := range ms {
			m.p.stop()
		}
	}()
	leader(t, ms)
	for _, m := range ms {
		waitReady(t, m.c)
	}
	call := []any{"RL.ACQUIRE", "k", "QUOTA", 3, "PER", "day"}

	// One call on each node spends the quota; a fourth is denied anywhere.
	before := now()
	for i, m := range ms {
		admitAfterReservation(t, m, call, fmt.Sprintf("call %d on %s before midnight", i+1, m.id))
	}
	for _, m := range ms {
		// A node that holds no units says 100 ms (it will ask again),
		// one that knows the quota spent says when the period ends.
		if r := acquire(t, m.c, call...); r[0] != 0 {
			t.Fatalf("%s once the quota is spent: %v, want denied", m.id, r)
		} else if r[3] != 100 {
			msUntil(t, m.id+"'s retry_after_ms", r[3], end, before, now())
		}
	}
	if !now().Before(end) {
		return false
	}

	// After midnight: the first node admits again, then each other node
	// once, and then none: the new day's 3, exactly, over the three.
	eventually(t, lead+30*time.Second, "n1 to admit after midnight", func() bool {
		return acquire(t, ms[0].c, call...)[0] == 1
	})
	for _, m := range ms[1:] {
		before := now()
		r := admitAfterReservation(t, m, call, m.id+" after midnight")
		msUntil(t, m.id+"'s reset_after_ms after midnight", r[4], end.Add(24*time.Hour), before, now())
	}
	for _, m := range ms {
		if r := acquire(t, m.c, call...); r[0] != 0 {
			t.Fatalf("%s after the new day's 3: %v, want denied", m.id, r)
		}
	}
	return true
}

// admitAfterReservation calls until the node admits: a node without units
// reserved refuses with retry_after_ms 100 until the cluster grants it some
// (a Raft commit, longer on a loaded machine); a refusal for the rest of
// the period fails the test.
func admitAfterReservation(t *testing.T, m *member, call []any, what string) []int64 {
	t.Helper()
	var r []int64
	eventually(t, 20*time.Second, what+" to be admitted", func() bool {
		r = acquire(t, m.c, call...)
		if r[0] == 0 && r[3] > 100 {
			t.Fatalf("%s: %v, want admitted", what, r)
		}
		return r[0] == 1
	})
	return r
}
