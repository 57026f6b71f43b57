// Package httpapi is sluice's HTTP/JSON front: POST /v1/acquire, /v1/peek,
// /v1/refund and /v1/quota take, as a JSON object, what RL.ACQUIRE,
// RL.PEEK, RL.REFUND and RL.QUOTA take, call the service core
// (limiter.Service) and answer with the RESP reply's fields by name, the
// rate-limit headers (package ratehdr, as httplimit sets them) and, on a
// refusal, 429 with Retry-After. docs/http.md and docs/openapi.yaml
// describe it for users.
package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-rl/sluice/bounds"
	"github.com/sluice-rl/sluice/budget"
	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/fault"
	"github.com/sluice-rl/sluice/limiter"
	"github.com/sluice-rl/sluice/protocol/ratehdr"
	"github.com/sluice-rl/sluice/quota"
)

// MaxBody bounds a request body.
const MaxBody = 64 << 10

// MaxWaitMs bounds wait_ms, as WAIT's bound for RL.ACQUIRE (bounds.MaxWaitMs).
const MaxWaitMs = bounds.MaxWaitMs

// Access says whether a request may run an operation: nil, or an error
// with the HTTP status to answer (a *Denied).
type Access func(r *http.Request, admin bool) error

// Denied refuses a request before it runs.
type Denied struct {
	Status int
	Msg    string
}

func (d *Denied) Error() string { return d.Msg }

// API serves the /v1/ endpoints.
type API struct {
	Service *limiter.Service
	// Access, if set, checks every request (refund needs admin).
	Access Access
	// MaxKeyLen bounds key and path (--max-key-len).
	MaxKeyLen int
	// Views answer the cluster-wide endpoints (/v1/top, /v1/cluster).
	Views Views
}

// Register adds the endpoints to mux.
func (a *API) Register(mux *http.ServeMux) {
	mux.HandleFunc("POST /v1/acquire", func(w http.ResponseWriter, r *http.Request) { a.serve(w, r, opAcquire) })
	mux.HandleFunc("POST /v1/peek", func(w http.ResponseWriter, r *http.Request) { a.serve(w, r, opPeek) })
	mux.HandleFunc("POST /v1/refund", func(w http.ResponseWriter, r *http.Request) { a.serve(w, r, opRefund) })
	mux.HandleFunc("POST /v1/quota", func(w http.ResponseWriter, r *http.Request) { a.serve(w, r, opQuota) })
	a.registerReserve(mux)
	a.registerAdmin(mux)
}

type op int

const (
	opAcquire op = iota
	opPeek
	opRefund
	opQuota
	opReserve
)

// Request is the JSON body: the inline form names key and its limits
// (rate, and optionally per, burst, algo, quota), the budget form names
// path (and subject when the node's scope needs one).
type Request struct {
	Key     *string     `json:"key"`
	Path    *string     `json:"path"`
	Subject *string     `json:"subject"`
	Rate    *int64      `json:"rate"`
	Per     *string     `json:"per"`
	Burst   *int64      `json:"burst"`
	Algo    *string     `json:"algo"`
	Quota   *QuotaLimit `json:"quota"`
	Cost    *int64      `json:"cost"`
	WaitMs  *int64      `json:"wait_ms"`
	DryRun  bool        `json:"dry_run"`
	// Reserve only: the reservation's TTL and the inline form's limit on
	// reservations in flight.
	TTLMs       *int64 `json:"ttl_ms"`
	Concurrency *int64 `json:"concurrency"`
}

// QuotaLimit is an inline calendar quota: QUOTA limit PER per TZ tz.
type QuotaLimit struct {
	Limit int64  `json:"limit"`
	Per   string `json:"per"`
	TZ    string `json:"tz"`
}

// Reply is the six fields of an RL.ACQUIRE reply.
type Reply struct {
	Allowed      int    `json:"allowed"`
	Remaining    int64  `json:"remaining"`
	Limit        int64  `json:"limit"`
	RetryAfterMs int64  `json:"retry_after_ms"`
	ResetAfterMs int64  `json:"reset_after_ms"`
	LimitedBy    string `json:"limited_by"`
}

// QuotaReply is RL.QUOTA's reply.
type QuotaReply struct {
	Level        string `json:"level"`
	Limit        int64  `json:"limit"`
	Used         int64  `json:"used"`
	Remaining    int64  `json:"remaining"`
	Period       string `json:"period"`
	ResetsAt     int64  `json:"resets_at"`
	ResetAfterMs int64  `json:"reset_after_ms"`
}

// Problem is the RFC 9457 body of an error; code is the RESP error code
// (ERR, NOBUDGET, TRYAGAIN, …).
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	Code   string `json:"code,omitempty"`
}

// ProblemInvalid is the type of an error answer.
const ProblemInvalid = "https://sluice.dev/problems/request-refused"

// decode checks access (admin: the operation needs the admin role) and
// reads the body into v, strictly; it answers the error itself and
// reports false.
func (a *API) decode(w http.ResponseWriter, r *http.Request, admin bool, v any) bool {
	if a.Access != nil {
		if err := a.Access(r, admin); err != nil {
			var d *Denied
			if errors.As(err, &d) {
				if d.Status == http.StatusUnauthorized {
					w.Header().Set("WWW-Authenticate", `Bearer realm="sluice"`)
				}
				writeProblem(w, d.Status, "", d.Msg)
				return false
			}
			writeProblem(w, http.StatusInternalServerError, "", err.Error())
			return false
		}
	}
	if ct := r.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(ct, "application/json") {
		writeProblem(w, http.StatusUnsupportedMediaType, "ERR", "the body must be JSON (Content-Type: application/json)")
		return false
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxBody+1))
	if err == nil && len(body) > MaxBody {
		err = fmt.Errorf("the body is larger than %d bytes", MaxBody)
	}
	if err == nil {
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		if err = dec.Decode(v); err == nil && dec.More() {
			err = errors.New("the body must hold one JSON object")
		}
	}
	if err != nil {
		writeProblem(w, http.StatusBadRequest, "ERR", "invalid JSON body: "+err.Error())
		return false
	}
	return true
}

func (a *API) serve(w http.ResponseWriter, r *http.Request, o op) {
	var req Request
	if !a.decode(w, r, o == opRefund, &req) {
		return
	}
	var lim engine.Limit
	var spec quota.Spec
	call, window, err := a.call(&req, o, &lim, &spec)
	if err != nil {
		writeError(w, err)
		return
	}
	var sc limiter.Scratch
	switch o {
	case opQuota:
		st, err := a.Service.Quota(&call, &sc)
		if err != nil {
			writeError(w, err)
			return
		}
		now := a.Service.Clock()
		writeJSON(w, http.StatusOK, QuotaReply{Level: string(st.Level), Limit: st.Limit, Used: st.Used, Remaining: st.Remaining(),
			Period: st.Period.String(), ResetsAt: st.End / 1e9, ResetAfterMs: engine.CeilMs(st.End - now)})
		return
	}
	var out limiter.Outcome
	switch o {
	case opAcquire:
		out, err = a.Service.Acquire(&call, &sc, requestWatcher{r})
	case opPeek:
		out, err = a.Service.Peek(&call, &sc)
	case opRefund:
		out, err = a.Service.Refund(&call, call.Cost, &sc)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	a.writeOutcome(w, &out, &call, window, o == opAcquire, func(r Reply) any { return r })
}

// writeOutcome answers an outcome: its fields by name (as body makes them
// into the JSON body), the rate-limit headers, and for a refusal, when
// refusal is set, 429 with Retry-After.
func (a *API) writeOutcome(w http.ResponseWriter, out *limiter.Outcome, call *budget.Call, window time.Duration, refusal bool, body func(Reply) any) {
	rep := Reply{Allowed: out.Allowed, Remaining: out.Result.Remaining, Limit: out.Result.Limit,
		ResetAfterMs: engine.CeilMs(out.Result.ResetAfter), LimitedBy: string(out.LimitedBy)}
	if out.Allowed != 1 {
		rep.RetryAfterMs = engine.CeilMs(out.Result.RetryAfter)
	}
	retry := time.Duration(rep.RetryAfterMs) * time.Millisecond // -1 ms: never
	if window == 0 && !call.Inline() {
		window = a.budgetWindow(out.LimitedBy)
	}
	if strings.HasPrefix(rep.LimitedBy, quota.NamePrefix) {
		window = 0 // a quota's period is not a window
	}
	h := w.Header()
	if !out.Unlimited {
		ratehdr.Each(rep.Limit, rep.Remaining, out.Allowed == 2, time.Duration(rep.ResetAfterMs)*time.Millisecond, window, h.Set)
	}
	status := http.StatusOK
	if refusal && out.Allowed == 0 {
		status = http.StatusTooManyRequests
		if v, ok := ratehdr.RetryAfter(retry); ok {
			h.Set("Retry-After", v)
		}
	}
	writeJSON(w, status, body(rep))
}

// budgetWindow is the window of the budget node limited_by names (its
// deepest configured ancestor for an implicit child), or 0.
func (a *API) budgetWindow(limitedBy []byte) time.Duration {
	path := limitedBy
	if i := bytes.IndexByte(path, '#'); i >= 0 {
		path = path[:i]
	}
	plan, _, ok := a.Service.Cluster.State().Tree.Resolve(path)
	if !ok {
		return 0
	}
	n := plan.Config
	if path := string(path); n.Path != path {
		if m := a.Service.Cluster.State().Tree.Get(path); m != nil {
			n = m
		}
	}
	if l, ok := n.Effective(); ok {
		return time.Duration(l.Window)
	}
	if n.Config.Mode != budget.Unlimited {
		return n.Config.Window
	}
	return 0
}

// requestWatcher ends a held acquire (wait_ms) when its client goes away.
type requestWatcher struct{ r *http.Request }

func (w requestWatcher) Watch() (<-chan struct{}, func()) { return w.r.Context().Done(), func() {} }

// call builds the service call of a request, with errors that name the
// JSON field and its accepted range; window is an inline limit's.
func (a *API) call(req *Request, o op, lim *engine.Limit, spec *quota.Spec) (budget.Call, time.Duration, error) {
	var c budget.Call
	switch {
	case req.Key != nil && req.Path != nil:
		return c, 0, fault.New("ERR", "give key (an inline limit) or path (a budget node), not both")
	case req.Key != nil:
		c.Path = []byte(*req.Key)
	case req.Path != nil:
		c.Path = []byte(*req.Path)
	default:
		return c, 0, fault.New("ERR", "key (an inline limit's key) or path (a budget node's path) is required")
	}
	if len(c.Path) == 0 || len(c.Path) > a.MaxKeyLen {
		return c, 0, fault.New("ERR", "key or path must be 1 to %d bytes (--max-key-len)", a.MaxKeyLen)
	}
	inline := req.Rate != nil || req.Quota != nil
	if req.Path != nil && inline {
		return c, 0, fault.New("ERR", "rate and quota belong to the inline form: name the key with key, not path")
	}
	if req.Subject != nil {
		c.Subject = []byte(*req.Subject)
	}
	if budget.CheckSubject(req.Key != nil, c.Subject) != nil {
		return c, 0, errSubjectInline
	}
	if req.Key != nil && !inline && (o == opAcquire || o == opReserve && req.Concurrency == nil) {
		return c, 0, fault.New("ERR", "rate (or quota) is required with key: an inline limit travels with the call; use path for a budget node")
	}
	if o == opQuota && (req.Rate != nil || req.Cost != nil) {
		return c, 0, fault.New("ERR", "quota takes key or path, subject and quota only")
	}
	if req.Rate == nil && (req.Per != nil || req.Burst != nil || req.Algo != nil) {
		return c, 0, fault.New("ERR", "rate is required with per, burst or algo")
	}
	if o != opAcquire && (req.WaitMs != nil && o != opReserve || req.DryRun) {
		return c, 0, fault.New("ERR", "wait_ms and dry_run belong to acquire (and wait_ms to reserve)")
	}
	if o != opReserve && (req.TTLMs != nil || req.Concurrency != nil) {
		return c, 0, fault.New("ERR", "ttl_ms and concurrency belong to reserve")
	}
	var window time.Duration
	if req.Rate != nil {
		per := time.Second
		if req.Per != nil {
			var ok bool
			if per, ok = bounds.ParseWindow([]byte(*req.Per)); !ok {
				return c, 0, refused(bounds.WindowMsg("per"))
			}
		}
		algo := engine.TokenBucket
		if req.Algo != nil {
			var ok bool
			if algo, ok = engine.ParseAlgo(*req.Algo); !ok {
				return c, 0, refused(bounds.OneOfMsg("algo", engine.AlgoNames()))
			}
		}
		if !bounds.Rate.In(*req.Rate) {
			return c, 0, refused(bounds.Rate.Msg("rate"))
		}
		burst := *req.Rate
		if req.Burst != nil {
			if !bounds.Burst.In(*req.Burst) {
				return c, 0, refused(bounds.Burst.Msg("burst"))
			}
			burst = *req.Burst
		}
		l, err := engine.NewLimit(algo, *req.Rate, per, burst)
		if err != nil {
			return c, 0, fault.New("ERR", "%s", strings.ToLower(err.Error()))
		}
		*lim = l
		c.Rate, window = lim, per
	}
	if q := req.Quota; q != nil {
		if !bounds.Quota.In(q.Limit) {
			return c, 0, refused(bounds.Quota.Msg("quota.limit"))
		}
		per := q.Per
		if per == "" {
			per = "month"
		}
		p, err := quota.ParsePeriod(per, q.TZ)
		if err != nil {
			return c, 0, fault.New("ERR", "quota: %s", strings.TrimPrefix(err.Error(), "ERR "))
		}
		*spec = quota.Spec{N: q.Limit, Period: p}
		c.Quota = spec
	}
	if req.Cost != nil {
		if !bounds.Cost.In(*req.Cost) {
			return c, 0, refused(bounds.Cost.Msg("cost"))
		}
		c.Cost, c.HasCost = *req.Cost, true
	} else if o == opRefund {
		return c, 0, fault.New("ERR", "cost is required: how many tokens to give back")
	} else if o == opReserve {
		return c, 0, fault.New("ERR", "cost is required: the estimate to reserve")
	}
	if req.WaitMs != nil {
		if !bounds.Wait.In(*req.WaitMs) {
			return c, 0, refused(bounds.Wait.Msg("wait_ms"))
		}
		c.WaitMs, c.HasWait = *req.WaitMs, true
	}
	c.DryRun = req.DryRun
	return c, window, nil
}

// refused is the ERR refusal of a field, with package bounds's message.
func refused(msg string) error { return &fault.Error{Code: "ERR", Msg: msg} }

// statusOf maps an error code to the HTTP status that answers it.
func statusOf(code string) int {
	switch code {
	case "NOBUDGET", "NORESERVATION":
		return http.StatusNotFound
	case "TRYAGAIN", "CLUSTERDOWN", "LOADING":
		return http.StatusServiceUnavailable
	case "NOPERM":
		return http.StatusForbidden
	case "ERR", "BUDGET":
		return http.StatusBadRequest
	}
	return http.StatusInternalServerError
}

func writeError(w http.ResponseWriter, err error) {
	code := fault.Code(err)
	msg := err.Error()
	msg = strings.TrimPrefix(msg, code+" ")
	writeProblem(w, statusOf(code), code, msg)
}

func writeProblem(w http.ResponseWriter, status int, code, detail string) {
	b := marshal(Problem{Type: ProblemInvalid, Title: http.StatusText(status), Status: status, Detail: detail, Code: code})
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	w.Write(b)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b := marshal(v)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	w.Write(b)
}

// marshal writes v as one line of JSON and a newline, <, > and & as they
// are.
func marshal(v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v) // strings and integers only
	return b.Bytes()
}

// errSubjectInline is budget.CheckSubject's refusal in the JSON API's
// names: a call that names its own key (key, not path) takes no subject.
var errSubjectInline = budget.SubjectInline("subject", "an inline limit's key is key")
