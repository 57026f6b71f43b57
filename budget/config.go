// Package budget owns the hierarchical budget configuration: the node
// config object of docs/budgets.md (JSON and keyword forms, validation), the tree
// built from those configs (effective limits, allocation checks) and, for
// every path a call can address, the plan of buckets one RL.ACQUIRE charges.
//
// A Tree is immutable: every change makes a new version that shares all it
// did not change with the old one (persistent structures, see DESIGN.md),
// at a cost of O(depth × log n) for a leaf. The Raft state machine publishes
// each version with one atomic pointer store, so the acquire path reads it
// without locks or allocation.
package budget

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sluice-rl/sluice/bounds"
	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/fault"
	"github.com/sluice-rl/sluice/quota"
)

// Sharing says how a node's limit relates to its children's.
type Sharing uint8

// The sharing modes. Private: children do not see the limit. Inherit: each
// child gets (at most) the limit for itself. Enforce: as inherit, and the
// limit also holds for all of the node's traffic together.
const (
	Private Sharing = iota
	Inherit
	Enforce
)

// Mode is a node's budget mode.
type Mode uint8

// The budget modes. Allocated: children's sustained rates are checked
// against total × overcommit on every change, and total caps their sum at
// run time. Shared: total is a pool children without a limit of their own
// draw on, first come first served.
const (
	Unlimited Mode = iota
	Allocated
	Shared
)

// Scope says whose traffic one bucket of a node counts.
type Scope uint8

// The scopes: one bucket for every path that resolves to the config
// (global), one per node path (tenant), or one per subject given with KEY.
const (
	Global Scope = iota
	Tenant
	User
	IP
	Route
)

// Strategy is what happens to a call a node's limit refuses.
type Strategy uint8

// The strategies: refuse (reject), hold the call up to max_wait_ms as if
// it carried WAIT (queue), or let it through flagged allowed=2 without
// consuming (degrade).
const (
	Reject Strategy = iota
	Queue
	Degrade
)

var (
	sharingNames  = []string{"private", "inherit", "enforce"}
	modeNames     = []string{"unlimited", "allocated", "shared"}
	scopeNames    = []string{"global", "tenant", "user", "ip", "route"}
	strategyNames = []string{"reject", "queue", "degrade"}
)

func (s Sharing) String() string  { return sharingNames[s] }
func (m Mode) String() string     { return modeNames[m] }
func (s Scope) String() string    { return scopeNames[s] }
func (s Strategy) String() string { return strategyNames[s] }

// Config is one budget node's configuration with every default filled in.
type Config struct {
	Sharing   Sharing
	Algorithm engine.Algo
	// HasLimit is false for a node that only groups children.
	HasLimit bool
	Rate     int64
	Window   time.Duration
	Burst    int64
	Mode     Mode
	Total    int64
	// Overcommit is budget.overcommit_ratio in thousandths (1000 – 2000),
	// so that every replica compares the same integers.
	Overcommit      int64
	Scope           Scope
	Strategy        Strategy
	MaxWaitMs       int64
	Cost            int64
	ResponseHeaders bool
	Quota           *Quota
	// Concurrency is how many reservations may be in flight at once (per
	// subject, keyed as the node's own bucket by its scope); 0: no limit.
	Concurrency int64
	// Requests limits calls rather than their cost: RequestsRate calls per
	// RequestsWindow (0: none), each call counting 1 whatever its COST,
	// per subject as the node's own bucket. A settlement leaves it as it
	// is (the call happened); a release gives its 1 back.
	RequestsRate   int64
	RequestsWindow time.Duration
}

// Quota is a calendar quota: Limit tokens per quota.Period in Timezone.
type Quota struct {
	Limit    int64
	Period   string
	Timezone string

	per quota.Period // Period and Timezone, parsed
	lim engine.Limit // the engine's limit for the counter
}

// prepare parses the period and zone and builds the counter's limit.
func (q *Quota) prepare() error {
	var err error
	if q.per, err = quota.ParsePeriod(q.Period, q.Timezone); err != nil {
		return err
	}
	if q.lim, err = engine.NewQuotaLimit(q.Limit, q.per.Code()); err != nil {
		return errf("%s", fQuota.r.Msg(fQuota.json))
	}
	return nil
}

// Per returns the quota's period.
func (q *Quota) Per() quota.Period { return q.per }

// Defaults for fields a config leaves out.
const (
	DefaultMaxWaitMs = 1000
	DefaultCost      = 1
	MaxConcurrency   = bounds.MaxConcurrency
	MaxDepth         = 8 // path segments
	MaxPathLen       = 512
)

// Error is a rejected budget configuration or operation. Code is the Redis
// error code the reply carries (ERR or BUDGET).
type Error = fault.Error

func errf(format string, a ...any) error { return &Error{Code: "ERR", Msg: fmt.Sprintf(format, a...)} }

// budgetErr is a refusal by the allocation rules rather than bad syntax.
func budgetErr(format string, a ...any) error {
	return &Error{Code: "BUDGET", Msg: fmt.Sprintf(format, a...)}
}

// configJSON is the wire form: pointers tell given fields from defaults.
type configJSON struct {
	Sharing         *string      `json:"sharing,omitempty"`
	Algorithm       *string      `json:"algorithm,omitempty"`
	Sustained       *sustainedJS `json:"sustained,omitempty"`
	Burst           *burstJS     `json:"burst,omitempty"`
	Budget          *budgetJS    `json:"budget,omitempty"`
	Scope           *string      `json:"scope,omitempty"`
	Strategy        *string      `json:"strategy,omitempty"`
	MaxWaitMs       *number      `json:"max_wait_ms,omitempty"`
	Cost            *number      `json:"cost,omitempty"`
	ResponseHeaders *bool        `json:"response_headers,omitempty"`
	Quota           *quotaJS     `json:"quota,omitempty"`
	Concurrency     *number      `json:"concurrency,omitempty"`
	Requests        *sustainedJS `json:"requests,omitempty"`
}

// number is a JSON number kept as written, so that a wrong type can be
// reported with the field's name.
type number json.RawMessage

func (n *number) UnmarshalJSON(b []byte) error {
	*n = append((*n)[:0], b...)
	return nil
}

type sustainedJS struct {
	Rate   *number `json:"rate,omitempty"`
	Window *string `json:"window,omitempty"`
}

type burstJS struct {
	Capacity *number `json:"capacity,omitempty"`
}

type budgetJS struct {
	Mode            *string `json:"mode,omitempty"`
	Total           *number `json:"total,omitempty"`
	OvercommitRatio *number `json:"overcommit_ratio,omitempty"`
}

type quotaJS struct {
	Limit    *number `json:"limit,omitempty"`
	Period   *string `json:"period,omitempty"`
	Timezone *string `json:"timezone,omitempty"`
}

// ParseJSON parses a node config given as JSON, bare or wrapped in
// {"rate_limit": …}. Unknown fields are refused by name.
func ParseJSON(b []byte) (Config, error) {
	// The {"rate_limit": {...}} wrapper is rare: look for it only when the
	// name occurs (every replayed log entry comes through here).
	if t := bytes.TrimLeft(b, " \t\r\n"); len(t) == 0 || t[0] != '{' || bytes.Contains(b, []byte(`"rate_limit"`)) {
		var probe map[string]json.RawMessage
		if err := json.Unmarshal(b, &probe); err != nil {
			return Config{}, errf("budget config is not a JSON object: %s", jsonErr(err))
		}
		if inner, ok := probe["rate_limit"]; ok && len(probe) == 1 {
			b = inner
		}
	}
	var js configJSON
	if err := strictDecode(b, &js); err != nil {
		return Config{}, err
	}
	return js.config(form{})
}

func strictDecode(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		return errf("budget config: %s", jsonErr(err))
	}
	if dec.More() {
		return errf("budget config: trailing data after the JSON object")
	}
	return nil
}

// jsonErr words a decoding error for a reply line.
func jsonErr(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return fmt.Sprintf("field %s must be a %s", te.Field, te.Type.String())
	}
	s := err.Error()
	s = strings.TrimPrefix(s, "json: ")
	if strings.HasPrefix(s, "unknown field ") {
		return "unknown field " + strings.TrimPrefix(s, "unknown field ")
	}
	return strings.ReplaceAll(s, "\n", " ")
}

// field is one field of a config as its errors name it: the JSON field,
// or RL.BUDGET SET's keyword; r is an integer field's range.
type field struct {
	json, kw string
	r        bounds.Int
}

// The fields of a config.
var (
	fSharing     = field{json: "sharing", kw: "SHARING"}
	fAlgo        = field{json: "algorithm", kw: "ALGO"}
	fRate        = field{"sustained.rate", "RATE", bounds.Rate}
	fWindow      = field{json: "sustained.window", kw: "PER"}
	fBurst       = field{"burst.capacity", "BURST", bounds.Burst}
	fMode        = field{json: "budget.mode", kw: "MODE"}
	fTotal       = field{"budget.total", "TOTAL", bounds.Rate}
	fOvercommit  = field{json: "budget.overcommit_ratio", kw: "OVERCOMMIT"}
	fScope       = field{json: "scope", kw: "SCOPE"}
	fStrategy    = field{json: "strategy", kw: "STRATEGY"}
	fMaxWait     = field{"max_wait_ms", "MAXWAIT", bounds.Wait}
	fCost        = field{"cost", "COST", bounds.Cost}
	fConcurrency = field{"concurrency", "CONCURRENCY", bounds.Int{Lo: 0, Hi: MaxConcurrency}}
	fReqRate     = field{"requests.rate", "REQUESTS", bounds.Rate}
	fReqWindow   = field{json: "requests.window", kw: "REQUESTS … PER"}
	fQuota       = field{"quota.limit", "QUOTA", bounds.Quota}
	fQuotaPeriod = field{json: "quota.period", kw: "QUOTA … PER"}
)

// form is how the config being parsed names its fields: by JSON field, or
// (kw) by RL.BUDGET SET's keywords.
type form struct{ kw bool }

func (f form) name(fd field) string {
	if f.kw {
		return fd.kw
	}
	return fd.json
}

// int reads an integer field within its range.
func (f form) int(n *number, fd field) (int64, error) {
	name := f.name(fd)
	if !f.kw && len(*n) > 0 && ((*n)[0] == '"' || (*n)[0] == '{' || (*n)[0] == '[' || (*n)[0] == 't' || (*n)[0] == 'f' || (*n)[0] == 'n') {
		return 0, errf("%s must be a number", name)
	}
	v, err := strconv.ParseInt(string(*n), 10, 64)
	if err != nil || !fd.r.In(v) {
		return 0, errf("%s", fd.r.Msg(name))
	}
	return v, nil
}

// enum reads a field that takes one of names.
func (f form) enum(s *string, fd field, names []string) (int, error) {
	for i, n := range names {
		if strings.EqualFold(*s, n) {
			return i, nil
		}
	}
	return 0, errf("%s", bounds.OneOfMsg(f.name(fd), names))
}

// window reads a window field (bounds.ParseWindow).
func (f form) window(s string, fd field) (time.Duration, error) {
	d, ok := bounds.ParseWindow([]byte(s))
	if !ok {
		return 0, errf("%s", bounds.WindowMsg(f.name(fd)))
	}
	return d, nil
}

func (js *configJSON) config(f form) (Config, error) {
	c := Config{Window: time.Second, MaxWaitMs: DefaultMaxWaitMs, Cost: DefaultCost, ResponseHeaders: true,
		Overcommit: 1000, Scope: Tenant}
	var err error
	var i int
	if js.Sharing != nil {
		if i, err = f.enum(js.Sharing, fSharing, sharingNames); err != nil {
			return c, err
		}
		c.Sharing = Sharing(i)
	}
	if js.Algorithm != nil {
		a, ok := engine.ParseAlgo(*js.Algorithm)
		if !ok {
			return c, errf("%s", bounds.OneOfMsg(f.name(fAlgo), engine.AlgoNames()))
		}
		c.Algorithm = a
	}
	if s := js.Sustained; s != nil {
		if s.Window != nil {
			if c.Window, err = f.window(*s.Window, fWindow); err != nil {
				return c, err
			}
		}
		if s.Rate != nil {
			if c.Rate, err = f.int(s.Rate, fRate); err != nil {
				return c, err
			}
			c.HasLimit = true
		}
	}
	if js.Burst != nil && js.Burst.Capacity != nil {
		if c.Burst, err = f.int(js.Burst.Capacity, fBurst); err != nil {
			return c, err
		}
	} else if c.HasLimit {
		c.Burst = c.Rate // the default, filled in so that equal configs compare equal
	}
	if b := js.Budget; b != nil {
		if b.Mode != nil {
			if i, err = f.enum(b.Mode, fMode, modeNames); err != nil {
				return c, err
			}
			c.Mode = Mode(i)
		}
		if b.Total != nil {
			if c.Total, err = f.int(b.Total, fTotal); err != nil {
				return c, err
			}
		}
		if b.OvercommitRatio != nil {
			x, err := strconv.ParseFloat(string(*b.OvercommitRatio), 64)
			if o := *b.OvercommitRatio; len(o) > 0 && o[0] == '"' {
				err = strconv.ErrSyntax
			}
			if err != nil || x < 1 || x > 2 || math.IsNaN(x) {
				return c, errf("%s must be a number between 1.0 and 2.0", f.name(fOvercommit))
			}
			c.Overcommit = int64(math.Round(x * 1000))
		}
	}
	if js.Scope != nil {
		if i, err = f.enum(js.Scope, fScope, scopeNames); err != nil {
			return c, err
		}
		c.Scope = Scope(i)
	}
	if js.Strategy != nil {
		if i, err = f.enum(js.Strategy, fStrategy, strategyNames); err != nil {
			return c, err
		}
		c.Strategy = Strategy(i)
	}
	if js.MaxWaitMs != nil {
		if c.MaxWaitMs, err = f.int(js.MaxWaitMs, fMaxWait); err != nil {
			return c, err
		}
	}
	if js.Cost != nil {
		if c.Cost, err = f.int(js.Cost, fCost); err != nil {
			return c, err
		}
	}
	if js.Concurrency != nil {
		if c.Concurrency, err = f.int(js.Concurrency, fConcurrency); err != nil {
			return c, err
		}
	}
	if r := js.Requests; r != nil {
		if r.Rate == nil {
			return c, errf("requests.rate is required")
		}
		if c.RequestsRate, err = f.int(r.Rate, fReqRate); err != nil {
			return c, err
		}
		c.RequestsWindow = time.Second
		if r.Window != nil {
			if c.RequestsWindow, err = f.window(*r.Window, fReqWindow); err != nil {
				return c, err
			}
		}
		if _, err := c.RequestsLimit(); err != nil {
			return c, err
		}
	}
	if js.ResponseHeaders != nil {
		c.ResponseHeaders = *js.ResponseHeaders
	}
	if q := js.Quota; q != nil {
		qt := &Quota{Period: "month", Timezone: "UTC"}
		if q.Limit == nil {
			return c, errf("quota.limit is required")
		}
		if qt.Limit, err = f.int(q.Limit, fQuota); err != nil {
			return c, err
		}
		if q.Period != nil {
			if i, err = f.enum(q.Period, fQuotaPeriod, quota.PeriodNames); err != nil {
				return c, err
			}
			qt.Period = quota.PeriodNames[i]
		}
		if q.Timezone != nil {
			qt.Timezone = *q.Timezone
		}
		c.Quota = qt
	}
	return c, c.Validate()
}

// Validate checks the rules that tie fields together.
func (c *Config) Validate() error {
	if !bounds.InWindow(c.Window) {
		return errf("%s", bounds.WindowMsg(fWindow.json))
	}
	if !c.HasLimit && c.Burst != 0 {
		return errf("burst.capacity needs sustained.rate")
	}
	if c.HasLimit {
		if _, err := c.Limit(); err != nil {
			return err
		}
	}
	switch c.Mode {
	case Allocated, Shared:
		if c.Total == 0 {
			return errf("budget.total is required when budget.mode is %s", c.Mode)
		}
	case Unlimited:
		if c.Total != 0 {
			return errf("budget.total needs budget.mode allocated or shared")
		}
		if c.Overcommit != 1000 {
			return errf("budget.overcommit_ratio needs budget.mode allocated")
		}
	}
	if c.Overcommit != 1000 && c.Mode != Allocated {
		return errf("budget.overcommit_ratio needs budget.mode allocated")
	}
	if c.Quota != nil {
		return c.Quota.prepare()
	}
	return nil
}

// Limit returns the node's own limit (HasLimit must be true).
// RequestsLimit is the engine limit of the node's requests (calls per
// window, each counting 1), under the node's algorithm with a burst of the
// rate; ok is false when the node sets none.
func (c *Config) RequestsLimit() (*engine.Limit, error) {
	if c.RequestsRate == 0 {
		return nil, nil
	}
	l, err := engine.NewLimit(c.Algorithm, c.RequestsRate, c.RequestsWindow, c.RequestsRate)
	if err != nil {
		return nil, errf("requests: %v", err)
	}
	return &l, nil
}

func (c *Config) Limit() (engine.Limit, error) {
	burst := c.Burst
	if burst == 0 {
		burst = c.Rate
	}
	l, err := engine.NewLimit(c.Algorithm, c.Rate, c.Window, burst)
	if err != nil {
		var ae *engine.ArgError
		if errors.As(err, &ae) {
			field := map[string]string{"RATE": "sustained.rate", "PER": "sustained.window", "BURST": "burst.capacity", "ALGO": "algorithm"}[ae.Arg]
			return l, errf("%s %s", field, strings.ReplaceAll(ae.Msg, "RATE", "sustained.rate"))
		}
		return l, errf("%v", err)
	}
	return l, nil
}

// MarshalJSON writes the config in full, defaults included, in the shape
// ParseJSON reads.
func (c Config) MarshalJSON() ([]byte, error) {
	type sus struct {
		Rate   int64  `json:"rate,omitempty"`
		Window string `json:"window"`
	}
	type bur struct {
		Capacity int64 `json:"capacity"`
	}
	type bud struct {
		Mode            string  `json:"mode"`
		Total           int64   `json:"total,omitempty"`
		OvercommitRatio float64 `json:"overcommit_ratio"`
	}
	type quo struct {
		Limit    int64  `json:"limit"`
		Period   string `json:"period"`
		Timezone string `json:"timezone"`
	}
	out := struct {
		Sharing         string `json:"sharing"`
		Algorithm       string `json:"algorithm"`
		Sustained       sus    `json:"sustained"`
		Burst           *bur   `json:"burst,omitempty"`
		Budget          bud    `json:"budget"`
		Scope           string `json:"scope"`
		Strategy        string `json:"strategy"`
		MaxWaitMs       int64  `json:"max_wait_ms"`
		Cost            int64  `json:"cost"`
		ResponseHeaders bool   `json:"response_headers"`
		Quota           *quo   `json:"quota,omitempty"`
		Concurrency     int64  `json:"concurrency,omitempty"`
		Requests        *sus   `json:"requests,omitempty"`
	}{
		Sharing: c.Sharing.String(), Algorithm: c.Algorithm.String(),
		Sustained: sus{Window: FormatWindow(c.Window)},
		Budget:    bud{Mode: c.Mode.String(), Total: c.Total, OvercommitRatio: float64(c.Overcommit) / 1000},
		Scope:     c.Scope.String(), Strategy: c.Strategy.String(), MaxWaitMs: c.MaxWaitMs, Cost: c.Cost,
		ResponseHeaders: c.ResponseHeaders, Concurrency: c.Concurrency,
	}
	if c.HasLimit {
		out.Sustained.Rate = c.Rate
		b := c.Burst
		if b == 0 {
			b = c.Rate
		}
		out.Burst = &bur{Capacity: b}
	}
	if c.Quota != nil {
		out.Quota = &quo{Limit: c.Quota.Limit, Period: c.Quota.Period, Timezone: c.Quota.Timezone}
	}
	if c.RequestsRate > 0 {
		out.Requests = &sus{Rate: c.RequestsRate, Window: FormatWindow(c.RequestsWindow)}
	}
	return json.Marshal(out)
}

// ParseKeywords parses the keyword form of RL.BUDGET SET (everything after
// the path): RATE n, PER unit, BURST n, ALGO a, SHARING s, MODE m, TOTAL n,
// OVERCOMMIT x, SCOPE s, STRATEGY s, MAXWAIT ms, COST n, QUOTA n PER
// period [TZ zone], RESPONSE_HEADERS yes|no, CONCURRENCY n, REQUESTS n
// [PER window]. A bad value is refused naming its keyword.
func ParseKeywords(args [][]byte) (Config, error) {
	js := configJSON{}
	seen := map[string]bool{}
	for i := 0; i < len(args); i++ {
		kw := strings.ToUpper(string(args[i]))
		if seen[kw] {
			return Config{}, errf("%s given twice", printable([]byte(kw)))
		}
		seen[kw] = true
		if i+1 >= len(args) {
			return Config{}, errf("syntax error: %s needs a value", printable(args[i]))
		}
		i++
		set, ok := keywords[kw]
		if !ok {
			return Config{}, errf("syntax error near '%s'", printable(args[i-1]))
		}
		if err := set(&js, args[i]); err != nil {
			return Config{}, err
		}
		switch kw {
		case "REQUESTS":
			// PER may follow REQUESTS n: the requests' window.
			if i+2 < len(args) && strings.EqualFold(string(args[i+1]), "PER") {
				js.Requests.Window = kwStr(args[i+2])
				i += 2
			}
		case "QUOTA":
			// PER and TZ follow QUOTA n, in either order.
			for q := js.Quota; i+2 < len(args); i += 2 {
				if q.Period == nil && strings.EqualFold(string(args[i+1]), "PER") {
					q.Period = kwStr(args[i+2])
				} else if q.Timezone == nil && strings.EqualFold(string(args[i+1]), "TZ") {
					q.Timezone = kwStr(args[i+2])
				} else {
					break
				}
			}
		}
	}
	return js.config(form{kw: true})
}

// keywords set the field of the JSON form that each keyword of
// RL.BUDGET SET gives; a number is checked for its form here and for its
// range by config.
var keywords = map[string]func(js *configJSON, v []byte) error{
	"RATE": func(js *configJSON, v []byte) (err error) {
		js.sustained().Rate, err = kwInt(v, fRate)
		return err
	},
	"PER": func(js *configJSON, v []byte) error { js.sustained().Window = kwStr(v); return nil },
	"BURST": func(js *configJSON, v []byte) (err error) {
		js.Burst = &burstJS{}
		js.Burst.Capacity, err = kwInt(v, fBurst)
		return err
	},
	"ALGO":     func(js *configJSON, v []byte) error { js.Algorithm = kwStr(v); return nil },
	"SHARING":  func(js *configJSON, v []byte) error { js.Sharing = kwStr(v); return nil },
	"MODE":     func(js *configJSON, v []byte) error { js.budget().Mode = kwStr(v); return nil },
	"SCOPE":    func(js *configJSON, v []byte) error { js.Scope = kwStr(v); return nil },
	"STRATEGY": func(js *configJSON, v []byte) error { js.Strategy = kwStr(v); return nil },
	"TOTAL": func(js *configJSON, v []byte) (err error) {
		js.budget().Total, err = kwInt(v, fTotal)
		return err
	},
	"OVERCOMMIT": func(js *configJSON, v []byte) error {
		if _, err := strconv.ParseFloat(string(v), 64); err != nil {
			return errf("%s must be a number between 1.0 and 2.0", fOvercommit.kw)
		}
		n := number(v)
		js.budget().OvercommitRatio = &n
		return nil
	},
	"MAXWAIT": func(js *configJSON, v []byte) (err error) {
		js.MaxWaitMs, err = kwInt(v, fMaxWait)
		return err
	},
	"COST": func(js *configJSON, v []byte) (err error) {
		js.Cost, err = kwInt(v, fCost)
		return err
	},
	"REQUESTS": func(js *configJSON, v []byte) (err error) {
		js.Requests = &sustainedJS{}
		js.Requests.Rate, err = kwInt(v, fReqRate)
		return err
	},
	"CONCURRENCY": func(js *configJSON, v []byte) (err error) {
		js.Concurrency, err = kwInt(v, fConcurrency)
		return err
	},
	"RESPONSE_HEADERS": func(js *configJSON, v []byte) error {
		b, ok := bounds.ParseYesNo(v)
		if !ok {
			return errf("%s", bounds.YesNoMsg("RESPONSE_HEADERS"))
		}
		js.ResponseHeaders = &b
		return nil
	},
	"QUOTA": func(js *configJSON, v []byte) (err error) {
		js.Quota = &quotaJS{}
		js.Quota.Limit, err = kwInt(v, fQuota)
		return err
	},
}

func (js *configJSON) sustained() *sustainedJS {
	if js.Sustained == nil {
		js.Sustained = &sustainedJS{}
	}
	return js.Sustained
}

func (js *configJSON) budget() *budgetJS {
	if js.Budget == nil {
		js.Budget = &budgetJS{}
	}
	return js.Budget
}

func kwStr(b []byte) *string { s := string(b); return &s }

// kwInt is a keyword's integer value, refused in its bound's words when it
// is not an integer.
func kwInt(b []byte, fd field) (*number, error) {
	if _, err := strconv.ParseInt(string(b), 10, 64); err != nil {
		return nil, errf("%s", fd.r.Msg(fd.kw))
	}
	n := number(b)
	return &n, nil
}

func printable(b []byte) string { return fault.Printable(b) }

// FormatWindow is engine.FormatWindow: the form bounds.ParseWindow reads
// back.
func FormatWindow(d time.Duration) string { return engine.FormatWindow(d) }

// checkPath reports whether p is a well-formed budget path (see
// ValidPath), without allocating.
func checkPath(p []byte) bool {
	if len(p) == 0 || len(p) > MaxPathLen || p[0] == '/' || p[len(p)-1] == '/' {
		return false
	}
	depth := 1
	for i, c := range p {
		switch {
		case c == '/':
			if p[i-1] == '/' {
				return false
			}
			depth++
		case c <= ' ' || c == '#' || c == 0x7f:
			return false
		}
	}
	return depth <= MaxDepth
}

// ValidPath checks a budget path: 1 to MaxDepth non-empty segments of
// printable UTF-8 without spaces or '#', at most MaxPathLen bytes.
func ValidPath(p string) error {
	if p == "" || len(p) > MaxPathLen {
		return errf("budget path must be 1 to %d bytes", MaxPathLen)
	}
	segs := strings.Split(p, "/")
	if len(segs) > MaxDepth {
		return errf("budget path '%s' is deeper than %d segments", printable([]byte(p)), MaxDepth)
	}
	for _, s := range segs {
		if s == "" {
			return errf("budget path '%s' has an empty segment", printable([]byte(p)))
		}
		for i := 0; i < len(s); i++ {
			if c := s[i]; c <= ' ' || c == '#' || c == 0x7f {
				return errf("budget path '%s' may not contain spaces, control characters or '#'", printable([]byte(p)))
			}
		}
	}
	if !utf8.ValidString(p) {
		// Paths travel in JSON (log entries, EXPORT), which holds text only.
		return errf("budget path '%s' is not valid UTF-8", printable([]byte(p)))
	}
	return nil
}
