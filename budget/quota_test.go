package budget

import (
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/quota"
)

func at(t *testing.T, zone, clock string) int64 {
	t.Helper()
	loc, err := time.LoadLocation(zone)
	if err != nil {
		t.Fatal(err)
	}
	tm, err := time.ParseInLocation("2006-01-02 15:04", clock, loc)
	if err != nil {
		t.Fatal(err)
	}
	return tm.UnixNano()
}

func TestQuotaConfigIsValidated(t *testing.T) {
	for _, c := range []struct{ in, err string }{
		{`{"quota":{"limit":10,"period":"fortnight"}}`, "quota.period must be one of hour, day, week, month, year"},
		{`{"quota":{"limit":10,"period":"day","timezone":"Mars/Olympus"}}`, "quota time zone 'Mars/Olympus' is not an IANA time zone name"},
		{`{"quota":{"limit":10,"period":"day","timezone":"Local"}}`, "quota time zone 'Local'"},
		{`{"quota":{"limit":0}}`, "quota.limit must be an integer between 1 and"},
		{`{"quota":{"period":"day"}}`, "quota.limit is required"},
	} {
		_, err := ParseJSON([]byte(c.in))
		if err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("%s: %v, want %q", c.in, err, c.err)
		}
	}
	for _, c := range []struct{ in, err string }{
		{"RATE 5 QUOTA 10 PER fortnight", "QUOTA … PER must be one of hour, day, week, month, year"},
		{"QUOTA 10 PER day TZ Nowhere/Town", "quota time zone 'Nowhere/Town'"},
		{"QUOTA ten", "QUOTA must be an integer between 1 and"},
	} {
		_, err := ParseKeywords(bytesArgs(c.in))
		if err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("%s: %v, want %q", c.in, err, c.err)
		}
	}
	kw, err := ParseKeywords(bytesArgs("RATE 5 QUOTA 1000 TZ Europe/Paris PER week"))
	if err != nil {
		t.Fatal(err)
	}
	js, err := ParseJSON([]byte(`{"sustained":{"rate":5},"quota":{"limit":1000,"period":"week","timezone":"Europe/Paris"}}`))
	if err != nil {
		t.Fatal(err)
	}
	a, _ := kw.MarshalJSON()
	b, _ := js.MarshalJSON()
	if string(a) != string(b) || !strings.Contains(string(a), `"quota":{"limit":1000,"period":"week","timezone":"Europe/Paris"}`) {
		t.Fatalf("keywords %s\njson %s", a, b)
	}
	// The period defaults to month, the zone to UTC.
	c, err := ParseJSON([]byte(`{"quota":{"limit":7}}`))
	if err != nil || c.Quota.Period != "month" || c.Quota.Timezone != "UTC" || c.Quota.Per().String() != "month" {
		t.Fatalf("defaults: %+v %v", c.Quota, err)
	}
}

// committed stands in for the cluster's committed counts.
type committed map[string]int64

func (m committed) QuotaUsed(key []byte, start, end int64) int64 { return m[string(key)] }

// A counter exists if the map has it; with "full" set there is no room
// for others.
func (m committed) QuotaRoom(key []byte) bool {
	_, ok := m[string(key)]
	return ok || m["full"] == 0
}

func quotaCall(tr *Tree, s *engine.Store, now int64, path, subject string, cost int64, q committed) Outcome {
	c := Call{Path: []byte(path), Subject: []byte(subject)}
	s.SetQuotaSource(nil)
	if q != nil {
		c.Quotas = q
		s.SetQuotaSource(q)
	}
	if cost > 0 {
		c.Cost, c.HasCost = cost, true
	}
	var sc Scratch
	o, err := tr.Acquire(s, now, &c, &sc)
	if err != nil {
		panic(err)
	}
	return o
}

func TestQuotaAtEveryChargedLevel(t *testing.T) {
	tr := buildTree(t, map[string]string{
		// A plan: every user gets 10/s and 5 a day.
		"plans/free": `{"sustained":{"rate":10},"scope":"user","quota":{"limit":5,"period":"day"}}`,
		// A partner whose tenants share 8 a day between them.
		"p":   `{"sharing":"enforce","sustained":{"rate":1000},"quota":{"limit":8,"period":"day"}}`,
		"p/a": `{"sustained":{"rate":100}}`,
		"p/b": `{"sustained":{"rate":100}}`,
		// Tenants created on the fly inherit 3 a month each.
		"t": `{"sharing":"inherit","sustained":{"rate":100},"quota":{"limit":3,"period":"month"}}`,
		// A quota and no rate at all.
		"q": `{"quota":{"limit":2,"period":"hour"}}`,
		// An enforcing node with only a quota holds its subtree to it.
		"e":   `{"sharing":"enforce","quota":{"limit":4,"period":"day"}}`,
		"e/a": `{"sustained":{"rate":100}}`,
		"e/b": `{"sustained":{"rate":100}}`,
	})
	s := engine.New(engine.Options{Shards: 4})
	now := at(t, "UTC", "2026-11-22 18:00")
	midnight := at(t, "UTC", "2026-11-23 00:00")
	for i := 0; i < 5; i++ {
		if o := quotaCall(tr, s, now, "plans/free", "alice", 1, nil); o.Allowed != 1 || o.Result.Remaining != int64(4-i) || string(o.LimitedBy) != "quota:plans/free#alice" {
			t.Fatalf("alice call %d: %+v %s", i, o.Result, o.LimitedBy)
		}
	}
	o := quotaCall(tr, s, now, "plans/free", "alice", 1, nil)
	if o.Allowed != 0 || o.Result.RetryAfter != midnight-now || string(o.LimitedBy) != "quota:plans/free#alice" {
		t.Fatalf("alice's 6th: %+v %s", o.Result, o.LimitedBy)
	}
	if o := quotaCall(tr, s, now, "plans/free", "bob", 1, nil); o.Allowed != 1 {
		t.Fatalf("bob has his own quota: %+v", o)
	}
	// The next day alice starts over; the committed count of that day
	// (from other nodes) counts too.
	next := committed{quota.BudgetKey + "plans/free#alice": 3}
	if o := quotaCall(tr, s, midnight, "plans/free", "alice", 2, next); o.Allowed != 1 || o.Result.Remaining != 0 {
		t.Fatalf("next day: %+v", o.Result)
	}
	if o := quotaCall(tr, s, midnight, "plans/free", "alice", 1, next); o.Allowed != 0 {
		t.Fatalf("next day, 3 committed + 2: %+v", o.Result)
	}
	// At the limit of counters, a call that would start one is refused
	// (naming why); known counters and dry runs go on.
	full := committed{"full": 1, quota.BudgetKey + "plans/free#alice": 0}
	s.SetQuotaSource(full)
	var sc Scratch
	if _, err := tr.Acquire(s, midnight, &Call{Path: []byte("plans/free"), Subject: []byte("carol"), Quotas: full}, &sc); err != ErrQuotaCountersFull {
		t.Fatalf("a new counter when full: %v", err)
	}
	if _, err := tr.Acquire(s, midnight, &Call{Path: []byte("plans/free"), Subject: []byte("carol"), Quotas: full, DryRun: true}, &sc); err != nil {
		t.Fatalf("a dry run when full: %v", err)
	}
	if o := quotaCall(tr, s, midnight, "plans/free", "alice", 0, full); o.Allowed != 1 {
		t.Fatalf("a known counter when full: %+v", o.Result)
	}

	// p's quota is an aggregate over its tenants.
	admitted := 0
	for i := 0; i < 10; i++ {
		path := []string{"p/a", "p/b"}[i%2]
		if o := quotaCall(tr, s, now, path, "", 1, nil); o.Allowed == 1 {
			admitted++
		} else if string(o.LimitedBy) != "quota:p" {
			t.Fatalf("denied by %s", o.LimitedBy)
		}
	}
	if admitted != 8 {
		t.Fatalf("p/a and p/b admitted %d under p's 8 a day", admitted)
	}

	// Implicit children of t each have 3 a month.
	for _, tenant := range []string{"t/x", "t/y"} {
		n := 0
		for i := 0; i < 5; i++ {
			if o := quotaCall(tr, s, now, tenant, "", 1, nil); o.Allowed == 1 {
				n++
			} else if string(o.LimitedBy) != "quota:"+tenant {
				t.Fatalf("%s denied by %s", tenant, o.LimitedBy)
			}
		}
		if n != 3 {
			t.Fatalf("%s admitted %d of 3 a month", tenant, n)
		}
	}

	admitted = 0
	for i := 0; i < 10; i++ {
		if o := quotaCall(tr, s, now, []string{"e/a", "e/b", "e/unconfigured"}[i%3], "", 1, nil); o.Allowed == 1 {
			admitted++
		} else if string(o.LimitedBy) != "quota:e" {
			t.Fatalf("e's subtree denied by %s", o.LimitedBy)
		}
	}
	if admitted != 4 {
		t.Fatalf("e's subtree admitted %d under e's 4 a day", admitted)
	}

	// A quota alone: 2 an hour, COST above it never fits.
	if o := quotaCall(tr, s, now, "q", "", 3, nil); o.Allowed != 0 || o.Result.RetryAfter != -1 || o.Result.Limit != 2 {
		t.Fatalf("cost 3 of 2: %+v", o.Result)
	}
	if o := quotaCall(tr, s, now, "q", "", 2, nil); o.Allowed != 1 || o.Result.Remaining != 0 || string(o.LimitedBy) != "quota:q" {
		t.Fatalf("cost 2 of 2: %+v %s", o.Result, o.LimitedBy)
	}
	if o := quotaCall(tr, s, now+int64(time.Hour), "q", "", 2, nil); o.Allowed != 1 {
		t.Fatalf("the next hour: %+v", o.Result)
	}
}

func TestQuotaRefundStatusAndReset(t *testing.T) {
	tr := buildTree(t, map[string]string{
		"org":      `{"sharing":"enforce","sustained":{"rate":1000},"quota":{"limit":100,"period":"month","timezone":"Europe/Paris"}}`,
		"org/team": `{"sustained":{"rate":1000},"scope":"user","quota":{"limit":40,"period":"week"}}`,
	})
	s := engine.New(engine.Options{Shards: 4})
	now := at(t, "Europe/Paris", "2026-11-22 18:00")
	var sc Scratch
	call := Call{Path: []byte("org/team"), Subject: []byte("u1"), Cost: 30, HasCost: true}
	if o, err := tr.Acquire(s, now, &call, &sc); err != nil || o.Allowed != 1 || string(o.LimitedBy) != "quota:org/team#u1" || o.Result.Remaining != 10 {
		t.Fatalf("30 of 40: %+v %s %v", o.Result, o.LimitedBy, err)
	}
	st, ok, err := tr.Quota(s, now, &Call{Path: []byte("org/team"), Subject: []byte("u1")}, &sc)
	if err != nil || !ok || string(st.Level) != "org/team#u1" || st.Used != 30 || st.Limit != 40 || st.Period.String() != "week" ||
		st.End != at(t, "UTC", "2026-11-23 00:00") {
		t.Fatalf("status %+v %v %v", st, ok, err)
	}
	// u2 and u3 spend 65 more of org's 100: org is then the tightest for
	// u1 too.
	call.Subject, call.Cost = []byte("u2"), 35
	tr.Acquire(s, now, &call, &sc)
	call.Subject, call.Cost = []byte("u3"), 30
	tr.Acquire(s, now, &call, &sc)
	st, _, _ = tr.Quota(s, now, &Call{Path: []byte("org/team"), Subject: []byte("u1")}, &sc)
	if string(st.Level) != "org" || st.Used != 95 || st.Period.Zone() != "Europe/Paris" || st.End != at(t, "Europe/Paris", "2026-12-01 00:00") {
		t.Fatalf("org status %+v", st)
	}
	// A refund gives the quota back at every level.
	if o, err := tr.Refund(s, now, &Call{Path: []byte("org/team"), Subject: []byte("u1")}, 30, &sc); err != nil || o.Result.Remaining != 35 || o.Result.Limit != 100 {
		t.Fatalf("after refund: %+v %v", o.Result, err)
	}
	if st, _, _ := tr.Quota(s, now, &Call{Path: []byte("org")}, &sc); st.Used != 65 {
		t.Fatalf("org after refund: %+v", st)
	}
	// RL.RESET leaves quotas alone; RL.QUOTA RESET forgets the target's.
	if _, err := tr.Reset(s, &Call{Path: []byte("org/team"), Subject: []byte("u2")}, &sc); err != nil {
		t.Fatal(err)
	}
	if st, _, _ := tr.Quota(s, now, &Call{Path: []byte("org/team"), Subject: []byte("u2")}, &sc); st.Used != 35 || string(st.Level) != "org/team#u2" {
		t.Fatalf("RL.RESET touched the quota: %+v", st)
	}
	keys, err := tr.QuotaKeys(&Call{Path: []byte("org/team"), Subject: []byte("u2")}, &sc)
	if err != nil || strings.Join(keys, ",") != "b|org/team#u2" {
		t.Fatalf("keys for u2: %v %v", keys, err)
	}
	keys, _ = tr.QuotaKeys(&Call{Path: []byte("org")}, &sc)
	if strings.Join(keys, ",") != "b|org\x01" {
		t.Fatalf("keys for org: %q", keys)
	}
	if _, ok, _ := tr.Quota(s, now, &Call{Path: []byte("nowhere/x")}, &sc); ok {
		t.Fatal("a quota where none is configured")
	}
}

// TestChargeNeverRefuses: a forced charge counts on every level, quotas
// included, past their limits, and the levels then refuse until the debt
// is gone.
func TestChargeNeverRefuses(t *testing.T) {
	tr := buildTree(t, map[string]string{
		"org":      `{"sharing":"enforce","sustained":{"rate":100,"window":"minute"},"quota":{"limit":500,"period":"day"}}`,
		"org/team": `{"sustained":{"rate":1000,"window":"minute"},"scope":"user","quota":{"limit":40,"period":"day"}}`,
	})
	s := engine.New(engine.Options{Shards: 4})
	now := at(t, "UTC", "2026-11-22 18:00")
	var sc Scratch
	u1 := func() *Call { return &Call{Path: []byte("org/team"), Subject: []byte("u1")} }
	o, err := tr.Charge(s, now, u1(), 60, &sc)
	if err != nil || o.Allowed != 1 || o.Result.Remaining != 0 {
		t.Fatalf("charge of 60, past the user's quota of 40: %+v %v", o, err)
	}
	if st, _, _ := tr.Quota(s, now, &Call{Path: []byte("org/team"), Subject: []byte("u1")}, &sc); st.Used != 60 || st.Limit != 40 {
		t.Fatalf("u1's quota after the charge: %+v", st)
	}
	if st, _, _ := tr.Quota(s, now, &Call{Path: []byte("org")}, &sc); st.Used != 60 {
		t.Fatalf("org's quota after the charge: %+v", st)
	}
	call := u1()
	call.Cost, call.HasCost = 1, true
	if o, err := tr.Acquire(s, now, call, &sc); err != nil || o.Allowed != 0 {
		t.Fatalf("a call after the charge: %+v %v, want refused (quota spent)", o, err)
	}
	// Another user: org's rate (100 a minute) has 40 left after the 60.
	call.Subject, call.Cost = []byte("u2"), 41
	if o, err := tr.Acquire(s, now, call, &sc); err != nil || o.Allowed != 0 {
		t.Fatalf("u2 asking 41 of org's 40 left: %+v %v, want refused", o.Result, err)
	}
	call.Cost = 40
	if o, err := tr.Acquire(s, now, call, &sc); err != nil || o.Allowed != 1 {
		t.Fatalf("u2 asking org's 40 left: %+v %v, want admitted", o.Result, err)
	}
}
