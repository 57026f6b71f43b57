package budget

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/engine"
)

var t0 = int64(19676*86400) * int64(time.Second)

// build imports nodes (path → JSON config) into an empty tree.
func buildTree(t *testing.T, nodes map[string]string) *Tree {
	t.Helper()
	doc := `{"budgets":{`
	i := 0
	for p, c := range nodes {
		if i > 0 {
			doc += ","
		}
		doc += fmt.Sprintf("%q:%s", p, c)
		i++
	}
	doc += "}}"
	cfgs, err := ParseExport([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	ch, err := Empty.Import(cfgs, true, 1)
	if err != nil {
		t.Fatal(err)
	}
	return ch.Tree
}

type acq struct {
	path, subject string
	cost          int64 // 0: default
	allowed       int
	remaining     int64
	limitedBy     string
}

func runCalls(t *testing.T, tr *Tree, s *engine.Store, calls []acq) {
	t.Helper()
	var sc Scratch
	for i, a := range calls {
		c := Call{Path: []byte(a.path), Subject: []byte(a.subject)}
		if a.cost > 0 {
			c.Cost, c.HasCost = a.cost, true
		}
		o, err := tr.Acquire(s, t0, &c, &sc)
		if err != nil {
			t.Fatalf("call %d %s: %v", i, a.path, err)
		}
		if o.Allowed != a.allowed || o.Result.Remaining != a.remaining || string(o.LimitedBy) != a.limitedBy {
			t.Fatalf("call %d %s#%s: got allowed=%d remaining=%d limited_by=%s; want %d %d %s",
				i, a.path, a.subject, o.Allowed, o.Result.Remaining, o.LimitedBy, a.allowed, a.remaining, a.limitedBy)
		}
	}
}

// repeat counts how many of n identical calls are admitted.
func repeat(t *testing.T, tr *Tree, s *engine.Store, path, subject string, n int) (admitted int, last Outcome) {
	t.Helper()
	var sc Scratch
	for i := 0; i < n; i++ {
		o, err := tr.Acquire(s, t0, &Call{Path: []byte(path), Subject: []byte(subject)}, &sc)
		if err != nil {
			t.Fatal(err)
		}
		if o.Allowed == 1 {
			admitted++
		}
		last = o
		last.LimitedBy = append([]byte(nil), o.LimitedBy...)
	}
	return admitted, last
}

const workedSystem = `{"sharing":"enforce","sustained":{"rate":10000,"window":"minute"},"burst":{"capacity":1000},"budget":{"mode":"allocated","total":10000}}`
const workedPartner = `{"sharing":"enforce","sustained":{"rate":5000,"window":"minute"},"burst":{"capacity":500},"budget":{"mode":"allocated","total":5000,"overcommit_ratio":1.2}}`
const workedTenant = `{"sustained":{"rate":1000,"window":"minute"},"burst":{"capacity":100}}`

func TestWorkedExample(t *testing.T) {
	tr := buildTree(t, map[string]string{"system": workedSystem, "system/p": workedPartner, "system/p/t": workedTenant})
	n := tr.Get("system/p/t")
	eff, ok := n.Effective()
	if !ok || eff.Rate != 1000 || eff.Window != int64(time.Minute) || eff.Burst != 100 {
		t.Fatalf("effective %+v", eff)
	}
	var got map[string]any
	json.Unmarshal(tr.NodeJSON(n), &got)
	if e := got["effective"].(map[string]any); e["rate"] != 1000.0 || e["window"] != "minute" || e["burst"] != 100.0 {
		t.Fatalf("GET effective %v", e)
	}
	s := engine.New(engine.Options{Shards: 8})
	admitted, last := repeat(t, tr, s, "system/p/t", "", 101)
	if admitted != 100 || last.Allowed != 0 || string(last.LimitedBy) != "system/p/t" || last.Levels != 3 {
		t.Fatalf("admitted %d; 101st: %+v limited_by=%s", admitted, last, last.LimitedBy)
	}
	// The partner and system aggregates were charged exactly 100, not 101.
	if r := s.Acquire(t0, engine.Request{Space: engine.SpaceBudget, Key: []byte("system/p\x01"), Limit: tr.Get("system/p").agg}, 0, true); r.Remaining != 400 {
		t.Fatalf("partner aggregate has %d left, want 400", r.Remaining)
	}
}

func TestAllocationCheck(t *testing.T) {
	parent := func(ratio string) string {
		return `{"sustained":{"rate":5000,"window":"minute"},"budget":{"mode":"allocated","total":5000,"overcommit_ratio":` + ratio + `}}`
	}
	child := func(rate int) Config {
		c, err := ParseJSON([]byte(fmt.Sprintf(`{"sustained":{"rate":%d,"window":"minute"}}`, rate)))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	for _, ratio := range []string{"1.0", "1.5"} {
		tr := buildTree(t, map[string]string{"p": parent(ratio)})
		ch, err := tr.Set("p/a", child(2000), 2)
		if err != nil || ch.Warn != "" {
			t.Fatal(err, ch.Warn)
		}
		ch, err = ch.Tree.Set("p/b", child(1000), 3)
		if err != nil || ch.Warn != "" {
			t.Fatal(err, ch.Warn)
		}
		before := ch.Tree
		ch, err = before.Set("p/c", child(3000), 4)
		switch ratio {
		case "1.0":
			if err == nil || err.Error() != "BUDGET children allocate 6000/minute, parent total 5000/minute × overcommit 1.0" {
				t.Fatalf("at 1.0: %v", err)
			}
			if before.Get("p/c") != nil {
				t.Fatal("refused change leaked into the tree")
			}
		case "1.5":
			if err != nil || ch.Warn != "overcommitted: children allocate 6000/minute, parent total 5000/minute × overcommit 1.5" {
				t.Fatalf("at 1.5: %v %q", err, ch.Warn)
			}
			if got := ch.Tree.Allocated(ch.Tree.Get("p")); got != "6000" {
				t.Fatalf("allocated %s", got)
			}
			// Lowering the parent's total below the children's sum is refused.
			low, _ := ParseJSON([]byte(`{"sustained":{"rate":5000,"window":"minute"},"budget":{"mode":"allocated","total":3000,"overcommit_ratio":1.5}}`))
			if _, err := ch.Tree.Set("p", low, 5); err == nil || !strings.HasPrefix(err.Error(), "BUDGET children allocate 6000/minute, parent total 3000/minute") {
				t.Fatalf("lowering total: %v", err)
			}
		}
	}
	// Children in other windows are normalised to the parent's.
	tr := buildTree(t, map[string]string{"p": parent("1.0"), "p/s": `{"sustained":{"rate":50,"window":"second"}}`, "p/h": `{"sustained":{"rate":30,"window":"hour"}}`})
	if got := tr.Allocated(tr.Get("p")); got != "3000.5" {
		t.Fatalf("allocated %s, want 3000.5 (50/s = 3000/min, 30/h = 0.5/min)", got)
	}
}

func TestSharedPoolFirstComeFirstServed(t *testing.T) {
	tr := buildTree(t, map[string]string{
		"pool":   `{"sustained":{"rate":100,"window":"minute"},"budget":{"mode":"shared","total":100}}`,
		"pool/a": `{}`,
		"pool/b": `{}`,
	})
	s := engine.New(engine.Options{Shards: 8})
	a, _ := repeat(t, tr, s, "pool/a", "", 70)
	b, last := repeat(t, tr, s, "pool/b", "", 50)
	if a != 70 || b != 30 || string(last.LimitedBy) != "pool" {
		t.Fatalf("a took %d, b took %d, last limited by %s", a, b, last.LimitedBy)
	}
	if n, _ := repeat(t, tr, s, "pool/a", "", 1); n != 0 {
		t.Fatal("a admitted from an empty pool")
	}
	// An unconfigured child draws on the pool too.
	if _, last := repeat(t, tr, s, "pool/zzz", "", 1); last.Allowed != 0 || string(last.LimitedBy) != "pool" {
		t.Fatalf("implicit child: %+v", last)
	}
}

func TestSharingInheritEnforcePrivate(t *testing.T) {
	for _, tc := range []struct {
		sharing   string
		c1, c2    int
		limitedBy string
	}{
		{"inherit", 10, 10, "p/c2"},
		{"enforce", 10, 0, "p"},
		{"private", 20, 20, "p/c2"}, // children are not limited at all
	} {
		t.Run(tc.sharing, func(t *testing.T) {
			tr := buildTree(t, map[string]string{"p": `{"sharing":"` + tc.sharing + `","sustained":{"rate":10,"window":"minute"}}`})
			s := engine.New(engine.Options{Shards: 8})
			c1, _ := repeat(t, tr, s, "p/c1", "", 20)
			c2, last := repeat(t, tr, s, "p/c2", "", 20)
			if c1 != tc.c1 || c2 != tc.c2 {
				t.Fatalf("c1 %d, c2 %d; want %d, %d", c1, c2, tc.c1, tc.c2)
			}
			if tc.sharing == "private" {
				if !last.Unlimited || last.Result.Limit != -1 {
					t.Fatalf("private parent's child: %+v", last)
				}
				return
			}
			if string(last.LimitedBy) != tc.limitedBy {
				t.Fatalf("limited by %s, want %s", last.LimitedBy, tc.limitedBy)
			}
		})
	}
	// A child's own limit is capped by an inherit parent, and not by a private one.
	for sharing, want := range map[string]int64{"inherit": 10, "private": 50} {
		tr := buildTree(t, map[string]string{"p": `{"sharing":"` + sharing + `","sustained":{"rate":10,"window":"minute"}}`,
			"p/c": `{"sustained":{"rate":50,"window":"minute"}}`})
		if eff, _ := tr.Get("p/c").Effective(); eff.Burst != want || eff.Rate != want {
			t.Errorf("%s: child effective %d/%d, want %d", sharing, eff.Rate, eff.Burst, want)
		}
	}
}

func TestScopeUser(t *testing.T) {
	tr := buildTree(t, map[string]string{"api": `{"sustained":{"rate":2,"window":"minute"},"scope":"user"}`})
	s := engine.New(engine.Options{Shards: 8})
	var sc Scratch
	if _, err := tr.Acquire(s, t0, &Call{Path: []byte("api")}, &sc); err == nil || err.Error() != "ERR budget 'api' has scope user: KEY required" {
		t.Fatalf("without KEY: %v", err)
	}
	runCalls(t, tr, s, []acq{
		{path: "api", subject: "alice", allowed: 1, remaining: 1, limitedBy: "api#alice"},
		{path: "api", subject: "alice", allowed: 1, remaining: 0, limitedBy: "api#alice"},
		{path: "api", subject: "alice", allowed: 0, remaining: 0, limitedBy: "api#alice"},
		{path: "api", subject: "bob", allowed: 1, remaining: 1, limitedBy: "api#bob"},
	})
}

func TestDeniedCallConsumesNothing(t *testing.T) {
	tr := buildTree(t, map[string]string{
		"sys":     `{"sharing":"enforce","sustained":{"rate":50,"window":"minute"}}`,
		"sys/t":   `{"sustained":{"rate":20,"window":"minute"}}`,
		"sys/t/u": `{"sustained":{"rate":5,"window":"minute"},"scope":"user"}`,
	})
	s := engine.New(engine.Options{Shards: 8})
	runCalls(t, tr, s, []acq{
		{path: "sys/t/u", subject: "x", cost: 5, allowed: 1, remaining: 0, limitedBy: "sys/t/u#x"},
		{path: "sys/t/u", subject: "x", cost: 1, allowed: 0, remaining: 0, limitedBy: "sys/t/u#x"},
		{path: "sys/t/u", subject: "x", cost: 40, allowed: 0, remaining: 0, limitedBy: "sys/t/u#x"},
		// the aggregate of sys saw only the 5 admitted tokens
		{path: "sys/t2", cost: 45, allowed: 1, remaining: 0, limitedBy: "sys"},
	})
}

func TestCostExample(t *testing.T) {
	tenant := map[string]string{"t": `{"sustained":{"rate":1000,"window":"minute"}}`}
	tr := buildTree(t, tenant)
	s := engine.New(engine.Options{Shards: 8})
	var sc Scratch
	admitted := 0
	for i := 0; i < 101; i++ {
		if o, _ := tr.Acquire(s, t0, &Call{Path: []byte("t"), Cost: 10, HasCost: true}, &sc); o.Allowed == 1 {
			admitted++
		}
	}
	if admitted != 100 {
		t.Fatalf("cost 10: %d admitted, want 100", admitted)
	}
	tr = buildTree(t, tenant)
	s = engine.New(engine.Options{Shards: 8})
	mixed := 0
	for i := 0; i < 50; i++ {
		if o, _ := tr.Acquire(s, t0, &Call{Path: []byte("t"), Cost: 10, HasCost: true}, &sc); o.Allowed == 1 {
			mixed += 10
		}
	}
	for i := 0; i < 600; i++ {
		if o, _ := tr.Acquire(s, t0, &Call{Path: []byte("t")}, &sc); o.Allowed == 1 {
			mixed++
		}
	}
	if mixed != 1000 {
		t.Fatalf("50×10 + singles admitted %d tokens, want 1000", mixed)
	}
	// A node's configured cost is the default COST.
	tr = buildTree(t, map[string]string{"t": `{"sustained":{"rate":100,"window":"minute"},"cost":25}`})
	if n, _ := repeat(t, tr, engine.New(engine.Options{}), "t", "", 10); n != 4 {
		t.Fatalf("cost 25 of 100: %d admitted, want 4", n)
	}
}

func TestStrategies(t *testing.T) {
	tr := buildTree(t, map[string]string{
		"deg": `{"sustained":{"rate":1,"window":"minute"},"strategy":"degrade"}`,
		"q":   `{"sustained":{"rate":600,"window":"minute"},"burst":{"capacity":1},"strategy":"queue","max_wait_ms":500}`,
	})
	s := engine.New(engine.Options{})
	var sc Scratch
	o, _ := tr.Acquire(s, t0, &Call{Path: []byte("deg")}, &sc)
	o2, _ := tr.Acquire(s, t0, &Call{Path: []byte("deg")}, &sc)
	if o.Allowed != 1 || o2.Allowed != 2 || o2.Result.RetryAfter != int64(time.Minute) {
		t.Fatalf("degrade: %+v then %+v", o, o2)
	}
	tr.Acquire(s, t0, &Call{Path: []byte("q")}, &sc)
	o, _ = tr.Acquire(s, t0, &Call{Path: []byte("q")}, &sc)
	if o.Allowed != 1 || o.Result.Wait != int64(100*time.Millisecond) {
		t.Fatalf("queue: %+v", o)
	}
	// An explicit WAIT 0 overrides the queue strategy.
	o, _ = tr.Acquire(s, t0, &Call{Path: []byte("q"), HasWait: true}, &sc)
	if o.Allowed != 0 {
		t.Fatalf("queue with WAIT 0: %+v", o)
	}
}

func TestNoBudgetAndImplicitChildren(t *testing.T) {
	tr := buildTree(t, map[string]string{"a/b": `{"sharing":"inherit","sustained":{"rate":3,"window":"minute"}}`})
	s := engine.New(engine.Options{})
	var sc Scratch
	for _, p := range []string{"a", "x", "a/bc", "ab"} {
		if _, err := tr.Acquire(s, t0, &Call{Path: []byte(p)}, &sc); err == nil || err.Error() != "NOBUDGET no budget node on path '"+p+"'" {
			t.Fatalf("%s: %v", p, err)
		}
	}
	runCalls(t, tr, s, []acq{
		{path: "a/b/c/d", allowed: 1, remaining: 2, limitedBy: "a/b/c/d"},
		{path: "a/b/c", allowed: 1, remaining: 2, limitedBy: "a/b/c"},
		{path: "a/b", allowed: 1, remaining: 2, limitedBy: "a/b"},
	})
}

func TestParseErrorsNameTheField(t *testing.T) {
	cases := map[string]string{
		`{"sustained":{"rate":0}}`:                                         "ERR sustained.rate must be an integer between 1 and 1000000000000",
		`{"sustained":{"rate":"ten"}}`:                                     "ERR sustained.rate must be a number",
		`{"sustained":{"rate":5,"window":"fortnight"}}`:                    "ERR sustained.window must be second, minute, hour, day, week or a duration such as 250ms, 5m, 1h30m, 7d, between 1ms and 3650d",
		`{"sustained":{"rate":5,"window":"3651d"}}`:                        "ERR sustained.window must be second, minute, hour, day, week or a duration such as 250ms, 5m, 1h30m, 7d, between 1ms and 3650d",
		`{"burst":{"capacity":5}}`:                                         "ERR burst.capacity needs sustained.rate",
		`{"sharing":"all"}`:                                                "ERR sharing must be one of private, inherit, enforce",
		`{"budget":{"mode":"allocated"}}`:                                  "ERR budget.total is required when budget.mode is allocated",
		`{"budget":{"mode":"allocated","total":5,"overcommit_ratio":2.5}}`: "ERR budget.overcommit_ratio must be a number between 1.0 and 2.0",
		`{"scope":"planet"}`:                                               "ERR scope must be one of global, tenant, user, ip, route",
		`{"strategy":"pray"}`:                                              "ERR strategy must be one of reject, queue, degrade",
		`{"max_wait_ms":-1}`:                                               "ERR max_wait_ms must be an integer between 0 and 60000",
		`{"cost":-1}`:                                                      "ERR cost must be an integer between 0 and 1000000000000",
		`{"concurrency":1000001}`:                                          "ERR concurrency must be an integer between 0 and 1000000",
		`{"requests":{"rate":0}}`:                                          "ERR requests.rate must be an integer between 1 and 1000000000000",
		`{"requests":{"window":"minute"}}`:                                 "ERR requests.rate is required",
		`{"requests":{"rate":5,"window":"fortnight"}}`:                     "ERR requests.window must be second, minute, hour, day, week or a duration such as 250ms, 5m, 1h30m, 7d, between 1ms and 3650d",
		`{"colour":"red"}`:                                                 `ERR budget config: unknown field "colour"`,
		`[1,2]`:                                                            "ERR budget config is not a JSON object: field  must be a map[string]json.RawMessage",
		`{"sustained":{"rate":5},"algorithm":"fixed_window","burst":{"capacity":9}}`: "ERR burst.capacity must equal sustained.rate for fixed_window (a window admits sustained.rate requests)",
	}
	for in, want := range cases {
		if _, err := ParseJSON([]byte(in)); err == nil || err.Error() != want {
			t.Errorf("%s:\n got %v\nwant %s", in, err, want)
		}
	}
	if _, err := ParseKeywords(bytesArgs("RATE 5 BURST 5 burst 9")); err == nil || err.Error() != "ERR BURST given twice" {
		t.Fatalf("BURST twice: %v", err)
	}
	if _, err := ParseKeywords([][]byte{[]byte("RATE"), []byte("5"), []byte("FROB"), []byte("x")}); err == nil || err.Error() != "ERR syntax error near 'FROB'" {
		t.Errorf("keywords: %v", err)
	}
	for _, p := range []string{"", "a//b", "a b", "a#b", "/a", strings.Repeat("a/", 8) + "a"} {
		if ValidPath(p) == nil {
			t.Errorf("path %q accepted", p)
		}
	}
}

// TestKeywordErrorsNameTheKeyword: in RL.BUDGET SET's keyword form a bad
// value is refused naming the keyword the user wrote, whether it is not a
// number or out of range.
func TestKeywordErrorsNameTheKeyword(t *testing.T) {
	for in, want := range map[string]string{
		"RATE 0":                      "ERR RATE must be an integer between 1 and 1000000000000",
		"RATE five":                   "ERR RATE must be an integer between 1 and 1000000000000",
		"RATE 5 PER 0s":               "ERR PER must be second, minute, hour, day, week or a duration such as 250ms, 5m, 1h30m, 7d, between 1ms and 3650d",
		"RATE 5 PER fortnight":        "ERR PER must be second, minute, hour, day, week or a duration such as 250ms, 5m, 1h30m, 7d, between 1ms and 3650d",
		"RATE 5 BURST 0":              "ERR BURST must be an integer between 1 and 1000000000000",
		"RATE 5 MAXWAIT 60001":        "ERR MAXWAIT must be an integer between 0 and 60000",
		"RATE 5 COST -1":              "ERR COST must be an integer between 0 and 1000000000000",
		"QUOTA 0":                     "ERR QUOTA must be an integer between 1 and 1000000000000",
		"RATE 5 MODE shared TOTAL 0":  "ERR TOTAL must be an integer between 1 and 1000000000000",
		"CONCURRENCY 1000001":         "ERR CONCURRENCY must be an integer between 0 and 1000000",
		"REQUESTS 5 PER 0s":           "ERR REQUESTS … PER must be second, minute, hour, day, week or a duration such as 250ms, 5m, 1h30m, 7d, between 1ms and 3650d",
		"SHARING all":                 "ERR SHARING must be one of private, inherit, enforce",
		"RATE 5 RESPONSE_HEADERS may": "ERR RESPONSE_HEADERS must be yes or no",
		"RATE 5 ALGO magic":           "ERR ALGO must be one of token_bucket, gcra, sliding_window, fixed_window, leaky_bucket",
		"RATE 5 OVERCOMMIT 3":         "ERR OVERCOMMIT must be a number between 1.0 and 2.0",
	} {
		if _, err := ParseKeywords(bytesArgs(in)); err == nil || err.Error() != want {
			t.Errorf("%s:\n got %v\nwant %s", in, err, want)
		}
	}
}

func TestKeywordsMatchJSON(t *testing.T) {
	kw, err := ParseKeywords(bytesArgs("RATE 5000 PER minute BURST 500 SHARING enforce MODE allocated TOTAL 5000 OVERCOMMIT 1.2 SCOPE user STRATEGY queue MAXWAIT 250 COST 2 ALGO gcra CONCURRENCY 7 REQUESTS 60 PER minute"))
	if err != nil {
		t.Fatal(err)
	}
	js, err := ParseJSON([]byte(`{"rate_limit":{"sharing":"enforce","algorithm":"gcra","sustained":{"rate":5000,"window":"minute"},"burst":{"capacity":500},
		"budget":{"mode":"allocated","total":5000,"overcommit_ratio":1.2},"scope":"user","strategy":"queue","max_wait_ms":250,"cost":2,"concurrency":7,"requests":{"rate":60,"window":"minute"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if kw != js {
		t.Fatalf("keyword %+v\n   json %+v", kw, js)
	}
	// The full form round-trips.
	b, _ := json.Marshal(js)
	back, err := ParseJSON(b)
	if err != nil || back != js || !strings.Contains(string(b), `"concurrency":7`) || !strings.Contains(string(b), `"requests":{"rate":60,"window":"minute"}`) {
		t.Fatalf("round trip %s: %+v %v", b, back, err)
	}
	// A node without a concurrency limit is written as before.
	b, _ = json.Marshal(Config{})
	if strings.Contains(string(b), "concurrency") || strings.Contains(string(b), "requests") {
		t.Fatalf("no limit written as %s", b)
	}
	if _, err := ParseKeywords(bytesArgs("CONCURRENCY many")); err == nil || err.Error() != "ERR CONCURRENCY must be an integer between 0 and 1000000" {
		t.Fatalf("CONCURRENCY many: %v", err)
	}
	if _, err := ParseKeywords(bytesArgs("REQUESTS many")); err == nil || err.Error() != "ERR REQUESTS must be an integer between 1 and 1000000000000" {
		t.Fatalf("REQUESTS many: %v", err)
	}
	// REQUESTS without PER: per second, as RATE.
	kw, err = ParseKeywords(bytesArgs("RATE 10 REQUESTS 3"))
	if err != nil || kw.RequestsRate != 3 || kw.RequestsWindow != time.Second {
		t.Fatalf("REQUESTS 3: %+v %v", kw, err)
	}
}

func bytesArgs(s string) [][]byte {
	var out [][]byte
	for _, f := range strings.Fields(s) {
		out = append(out, []byte(f))
	}
	return out
}

func TestExportImportRoundTrip(t *testing.T) {
	tr := buildTree(t, map[string]string{"system": workedSystem, "system/p": workedPartner, "system/p/t": workedTenant})
	cfgs, err := ParseExport(tr.Export())
	if err != nil {
		t.Fatal(err)
	}
	ch, err := Empty.Import(cfgs, true, 7)
	if err != nil {
		t.Fatal(err)
	}
	if string(ch.Tree.Export()) != strings.Replace(string(tr.Export()), `"version":1`, `"version":7`, 1) {
		t.Fatalf("round trip differs:\n%s\n%s", tr.Export(), ch.Tree.Export())
	}
	if got := ch.Tree.Paths("system/"); len(got) != 2 || got[0] != "system/p" {
		t.Fatalf("paths %v", got)
	}
	// DEL needs RECURSIVE for a node with children.
	if _, _, err := ch.Tree.Del("system", false, 8); err == nil || err.Error() != "BUDGET budget 'system' has children: use RL.BUDGET DEL system RECURSIVE" {
		t.Fatalf("del: %v", err)
	}
	nt, n, err := ch.Tree.Del("system", true, 8)
	if err != nil || n != 3 || nt.Len() != 0 {
		t.Fatalf("recursive del: %d %v", n, err)
	}
}

func BenchmarkAcquireDepth4(b *testing.B) {
	nodes := map[string]Config{}
	for _, kv := range [][2]string{
		{"system", `{"sharing":"enforce","sustained":{"rate":100000000,"window":"second"}}`},
		{"system/p", `{"sharing":"enforce","sustained":{"rate":10000000,"window":"second"}}`},
		{"system/p/t", `{"sharing":"enforce","sustained":{"rate":1000000,"window":"second"}}`},
		{"system/p/t/api", `{"sustained":{"rate":1000000,"window":"second"},"scope":"user"}`},
	} {
		c, err := ParseJSON([]byte(kv[1]))
		if err != nil {
			b.Fatal(err)
		}
		nodes[kv[0]] = c
	}
	ch, err := Empty.Import(nodes, true, 1)
	if err != nil {
		b.Fatal(err)
	}
	s := engine.New(engine.Options{})
	var sc Scratch
	c := Call{Path: []byte("system/p/t/api"), Subject: []byte("user-42")}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ch.Tree.Acquire(s, t0+int64(i)*1000, &c, &sc)
	}
}

// bigTree returns a tree of system, 100 partners and 99 tenants each
// (with user-scoped tenants, 9,900 of them), all enforcing: 10,001 nodes.
func bigTree(tb testing.TB) map[string]Config {
	tb.Helper()
	nodes := map[string]Config{}
	add := func(p, js string) {
		c, err := ParseJSON([]byte(js))
		if err != nil {
			tb.Fatal(err)
		}
		nodes[p] = c
	}
	add("system", `{"sharing":"enforce","sustained":{"rate":100000000,"window":"second"}}`)
	for i := 0; i < 100; i++ {
		partner := fmt.Sprintf("system/p%d", i)
		add(partner, `{"sharing":"enforce","sustained":{"rate":1000000,"window":"second"}}`)
		for j := 0; j < 99; j++ {
			add(fmt.Sprintf("%s/t%d", partner, j), `{"sharing":"enforce","sustained":{"rate":10000,"window":"second"},"scope":"user"}`)
		}
	}
	if len(nodes) != 10001 {
		tb.Fatalf("%d nodes", len(nodes))
	}
	return nodes
}

func BenchmarkAcquireDepth4In10kTree(b *testing.B) {
	ch, err := Empty.Import(bigTree(b), true, 1)
	if err != nil {
		b.Fatal(err)
	}
	s := engine.New(engine.Options{})
	var sc Scratch
	// system/p42/t7 is configured; .../api is its implicit child: depth 4,
	// four buckets (three enforcing aggregates and the user's own).
	c := Call{Path: []byte("system/p42/t7/api"), Subject: []byte("user-42")}
	if o, err := ch.Tree.Acquire(s, t0, &c, &sc); err != nil || o.Levels != 4 {
		b.Fatalf("levels %d, %v", o.Levels, err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ch.Tree.Acquire(s, t0+int64(i)*1000, &c, &sc)
	}
}

func BenchmarkImport10k(b *testing.B) {
	nodes := bigTree(b)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := Empty.Import(nodes, true, 1); err != nil {
			b.Fatal(err)
		}
	}
}

func TestOddWindowsRoundTrip(t *testing.T) {
	for _, w := range []string{"1500ms", "90m", "36h", "7d", "2w"} {
		c, err := ParseKeywords(bytesArgs("RATE 3 PER " + w))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(c)
		back, err := ParseJSON(b)
		if err != nil || back != c {
			t.Fatalf("%s: %s → %+v %v", w, b, back, err)
		}
	}
}

func TestCallPathsCannotReachOtherBuckets(t *testing.T) {
	tr := buildTree(t, map[string]string{
		"web2":   `{"sharing":"inherit","sustained":{"rate":100,"window":"minute"}}`,
		"web2/x": `{"sustained":{"rate":5,"window":"minute"},"scope":"user"}`,
	})
	s := engine.New(engine.Options{})
	var sc Scratch
	for _, p := range []string{"web2/x#bob", "web2/y\x01", "web2//x", "web2/x/", "a b"} {
		if _, err := tr.Acquire(s, t0, &Call{Path: []byte(p), Cost: 5, HasCost: true}, &sc); err == nil || !strings.HasPrefix(err.Error(), "ERR budget path") {
			t.Errorf("%q: %v", p, err)
		}
	}
	if o, _ := tr.Acquire(s, t0, &Call{Path: []byte("web2/x"), Subject: []byte("bob")}, &sc); o.Allowed != 1 || o.Result.Remaining != 4 {
		t.Fatalf("bob's bucket was touched by a crafted path: %+v", o)
	}
}

// An enforcing node called by its own path has no bucket but its
// aggregate, which its children's calls draw on too: RL.RESET of the path
// answers 0 and leaves it alone (docs/commands.md, RL.RESET).
func TestResetOfAnEnforcingNodeByItsPath(t *testing.T) {
	tr := buildTree(t, map[string]string{"ent": `{"sharing":"enforce","sustained":{"rate":3,"window":"minute"}}`})
	s := engine.New(engine.Options{})
	var sc Scratch
	repeat(t, tr, s, "ent", "", 2)
	if ok, err := tr.Reset(s, &Call{Path: []byte("ent")}, &sc); ok || err != nil {
		t.Fatalf("reset: %v %v; want false: the aggregate is not the call's own bucket", ok, err)
	}
	if n, _ := repeat(t, tr, s, "ent", "", 3); n != 1 {
		t.Fatalf("after reset %d admitted; want 1: the aggregate keeps the 2 spent before", n)
	}
	// A child's call spends from the aggregate; resetting the parent's
	// path does not give it back, resetting the child's own bucket neither.
	tr = buildTree(t, map[string]string{"ent": `{"sharing":"enforce","sustained":{"rate":3,"window":"minute"}}`})
	s = engine.New(engine.Options{})
	repeat(t, tr, s, "ent/child", "", 3)
	if ok, err := tr.Reset(s, &Call{Path: []byte("ent")}, &sc); ok || err != nil {
		t.Fatalf("reset of the parent after a child's calls: %v %v; want false", ok, err)
	}
	if ok, err := tr.Reset(s, &Call{Path: []byte("ent/child")}, &sc); !ok || err != nil {
		t.Fatalf("reset of the child's own bucket: %v %v; want true", ok, err)
	}
	if n, _ := repeat(t, tr, s, "ent/other", "", 3); n != 0 {
		t.Fatalf("after the resets another child got %d; the aggregate is spent", n)
	}
}
