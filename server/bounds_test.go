package server

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/bounds"
	"github.com/sluice-rl/sluice/budget"
	"github.com/sluice-rl/sluice/envoyrls"
	"github.com/sluice-rl/sluice/testsupport/resptest"
)

// The fronts that check a call's bounds, each in its user's spelling.
const (
	frontAcquire    = "RL.ACQUIRE"              // RESP, inline limit
	frontBudgetSet  = "RL.BUDGET SET"           // RESP, keyword form
	frontHTTP       = "POST /v1/acquire"        // HTTP JSON
	frontBudgetPut  = "PUT /v1/budgets"         // HTTP, a budget config
	frontBudgetJSON = "budget config (JSON)"    // budget.ParseJSON: --budgets, IMPORT
	frontEnvoy      = "envoy rule (rate_limit)" // an Envoy YAML rule
)

var allFronts = []string{frontAcquire, frontBudgetSet, frontHTTP, frontBudgetPut, frontBudgetJSON, frontEnvoy}

// boundCall is one front's form of a bad call: what it sends (RESP
// arguments after the key or path, a JSON body, the inside of an Envoy
// rule's rate_limit mapping), the argument's name as that front spells
// it, and, only where the front checks another bound than the case's, that
// bound and why. skip, instead of a call, says why the front has no such
// argument.
type boundCall struct {
	call  string
	name  string
	other func() string // the front's own bound, where it differs
	why   string        // why other, or why skip
	skip  bool
}

func skip(why string) boundCall { return boundCall{skip: true, why: why} }

// TestEveryFrontRefusesABoundInTheSameWords feeds the same bad calls to
// RESP (RL.ACQUIRE, RL.BUDGET SET), HTTP (POST /v1/acquire, PUT
// /v1/budgets), a budget config in its JSON form and an Envoy rule file,
// and checks that each refuses it with package bounds's message for its
// own spelling of the argument: the text after the name is the same on
// every front, and is bounds's (a front that writes its own text drifts
// the moment bounds changes, and fails here). A front without the argument
// is skipped in the table, with the reason.
func TestEveryFrontRefusesABoundInTheSameWords(t *testing.T) {
	rate, burst, cost, wait, quota := bounds.Rate.Text, bounds.Burst.Text, bounds.Cost.Text, bounds.Wait.Text, bounds.Quota.Text
	window := bounds.WindowText
	const (
		noCost   = "a rule has no cost: hits_addend is the request's, checked by the gRPC service"
		noWait   = "an Envoy call never waits"
		noQuota  = "a rule has no quota argument: a calendar period is a rule with a timezone, counted in requests_per_unit"
		envoyRPU = "requests_per_unit is a uint32 in envoyproxy/ratelimit's configuration (bounds.RequestsPerUnit)"
	)
	cases := []struct {
		bad   string
		bound func() string
		calls map[string]boundCall
	}{
		{"rate 0", rate, map[string]boundCall{
			frontAcquire:    {call: "RATE 0", name: "RATE"},
			frontBudgetSet:  {call: "RATE 0", name: "RATE"},
			frontHTTP:       {call: `{"key":"k","rate":0}`, name: "rate"},
			frontBudgetPut:  {call: `{"sustained":{"rate":0}}`, name: "sustained.rate"},
			frontBudgetJSON: {call: `{"sustained":{"rate":0}}`, name: "sustained.rate"},
			frontEnvoy:      skip("requests_per_unit 0 is accepted: envoyproxy/ratelimit's rule that refuses every request"),
		}},
		{"rate above the maximum", rate, map[string]boundCall{
			frontAcquire:    {call: "RATE 1000000000001", name: "RATE"},
			frontBudgetSet:  {call: "RATE 1000000000001", name: "RATE"},
			frontHTTP:       {call: `{"key":"k","rate":1000000000001}`, name: "rate"},
			frontBudgetPut:  {call: `{"sustained":{"rate":1000000000001}}`, name: "sustained.rate"},
			frontBudgetJSON: {call: `{"sustained":{"rate":1000000000001}}`, name: "sustained.rate"},
			frontEnvoy:      {call: "unit: second, requests_per_unit: 4294967296", name: "requests_per_unit", other: bounds.RequestsPerUnit.Text, why: envoyRPU},
		}},
		{"burst 0", burst, map[string]boundCall{
			frontAcquire:    {call: "RATE 5 BURST 0", name: "BURST"},
			frontBudgetSet:  {call: "RATE 5 BURST 0", name: "BURST"},
			frontHTTP:       {call: `{"key":"k","rate":5,"burst":0}`, name: "burst"},
			frontBudgetPut:  {call: `{"sustained":{"rate":5},"burst":{"capacity":0}}`, name: "burst.capacity"},
			frontBudgetJSON: {call: `{"sustained":{"rate":5},"burst":{"capacity":0}}`, name: "burst.capacity"},
			frontEnvoy:      {call: "unit: second, requests_per_unit: 5, algorithm: gcra, burst: 0", name: "burst"},
		}},
		{"burst above the maximum", burst, map[string]boundCall{
			frontAcquire:    {call: "RATE 5 BURST 1000000000001", name: "BURST"},
			frontBudgetSet:  {call: "RATE 5 BURST 1000000000001", name: "BURST"},
			frontHTTP:       {call: `{"key":"k","rate":5,"burst":1000000000001}`, name: "burst"},
			frontBudgetPut:  {call: `{"sustained":{"rate":5},"burst":{"capacity":1000000000001}}`, name: "burst.capacity"},
			frontBudgetJSON: {call: `{"sustained":{"rate":5},"burst":{"capacity":1000000000001}}`, name: "burst.capacity"},
			frontEnvoy:      {call: "unit: second, requests_per_unit: 5, algorithm: gcra, burst: 1000000000001", name: "burst"},
		}},
		{"per 0", window, map[string]boundCall{
			frontAcquire:    {call: "RATE 5 PER 0s", name: "PER"},
			frontBudgetSet:  {call: "RATE 5 PER 0s", name: "PER"},
			frontHTTP:       {call: `{"key":"k","rate":5,"per":"0s"}`, name: "per"},
			frontBudgetPut:  {call: `{"sustained":{"rate":5,"window":"0s"}}`, name: "sustained.window"},
			frontBudgetJSON: {call: `{"sustained":{"rate":5,"window":"0s"}}`, name: "sustained.window"},
			frontEnvoy:      {call: "unit: 0s, requests_per_unit: 5", name: "unit"},
		}},
		{"per garbage", window, map[string]boundCall{
			frontAcquire:    {call: "RATE 5 PER fortnight", name: "PER"},
			frontBudgetSet:  {call: "RATE 5 PER fortnight", name: "PER"},
			frontHTTP:       {call: `{"key":"k","rate":5,"per":"fortnight"}`, name: "per"},
			frontBudgetPut:  {call: `{"sustained":{"rate":5,"window":"fortnight"}}`, name: "sustained.window"},
			frontBudgetJSON: {call: `{"sustained":{"rate":5,"window":"fortnight"}}`, name: "sustained.window"},
			frontEnvoy:      skip("a unit that is no duration keeps envoyproxy/ratelimit's words (invalid rate limit unit '…': must be second, …, month or year), which drop-in users match"),
		}},
		{"per over 3650d", window, map[string]boundCall{
			frontAcquire:    {call: "RATE 5 PER 3651d", name: "PER"},
			frontBudgetSet:  {call: "RATE 5 PER 3651d", name: "PER"},
			frontHTTP:       {call: `{"key":"k","rate":5,"per":"3651d"}`, name: "per"},
			frontBudgetPut:  {call: `{"sustained":{"rate":5,"window":"3651d"}}`, name: "sustained.window"},
			frontBudgetJSON: {call: `{"sustained":{"rate":5,"window":"3651d"}}`, name: "sustained.window"},
			frontEnvoy:      {call: "unit: 3651d, requests_per_unit: 5", name: "unit"},
		}},
		{"cost negative", cost, map[string]boundCall{
			frontAcquire:    {call: "RATE 5 COST -1", name: "COST"},
			frontBudgetSet:  {call: "RATE 5 COST -1", name: "COST"},
			frontHTTP:       {call: `{"key":"k","rate":5,"cost":-1}`, name: "cost"},
			frontBudgetPut:  {call: `{"sustained":{"rate":5},"cost":-1}`, name: "cost"},
			frontBudgetJSON: {call: `{"sustained":{"rate":5},"cost":-1}`, name: "cost"},
			frontEnvoy:      skip(noCost),
		}},
		{"cost above the maximum", cost, map[string]boundCall{
			frontAcquire:    {call: "RATE 5 COST 1000000000001", name: "COST"},
			frontBudgetSet:  {call: "RATE 5 COST 1000000000001", name: "COST"},
			frontHTTP:       {call: `{"key":"k","rate":5,"cost":1000000000001}`, name: "cost"},
			frontBudgetPut:  {call: `{"sustained":{"rate":5},"cost":1000000000001}`, name: "cost"},
			frontBudgetJSON: {call: `{"sustained":{"rate":5},"cost":1000000000001}`, name: "cost"},
			frontEnvoy:      skip(noCost),
		}},
		{"wait above the maximum", wait, map[string]boundCall{
			frontAcquire:    {call: "RATE 5 WAIT 60001", name: "WAIT"},
			frontBudgetSet:  {call: "RATE 5 MAXWAIT 60001", name: "MAXWAIT"},
			frontHTTP:       {call: `{"key":"k","rate":5,"wait_ms":60001}`, name: "wait_ms"},
			frontBudgetPut:  {call: `{"sustained":{"rate":5},"max_wait_ms":60001}`, name: "max_wait_ms"},
			frontBudgetJSON: {call: `{"sustained":{"rate":5},"max_wait_ms":60001}`, name: "max_wait_ms"},
			frontEnvoy:      skip(noWait),
		}},
		{"quota 0", quota, map[string]boundCall{
			frontAcquire:    {call: "QUOTA 0", name: "QUOTA"},
			frontBudgetSet:  {call: "QUOTA 0", name: "QUOTA"},
			frontHTTP:       {call: `{"key":"k","quota":{"limit":0}}`, name: "quota.limit"},
			frontBudgetPut:  {call: `{"quota":{"limit":0}}`, name: "quota.limit"},
			frontBudgetJSON: {call: `{"quota":{"limit":0}}`, name: "quota.limit"},
			frontEnvoy:      skip(noQuota),
		}},
	}

	n := startNode(t, nil)
	c := resptest.Dial(t, n.Server.RespAddr())
	base := "http://" + n.Server.HTTPAddr()
	refusal := map[string]func(call string) string{
		frontAcquire: func(call string) string {
			return respError(c.Do(append([]string{"RL.ACQUIRE", "k"}, strings.Fields(call)...)...))
		},
		frontBudgetSet: func(call string) string {
			return respError(c.Do(append([]string{"RL.BUDGET", "SET", "b"}, strings.Fields(call)...)...))
		},
		frontHTTP:      func(call string) string { return problem(t, http.MethodPost, base+"/v1/acquire", call) },
		frontBudgetPut: func(call string) string { return problem(t, http.MethodPut, base+"/v1/budgets/b", call) },
		frontBudgetJSON: func(call string) string {
			_, err := budget.ParseJSON([]byte(call))
			return strings.TrimPrefix(errText(err), "ERR ")
		},
		frontEnvoy: func(call string) string {
			_, err := envoyrls.ParseConfig("c.yaml", []byte("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {"+call+"}\n"))
			_, msg, _ := strings.Cut(errText(err), ": ") // after c.yaml:<line>
			return msg
		},
	}
	for _, tc := range cases {
		texts := map[string]string{} // the text after the name, by front
		for _, f := range allFronts {
			bc, ok := tc.calls[f]
			switch {
			case !ok:
				t.Errorf("%s: %s is in no row: give its call, or skip it with the reason", tc.bad, f)
				continue
			case bc.skip:
				if bc.why == "" {
					t.Errorf("%s: %s is skipped without a reason", tc.bad, f)
				}
				continue
			}
			text := tc.bound()
			if bc.other != nil {
				if bc.why == "" {
					t.Errorf("%s: %s checks another bound without saying why", tc.bad, f)
				}
				text = bc.other()
			} else {
				texts[f] = text
			}
			got := refusal[f](bc.call)
			if want := bc.name + " " + text; got != want {
				t.Errorf("%s, %s %s:\n got %q\nwant %q (package bounds's message for %s)", tc.bad, f, bc.call, got, want, bc.name)
			}
		}
		if len(texts) < 3 {
			t.Errorf("%s: only %d fronts check the bound; the table has lost its point", tc.bad, len(texts))
		}
	}
}

// respError is a RESP error reply's message after its code.
func respError(reply string) string {
	if !strings.HasPrefix(reply, "-ERR ") {
		return "not an ERR reply: " + reply
	}
	return strings.TrimPrefix(reply, "-ERR ")
}

// problem sends body and returns the detail of the 400 problem it answers.
func problem(t *testing.T, method, url, body string) string {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewBufferString(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var p struct {
		Status int    `json:"status"`
		Detail string `json:"detail"`
		Code   string `json:"code"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&p); err != nil || resp.StatusCode != http.StatusBadRequest || p.Code != "ERR" {
		return "not a 400 ERR problem: " + resp.Status + " " + p.Detail
	}
	return p.Detail
}

func errText(err error) string {
	if err == nil {
		return "accepted"
	}
	return err.Error()
}
