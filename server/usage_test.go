package server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"github.com/sluice-rl/sluice/raftfsm"
	"io"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/sluice-rl/sluice/testsupport/resptest"
	"github.com/sluice-rl/sluice/testsupport/testkit"
)

func TestUsageReportsNodes(t *testing.T) {
	n := startNode(t, nil)
	clk := fixClock(n.Server)
	clk.Advance(6 * time.Hour)
	c := resptest.Dial(t, n.Server.RespAddr())
	script(t, c, []exchange{
		{cmd("RL.BUDGET", "SET", "acme", "RATE", "10", "PER", "minute", "QUOTA", "100", "PER", "day"), "+OK"},
		{cmd("RL.BUDGET", "SET", "acme/api", "RATE", "5", "PER", "minute", "SCOPE", "user"), "+OK"},
		{cmd("RL.BUDGET", "SET", "beta", "SHARING", "inherit"), "+OK"},
	})
	for i := 0; i < 12; i++ {
		c.Do("RL.ACQUIRE", "acme")
	}
	c.Do("RL.ACQUIRE", "acme/api", "KEY", "u1")
	// The quota's count committed and settled: a read while a batch
	// applies may count it twice for that instant.
	committedQuota(t, n, "b|acme", 10)
	testkit.WaitFor(t, 5*time.Second, "the node to settle its count", func() bool {
		return n.Server.svc.Store.QuotaCount([]byte("b|acme"), t0) == 0
	})
	eighteen := "64800000" // 18 h to midnight UTC
	script(t, c, []exchange{
		{cmd("RL.USAGE", "acme"), `["nodes" [["path" "acme" "rate" 10 "window" "minute" "burst" 10 "remaining" 0 "reset_after_ms" 60000 "limited_by" "acme" "note" "" ` +
			`"quota_level" "acme" "quota_limit" 100 "quota_used" 10 "quota_period" "day" "quota_resets_at" ` + fmt.Sprint((t0+int64(24*time.Hour))/1e9) + ` "quota_reset_after_ms" ` + eighteen + ` ` +
			`"in_flight" 0 "admitted_1m" 10 "refused_1m" 2] ` +
			`["path" "acme/api" "rate" 5 "window" "minute" "burst" 5 "remaining" -1 "reset_after_ms" 0 "limited_by" "" "note" "budget 'acme/api' has scope user: KEY required" ` +
			`"quota_level" "" "quota_limit" 0 "quota_used" 0 "quota_period" "" "quota_resets_at" 0 "quota_reset_after_ms" 0 ` +
			`"in_flight" 0 "admitted_1m" 1 "refused_1m" 0]] "next" ""]`},
		// Per subject on request; a page of one with the path to go on from.
		{cmd("RL.USAGE", "acme/", "KEY", "u1"), `["nodes" [["path" "acme/api" "rate" 5 "window" "minute" "burst" 5 "remaining" 4 "reset_after_ms" 12000 "limited_by" "acme/api#u1" "note" "" ` +
			`"quota_level" "" "quota_limit" 0 "quota_used" 0 "quota_period" "" "quota_resets_at" 0 "quota_reset_after_ms" 0 ` +
			`"in_flight" 0 "admitted_1m" 1 "refused_1m" 0]] "next" ""]`},
		{cmd("RL.USAGE", "COUNT", "1"), `["nodes" [["path" "acme" "rate" 10 "window" "minute" "burst" 10 "remaining" 0 "reset_after_ms" 60000 "limited_by" "acme" "note" "" ` +
			`"quota_level" "acme" "quota_limit" 100 "quota_used" 10 "quota_period" "day" "quota_resets_at" ` + fmt.Sprint((t0+int64(24*time.Hour))/1e9) + ` "quota_reset_after_ms" ` + eighteen + ` ` +
			`"in_flight" 0 "admitted_1m" 10 "refused_1m" 2]] "next" "acme"]`},
		{cmd("RL.USAGE", "AFTER", "acme/api", "COUNT", "5"), `["nodes" [["path" "beta" "rate" 0 "window" "" "burst" 0 "remaining" -1 "reset_after_ms" 0 "limited_by" "" "note" "unlimited" ` +
			`"quota_level" "" "quota_limit" 0 "quota_used" 0 "quota_period" "" "quota_resets_at" 0 "quota_reset_after_ms" 0 ` +
			`"in_flight" 0 "admitted_1m" -1 "refused_1m" -1]] "next" ""]`},
		{cmd("RL.USAGE", "COUNT", "0"), "-ERR COUNT must be an integer between 1 and 1000"},
		{cmd("RL.USAGE", "COUNT", "1001"), "-ERR COUNT must be an integer between 1 and 1000"},
		{cmd("RL.USAGE", "x", "COUNT", "1", "COUNT", "2"), "-ERR COUNT given twice"},
		{cmd("RL.USAGE", "x", "LIMIT", "1"), "-ERR syntax error: RL.USAGE [prefix] [KEY subject] [AFTER path] [COUNT n]"},
		// A minute later the counts are gone.
	})
	clk.Advance(61 * time.Second)
	if got := c.Do("RL.USAGE", "acme", "COUNT", "1"); !strings.Contains(got, `"admitted_1m" 0 "refused_1m" 0`) {
		t.Fatalf("a minute later: %s", got)
	}
}

func TestQuotaListAndSet(t *testing.T) {
	n := startNode(t, nil)
	clk := fixClock(n.Server)
	clk.Advance(6 * time.Hour)
	c := resptest.Dial(t, n.Server.RespAddr())
	c.Do("RL.BUDGET", "SET", "acme", "RATE", "1000", "QUOTA", "100", "PER", "day")
	c.Do("RL.BUDGET", "SET", "beta", "RATE", "1000", "SCOPE", "user", "QUOTA", "50", "PER", "month")
	for i := 0; i < 7; i++ {
		c.Do("RL.ACQUIRE", "acme")
	}
	c.Do("RL.ACQUIRE", "beta", "KEY", "u1")
	c.Do("RL.ACQUIRE", "inl", "QUOTA", "9", "PER", "day")
	committedQuota(t, n, "b|acme", 7)
	committedQuota(t, n, "b|beta#u1", 1)
	committedQuota(t, n, "i|inl", 1)
	day := fmt.Sprint((t0 + int64(24*time.Hour)) / 1e9)
	d := time.Unix(0, t0).UTC()
	next := time.Date(d.Year(), d.Month()+1, 1, 0, 0, 0, 0, time.UTC)
	month := fmt.Sprint(next.Unix())
	left := fmt.Sprint((next.UnixNano() - t0 - int64(6*time.Hour)) / 1e6)
	script(t, c, []exchange{
		{cmd("RL.QUOTA", "LIST"), `["counters" [` +
			`["level" "acme" "kind" "budget" "limit" 100 "used" 7 "remaining" 93 "period" "day UTC" "resets_at" ` + day + ` "reset_after_ms" 64800000] ` +
			`["level" "beta#u1" "kind" "budget" "limit" 50 "used" 1 "remaining" 49 "period" "month UTC" "resets_at" ` + month + ` "reset_after_ms" ` + left + `] ` +
			`["level" "inl" "kind" "inline" "limit" 9 "used" 1 "remaining" 8 "period" "day UTC" "resets_at" ` + day + ` "reset_after_ms" 64800000]] "next" ""]`},
		{cmd("RL.QUOTA", "LIST", "b", "COUNT", "1"), `["counters" [["level" "beta#u1" "kind" "budget" "limit" 50 "used" 1 "remaining" 49 "period" "month UTC" "resets_at" ` + month + ` "reset_after_ms" ` + left + `]] "next" ""]`},
		{cmd("RL.QUOTA", "LIST", "COUNT", "1"), `["counters" [["level" "acme" "kind" "budget" "limit" 100 "used" 7 "remaining" 93 "period" "day UTC" "resets_at" ` + day + ` "reset_after_ms" 64800000]] "next" "acme"]`},
		{cmd("RL.QUOTA", "LIST", "AFTER", "acme", "COUNT", "1"), `["counters" [["level" "beta#u1" "kind" "budget" "limit" 50 "used" 1 "remaining" 49 "period" "month UTC" "resets_at" ` + month + ` "reset_after_ms" ` + left + `]] "next" "beta#u1"]`},
		{cmd("RL.QUOTA", "LIST", "KEY", "x"), "-ERR syntax error: RL.QUOTA LIST [prefix] [AFTER level] [COUNT n]"},
		// A plan change: acme has used 95 of its 100 this day.
		{cmd("RL.QUOTA", "SET", "acme", "USED", "95"), "1"},
		{cmd("RL.QUOTA", "SET", "beta", "KEY", "u1", "USED", "0"), "1"},
		{cmd("RL.QUOTA", "SET", "inl", "QUOTA", "9", "PER", "day", "USED", "9"), "1"},
		{cmd("RL.QUOTA", "SET", "acme", "USED", "-1"), "-ERR USED must be an integer between 0 and 1000000000000"},
		{cmd("RL.QUOTA", "SET", "acme", "95"), "-ERR syntax error: RL.QUOTA SET key|path [KEY subject] USED n"},
		{cmd("RL.QUOTA", "SET", "nothing", "USED", "1"), "-ERR no quota known for 'nothing': not a budget path, and no inline quota committed for that key; give QUOTA n PER period to describe one"},
	})
	committedQuota(t, n, "b|acme", 95)
	committedQuota(t, n, "b|beta#u1", 0)
	script(t, c, []exchange{
		{cmd("RL.QUOTA", "acme"), `["level" "acme" "limit" 100 "used" 95 "remaining" 5 "period" "day" "resets_at" ` + day + ` "reset_after_ms" 64800000]`},
		{cmd("RL.ACQUIRE", "inl", "QUOTA", "9", "PER", "day"), `[0 0 9 64800000 64800000 "quota:inl"]`},
	})
	// Five more, and the sixth is refused; once the node's counts are
	// committed the counter holds 100, not the calls since the set alone.
	for i := 0; i < 5; i++ {
		if got := c.Do("RL.ACQUIRE", "acme"); !strings.HasPrefix(got, "[1 ") {
			t.Fatalf("call %d after the set: %s", i, got)
		}
	}
	if got := c.Do("RL.ACQUIRE", "acme"); !strings.HasPrefix(got, "[0 ") {
		t.Fatalf("the 101st: %s", got)
	}
	committedQuota(t, n, "b|acme", 100)
	if got := c.Do("RL.QUOTA", "LIST", "acme", "COUNT", "1"); !strings.Contains(got, `"used" 100 "remaining" 0 "period" "day UTC"`) {
		t.Fatalf("after the commit: %s", got)
	}
}

func TestTopOnOneNode(t *testing.T) {
	n := startNode(t, nil)
	fixClock(n.Server)
	c := resptest.Dial(t, n.Server.RespAddr())
	for i := 0; i < 5; i++ {
		c.Do("RL.ACQUIRE", "hot", "RATE", "1", "PER", "day")
	}
	c.Do("RL.ACQUIRE", "warm", "RATE", "1", "PER", "day")
	c.Do("RL.ACQUIRE", "warm", "RATE", "1", "PER", "day")
	script(t, c, []exchange{
		{cmd("RL.TOP"), `["by" "denied" "window_s" 300 "total" 5 "bound" 0 "nodes" 1 "unreachable" [] "keys" [["key" "hot" "count" 4 "error" 0] ["key" "warm" "count" 1 "error" 0]]]`},
		{cmd("RL.TOP", "ADMITTED", "COUNT", "1"), `["by" "admitted" "window_s" 300 "total" 2 "bound" 0 "nodes" 1 "unreachable" [] "keys" [["key" "hot" "count" 1 "error" 0]]]`},
		{cmd("RL.TOP", "DENIED", "LOCAL", "COUNT", "1"), `["by" "denied" "window_s" 300 "total" 5 "bound" 0 "nodes" 1 "unreachable" [] "keys" [["key" "hot" "count" 4 "error" 0]]]`},
		{cmd("RL.TOP", "COUNT", "1001"), "-ERR COUNT must be an integer between 1 and 1000"},
		{cmd("RL.TOP", "DENIED", "ADMITTED"), "-ERR ADMITTED given twice"},
		{cmd("RL.TOP", "BY"), "-ERR syntax error: RL.TOP [DENIED|ADMITTED] [COUNT n] [LOCAL]"},
		// Only another node may ask for this node's summary.
		{cmd("RL.TOPSUMMARY", "DENIED"), "-ERR unknown command 'RL.TOPSUMMARY', with args beginning with: 'DENIED' "},
	})
	// Five minutes on, the keys are forgotten.
	clk := fixClock(n.Server)
	clk.Advance(5 * time.Minute)
	if got := c.Do("RL.TOP"); got != `["by" "denied" "window_s" 300 "total" 0 "bound" 0 "nodes" 1 "unreachable" [] "keys" []]` {
		t.Fatalf("five minutes later: %s", got)
	}
}

// A limiter-role user reads usage, top keys and quota counters and
// changes nothing.
func TestUsageRoles(t *testing.T) {
	dir := t.TempDir()
	hash := func(pw string) string { h := sha256.Sum256([]byte(pw)); return hex.EncodeToString(h[:]) }
	acl := filepath.Join(dir, "users.acl")
	os.WriteFile(acl, []byte("user gateway limiter "+hash("gw-secret")+"\nuser ops admin "+hash("ops-secret")+"\n"), 0o600)
	n := startNode(t, func(c *Config) { c.RequirePass = "s3cret"; c.ACLFile = acl })
	fixClock(n.Server)
	c := resptest.Dial(t, n.Server.RespAddr())
	script(t, c, []exchange{
		{cmd("RL.USAGE"), "-NOAUTH Authentication required."},
		{cmd("RL.TOP"), "-NOAUTH Authentication required."},
		{cmd("AUTH", "ops", "ops-secret"), "+OK"},
		{cmd("RL.BUDGET", "SET", "acme", "RATE", "10", "QUOTA", "100", "PER", "day"), "+OK"},
		{cmd("AUTH", "gateway", "gw-secret"), "+OK"},
		{cmd("RL.QUOTA", "SET", "acme", "USED", "3"), "-NOPERM this user has no permissions to run the 'rl.quota' command or its subcommand"},
		{cmd("RL.TOPSUMMARY", "DENIED"), "-ERR unknown command 'RL.TOPSUMMARY', with args beginning with: 'DENIED' "},
	})
	for _, read := range [][]string{{"RL.USAGE"}, {"RL.TOP"}, {"RL.QUOTA", "LIST"}} {
		if got := c.Do(read...); strings.HasPrefix(got, "-") {
			t.Errorf("%v as limiter: %s", read, got)
		}
	}
}

// On a tree of 100,000 nodes every reply stays a page: COUNT caps it, and
// the page costs what it holds.
func TestUsageBoundedOnLargeTree(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a 100,000-node tree")
	}
	// Ten imports of 10,000 nodes: each one Raft entry, which takes
	// seconds under the race detector on a loaded machine.
	n := startNodeHook(t, func(c *Config) { c.ApplyTimeout = 2 * time.Minute },
		func(o *raftfsm.Options) { o.ApplyTimeout = 2 * time.Minute })
	fixClock(n.Server)
	c := resptest.Dial(t, n.Server.RespAddr())
	for part := 0; part < 10; part++ {
		nodes := map[string]json.RawMessage{}
		for i := part * 10_000; i < (part+1)*10_000; i++ {
			nodes[fmt.Sprintf("t%06d", i)] = json.RawMessage(`{"sustained":{"rate":10}}`)
		}
		b, _ := json.Marshal(map[string]any{"budgets": nodes})
		c.Send("RL.BUDGET", "IMPORT", string(b))
		if got, err := c.TryRead(5 * time.Minute); got != "+OK" {
			t.Fatalf("import: %.200s %v", got, err)
		}
	}
	count := func(reply string) int { return strings.Count(reply, `["path" `) }
	if got := c.Do("RL.USAGE"); count(got) != 100 || !strings.HasSuffix(got, `"next" "t000099"]`) {
		t.Fatalf("default page: %d nodes, ends %q", count(got), got[len(got)-30:])
	}
	got := c.Do("RL.USAGE", "AFTER", "t050000", "COUNT", "1000")
	if count(got) != 1000 || !strings.Contains(got, `["path" "t050001" `) || !strings.HasSuffix(got, `"next" "t051000"]`) {
		t.Fatalf("a page in the middle: %d nodes, ends %q", count(got), got[len(got)-30:])
	}
	if got := c.Do("RL.USAGE", "t09999"); count(got) != 10 || !strings.HasSuffix(got, `"next" ""]`) {
		t.Fatalf("by prefix: %d nodes", count(got))
	}
}

// TestAdminHTTP drives every admin and usage endpoint through the node's
// HTTP handler with each role, and checks each request and answer
// against docs/openapi.yaml: a limiter-role user reads and changes
// nothing; errors are problem documents.
func TestAdminHTTP(t *testing.T) {
	dir := t.TempDir()
	hash := func(pw string) string { h := sha256.Sum256([]byte(pw)); return hex.EncodeToString(h[:]) }
	acl := filepath.Join(dir, "users.acl")
	os.WriteFile(acl, []byte("user gateway limiter "+hash("gw-secret")+"\nuser ops admin "+hash("ops-secret")+"\n"), 0o600)
	n := startNode(t, func(c *Config) { c.RequirePass = "s3cret"; c.ACLFile = acl })
	clk := fixClock(n.Server)
	clk.Advance(6 * time.Hour)
	h := n.Server.httpHandler()
	ctx := context.Background()
	doc, err := openapi3.NewLoader().LoadFromFile("../docs/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := doc.Validate(ctx); err != nil {
		t.Fatalf("docs/openapi.yaml: %v", err)
	}
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	opts := &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, IncludeResponseStatus: true}
	do := func(user, method, target, body string) (int, string) {
		t.Helper()
		req := httptest.NewRequest(method, "http://127.0.0.1:9380"+target, strings.NewReader(body))
		req.RemoteAddr = "127.0.0.1:40000"
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		switch user {
		case "ops":
			req.SetBasicAuth("ops", "ops-secret")
		case "gateway":
			req.SetBasicAuth("gateway", "gw-secret")
		}
		// The document's {path} is one segment: the router sees the
		// path's slashes escaped (the node takes them either way).
		routed := req
		if rest, ok := strings.CutPrefix(req.URL.Path, "/v1/budgets/"); ok {
			routed = req.Clone(ctx)
			routed.URL.RawPath = "/v1/budgets/" + url.PathEscape(rest)
			routed.URL.Path = "/v1/budgets/" + rest
		}
		route, params, err := router.FindRoute(routed)
		if err != nil {
			t.Fatalf("%s %s: not in the document: %v", method, target, err)
		}
		in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route, Options: opts}
		reqErr := openapi3filter.ValidateRequest(ctx, in)
		req.Body = io.NopCloser(strings.NewReader(body))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if reqErr != nil && rec.Code != 400 {
			t.Fatalf("%s %s %s: the document refuses the request (%v) but the node answered %d", method, target, body, reqErr, rec.Code)
		}
		out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: rec.Code, Header: rec.Header(),
			Body: io.NopCloser(bytes.NewReader(rec.Body.Bytes())), Options: opts}
		if err := openapi3filter.ValidateResponse(ctx, out); err != nil {
			t.Fatalf("%s %s %s: answer %d %s does not match the document: %v", method, target, body, rec.Code, rec.Body, err)
		}
		return rec.Code, strings.TrimSpace(rec.Body.String())
	}
	// The admitted acquire's count is committed before the quota is set:
	// a batch in flight when a set applies is counted after it (as for
	// RL.QUOTA RESET).
	acquired := func() { committedQuota(t, n, "b|acme", 1) }
	steps := []struct {
		user, method, target, body string
		status                     int
		want                       string // a part of the body
		before                     func()
	}{
		{"", "GET", "/v1/usage", "", 401, `"detail":"authentication required`, nil},
		{"gateway", "PUT", "/v1/budgets/acme", `{"sustained":{"rate":10,"window":"minute"},"quota":{"limit":100,"period":"day"}}`, 403, `"detail":"this user has role limiter; the call needs admin"`, nil},
		{"ops", "PUT", "/v1/budgets/acme", `{"sustained":{"rate":10,"window":"minute"},"quota":{"limit":100,"period":"day"}}`, 200, `{"path":"acme"}`, nil},
		{"ops", "PUT", "/v1/budgets/acme/api", `{"rate_limit":{"sustained":{"rate":5,"window":"minute"},"scope":"user"}}`, 200, `{"path":"acme/api"}`, nil},
		{"ops", "PUT", "/v1/budgets/acme/bad", `{"sustained":{"rate":0}}`, 400, `"code":"ERR"`, nil},
		{"ops", "PUT", "/v1/budgets/a%23b", `{"sustained":{"rate":1}}`, 400, `"detail":"budget path 'a#b' may not contain spaces, control characters or '#'"`, nil},
		{"gateway", "GET", "/v1/budgets/acme", "", 200, `"path":"acme"`, nil},
		{"gateway", "GET", "/v1/budgets/nosuch", "", 404, `"code":"NOBUDGET"`, nil},
		{"gateway", "GET", "/v1/budgets?n=1", "", 200, `"next":"acme"`, nil},
		{"gateway", "GET", "/v1/budgets?after=acme", "", 200, `"next":""`, nil},
		{"gateway", "GET", "/v1/budgets?n=0", "", 400, `"detail":"n must be an integer between 1 and 1000"`, nil},
		{"gateway", "GET", "/v1/budgets?limit=5", "", 400, `"detail":"unknown query parameter 'limit'; this endpoint takes prefix, after, n"`, nil},
		{"gateway", "POST", "/v1/acquire", `{"path":"acme"}`, 200, `"allowed":1`, nil},
		{"gateway", "POST", "/v1/acquire", `{"path":"acme","cost":20}`, 429, `"allowed":0`, nil},
		{"gateway", "GET", "/v1/usage?prefix=acme&n=1", "", 200, `"path":"acme","rate":10,"window":"minute","burst":10,"remaining":9`, nil},
		{"gateway", "GET", "/v1/usage?prefix=acme/&subject=u1", "", 200, `"limited_by":"acme/api#u1"`, nil},
		{"gateway", "GET", "/v1/usage?n=1001", "", 400, `"detail":"n must be an integer between 1 and 1000"`, nil},
		{"gateway", "GET", "/v1/top", "", 200, `"keys":[{"key":"acme","count":1,"error":0}]`, nil},
		{"gateway", "GET", "/v1/top?by=admitted&n=1", "", 200, `"keys":[{"key":"acme","count":1,"error":0}]`, nil},
		{"gateway", "GET", "/v1/top?by=everyone", "", 400, `"detail":"by must be denied or admitted"`, nil},
		{"gateway", "GET", "/v1/history", "", 200, `"step_s":10`, nil},
		{"gateway", "GET", "/v1/cluster", "", 200, `"role":"leader"`, nil},
		{"gateway", "POST", "/v1/quota/set", `{"path":"acme","used":90}`, 403, `the call needs admin`, nil},
		{"ops", "POST", "/v1/quota/set", `{"path":"acme","used":-1}`, 400, `"detail":"used must be an integer between 0 and 1000000000000"`, nil},
		{"ops", "POST", "/v1/quota/set", `{"path":"acme","used":90}`, 200, `{"counters":1}`, acquired},
		{"gateway", "GET", "/v1/quotas", "", 200, `"level":"acme","kind":"budget","limit":100,"used":90`, nil},
		{"gateway", "POST", "/v1/reset", `{"path":"acme"}`, 403, `the call needs admin`, nil},
		{"ops", "POST", "/v1/reset", `{"path":"acme"}`, 200, `{"reset":true}`, nil},
		{"ops", "POST", "/v1/reset", `{"path":"acme","cost":1}`, 400, `"detail":"reset takes key or path, and subject, only"`, nil},
		{"gateway", "DELETE", "/v1/budgets/acme", "", 403, `the call needs admin`, nil},
		{"ops", "DELETE", "/v1/budgets/acme", "", 400, `RECURSIVE`, nil},
		{"ops", "DELETE", "/v1/budgets/acme?recursive=yes", "", 400, `"detail":"recursive must be true or false"`, nil},
		{"ops", "DELETE", "/v1/budgets/acme?recursive=true", "", 200, `{"path":"acme","deleted":2}`, nil},
		{"ops", "DELETE", "/v1/budgets/acme", "", 404, `"code":"NOBUDGET"`, nil},
		{"gateway", "GET", "/v1/budgets", "", 200, `{"budgets":[],"next":""}`, nil},
	}
	for i, st := range steps {
		if st.before != nil {
			st.before()
		}
		code, body := do(st.user, st.method, st.target, st.body)
		if code != st.status || !strings.Contains(body, st.want) {
			t.Fatalf("step %d %s %s %s as %q: %d %s\nwant %d with %s", i, st.method, st.target, st.body, st.user, code, body, st.status, st.want)
		}
	}
}
