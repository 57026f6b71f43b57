package httpapi

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-rl/sluice/bounds"
	"github.com/sluice-rl/sluice/budget"
	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/fault"
	"github.com/sluice-rl/sluice/limiter"
	"github.com/sluice-rl/sluice/quota"
	"github.com/sluice-rl/sluice/usage"
)

// Page sizes of the listing endpoints: n when the query names none, and
// the most it may name.
const (
	DefaultPage = 100
	MaxPage     = limiter.MaxUsageCount
	DefaultTop  = 10
	MaxTop      = 1000
)

// Top is a cluster-wide heavy-hitters answer (RL.TOP).
type Top struct {
	Summary usage.Summary
	// Nodes is how many nodes' summaries went in; Unreachable names the
	// members that did not answer.
	Nodes       int
	Unreachable []string
}

// ClusterStatus is what GET /v1/cluster reports: RL.CLUSTER INFO and
// NODES as seen from this node.
type ClusterStatus struct {
	NodeID       string          `json:"node_id"`
	Role         string          `json:"role"`
	LeaderID     string          `json:"leader_id"`
	LeaderAddr   string          `json:"leader_addr"`
	Term         uint64          `json:"term"`
	CommitIndex  uint64          `json:"commit_index"`
	AppliedIndex uint64          `json:"applied_index"`
	SyncLagMs    int64           `json:"sync_lag_ms"`
	Members      []ClusterMember `json:"members"`
}

// ClusterMember is one member of the cluster.
type ClusterMember struct {
	ID       string `json:"id"`
	RespAddr string `json:"resp_addr"`
	RaftAddr string `json:"raft_addr"`
	Suffrage string `json:"suffrage"`
	Role     string `json:"role"`
}

// Views are the answers that need more than the service: the cluster's
// merged top keys and its members. Either may be nil (no such endpoint).
type Views struct {
	Top     func(by string) Top
	Cluster func() (ClusterStatus, error)
}

func (a *API) registerAdmin(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/usage", a.usage)
	mux.HandleFunc("GET /v1/top", a.top)
	mux.HandleFunc("GET /v1/history", a.history)
	mux.HandleFunc("GET /v1/cluster", a.cluster)
	mux.HandleFunc("GET /v1/quotas", a.quotas)
	mux.HandleFunc("POST /v1/quota/set", a.quotaSet)
	mux.HandleFunc("GET /v1/budgets", a.budgets)
	mux.HandleFunc("GET /v1/budgets/{path...}", a.budgetGet)
	mux.HandleFunc("PUT /v1/budgets/{path...}", a.budgetPut)
	mux.HandleFunc("DELETE /v1/budgets/{path...}", a.budgetDelete)
	mux.HandleFunc("POST /v1/reset", a.reset)
}

// allowed checks access for a request without a body (admin: the
// operation needs the admin role), answering the refusal itself.
func (a *API) allowed(w http.ResponseWriter, r *http.Request, admin bool) bool {
	if a.Access == nil {
		return true
	}
	err := a.Access(r, admin)
	if err == nil {
		return true
	}
	if d, ok := err.(*Denied); ok {
		if d.Status == http.StatusUnauthorized {
			w.Header().Set("WWW-Authenticate", `Bearer realm="sluice"`)
		}
		writeProblem(w, d.Status, "", d.Msg)
		return false
	}
	writeProblem(w, http.StatusInternalServerError, "", err.Error())
	return false
}

// pageSize reads the query parameter name as a count in [1, max], def
// when absent.
func pageSize(r *http.Request, name string, def, max int) (int, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if r := (bounds.Int{Lo: 1, Hi: int64(max)}); err != nil || !r.In(int64(n)) {
		return 0, refused(r.Msg(name))
	}
	return n, nil
}

// knownParams refuses query parameters other than those named.
func knownParams(r *http.Request, names ...string) error {
	for k := range r.URL.Query() {
		ok := false
		for _, n := range names {
			ok = ok || k == n
		}
		if !ok {
			return fault.New("ERR", "unknown query parameter '%s'; this endpoint takes %s", fault.Printable([]byte(k)), strings.Join(names, ", "))
		}
	}
	return nil
}

// NodeUsage is one node of GET /v1/usage.
type NodeUsage struct {
	Path         string      `json:"path"`
	Rate         int64       `json:"rate"`
	Window       string      `json:"window"`
	Burst        int64       `json:"burst"`
	Remaining    int64       `json:"remaining"`
	ResetAfterMs int64       `json:"reset_after_ms"`
	LimitedBy    string      `json:"limited_by"`
	Note         string      `json:"note,omitempty"`
	Quota        *QuotaReply `json:"quota"`
	InFlight     int         `json:"in_flight"`
	Admitted1m   int64       `json:"admitted_1m"`
	Refused1m    int64       `json:"refused_1m"`
}

func (a *API) usage(w http.ResponseWriter, r *http.Request) {
	n, ok := a.page(w, r, "prefix", "subject", "after", "n")
	if !ok {
		return
	}
	q := r.URL.Query()
	var subject []byte
	if q.Has("subject") {
		subject = []byte(q.Get("subject"))
	}
	var sc limiter.Scratch
	nodes, next, err := a.Service.Usage(q.Get("prefix"), q.Get("after"), subject, n, &sc)
	if err != nil {
		writeError(w, err)
		return
	}
	now := a.Service.Clock()
	out := make([]NodeUsage, 0, len(nodes))
	for i := range nodes {
		u := &nodes[i]
		v := NodeUsage{Path: u.Path, Remaining: -1, Admitted1m: -1, Refused1m: -1, InFlight: u.InFlight}
		if u.HasLimit {
			v.Rate, v.Window, v.Burst = u.Limit.Rate, budget.FormatWindow(time.Duration(u.Limit.Window)), u.Limit.Burst
		}
		switch {
		case u.PeekErr != nil:
			v.Note = strings.TrimPrefix(u.PeekErr.Error(), fault.Code(u.PeekErr)+" ")
		case u.Peek.Unlimited:
			v.Note = "unlimited"
		default:
			v.Remaining, v.ResetAfterMs, v.LimitedBy = u.Peek.Result.Remaining, engine.CeilMs(u.Peek.Result.ResetAfter), string(u.Peek.LimitedBy)
		}
		if st := u.Quota; st != nil {
			v.Quota = &QuotaReply{Level: string(st.Level), Limit: st.Limit, Used: st.Used, Remaining: st.Remaining(),
				Period: st.Period.String(), ResetsAt: st.End / 1e9, ResetAfterMs: engine.CeilMs(st.End - now)}
		}
		if u.Counted {
			v.Admitted1m, v.Refused1m = u.Admitted, u.Refused
		}
		out = append(out, v)
	}
	writeJSON(w, http.StatusOK, map[string]any{"nodes": out, "next": next})
}

// TopReply is GET /v1/top's answer.
type TopReply struct {
	By          string        `json:"by"`
	WindowS     int64         `json:"window_s"`
	Total       int64         `json:"total"`
	Bound       int64         `json:"bound"`
	Nodes       int           `json:"nodes"`
	Unreachable []string      `json:"unreachable"`
	Keys        []usage.Entry `json:"keys"`
}

func (a *API) top(w http.ResponseWriter, r *http.Request) {
	if !a.allowed(w, r, false) {
		return
	}
	n, err := pageSize(r, "n", DefaultTop, MaxTop)
	if err == nil {
		err = knownParams(r, "by", "n")
	}
	by := r.URL.Query().Get("by")
	switch by {
	case "", limiter.TopRefused:
		by = limiter.TopRefused
	case limiter.TopAdmitted:
	default:
		if err == nil {
			err = fault.New("ERR", "by must be denied or admitted")
		}
	}
	if err != nil {
		writeError(w, err)
		return
	}
	var t Top
	if a.Views.Top != nil {
		t = a.Views.Top(by)
	} else {
		t = Top{Summary: usage.Merge(a.Service.TopSummary(by)), Nodes: 1}
	}
	keys := t.Summary.Entries
	if len(keys) > n {
		keys = keys[:n]
	}
	if keys == nil {
		keys = []usage.Entry{}
	}
	if t.Unreachable == nil {
		t.Unreachable = []string{}
	}
	writeJSON(w, http.StatusOK, TopReply{By: by, WindowS: usage.Windows * usage.Window / 1e9, Total: t.Summary.N,
		Bound: t.Summary.Floor, Nodes: t.Nodes, Unreachable: t.Unreachable, Keys: keys})
}

func (a *API) history(w http.ResponseWriter, r *http.Request) {
	if !a.allowed(w, r, false) {
		return
	}
	ok, no := a.Service.History()
	writeJSON(w, http.StatusOK, map[string]any{"step_s": usage.Step / 1e9, "now": a.Service.Clock() / 1e6,
		"admitted": ok[:], "refused": no[:]})
}

func (a *API) cluster(w http.ResponseWriter, r *http.Request) {
	if !a.allowed(w, r, false) {
		return
	}
	if a.Views.Cluster == nil {
		writeProblem(w, http.StatusNotFound, "ERR", "this node reports no cluster")
		return
	}
	st, err := a.Views.Cluster()
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

// QuotaCounter is one counter of GET /v1/quotas.
type QuotaCounter struct {
	Level        string `json:"level"`
	Kind         string `json:"kind"`
	Limit        int64  `json:"limit"`
	Used         int64  `json:"used"`
	Remaining    int64  `json:"remaining"`
	Period       string `json:"period"`
	ResetsAt     int64  `json:"resets_at"`
	ResetAfterMs int64  `json:"reset_after_ms"`
}

// page checks a listing request: access (any role reads), its page size
// n and that it names only the known parameters; it answers the refusal
// itself.
func (a *API) page(w http.ResponseWriter, r *http.Request, known ...string) (int, bool) {
	if !a.allowed(w, r, false) {
		return 0, false
	}
	n, err := pageSize(r, "n", DefaultPage, MaxPage)
	if err == nil {
		err = knownParams(r, known...)
	}
	if err != nil {
		writeError(w, err)
		return 0, false
	}
	return n, true
}

func (a *API) quotas(w http.ResponseWriter, r *http.Request) {
	n, ok := a.page(w, r, "prefix", "after", "n")
	if !ok {
		return
	}
	q := r.URL.Query()
	list, next, err := a.Service.QuotaList(q.Get("prefix"), q.Get("after"), n)
	if err != nil {
		writeError(w, err)
		return
	}
	now := a.Service.Clock()
	out := make([]QuotaCounter, 0, len(list))
	for _, c := range list {
		kind := "budget"
		if c.Inline {
			kind = "inline"
		}
		out = append(out, QuotaCounter{Level: c.Level, Kind: kind, Limit: c.Limit, Used: c.Used, Remaining: max(c.Limit-c.Used, 0),
			Period: c.Period, ResetsAt: c.End / 1e9, ResetAfterMs: max(engine.CeilMs(c.End-now), 0)})
	}
	writeJSON(w, http.StatusOK, map[string]any{"counters": out, "next": next})
}

// QuotaSetRequest is POST /v1/quota/set's body: the target as for
// /v1/quota (path and subject, or key and, for an inline quota not yet
// committed, quota) and the count to set.
type QuotaSetRequest struct {
	Request
	Used *int64 `json:"used"`
}

func (a *API) quotaSet(w http.ResponseWriter, r *http.Request) {
	var req QuotaSetRequest
	if !a.decode(w, r, true, &req) {
		return
	}
	if r := (bounds.Int{Lo: 0, Hi: engine.MaxRate}); req.Used == nil || !r.In(*req.Used) {
		writeError(w, refused(r.Msg("used")))
		return
	}
	var lim engine.Limit
	var spec quota.Spec
	call, _, err := a.call(&req.Request, opQuota, &lim, &spec)
	if err != nil {
		writeError(w, err)
		return
	}
	var sc limiter.Scratch
	n, err := a.Service.QuotaSet(&call, *req.Used, &sc)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]int{"counters": n})
}

// BudgetPage is GET /v1/budgets's answer: a page of nodes as RL.BUDGET
// GET describes them.
type BudgetPage struct {
	Budgets []json.RawMessage `json:"budgets"`
	Next    string            `json:"next"`
}

func (a *API) budgets(w http.ResponseWriter, r *http.Request) {
	n, ok := a.page(w, r, "prefix", "after", "n")
	if !ok {
		return
	}
	st, err := a.Service.Cluster.ReadState(false)
	if err != nil {
		writeError(w, err)
		return
	}
	q := r.URL.Query()
	paths, more := st.Tree.PathsPage(q.Get("prefix"), q.Get("after"), n)
	out := BudgetPage{Budgets: []json.RawMessage{}}
	for _, p := range paths {
		if node := st.Tree.Get(p); node != nil {
			out.Budgets = append(out.Budgets, st.Tree.NodeJSON(node))
		}
	}
	if more && len(paths) > 0 {
		out.Next = paths[len(paths)-1]
	}
	writeJSON(w, http.StatusOK, out)
}

// budgetPath reads and checks the {path} of a /v1/budgets/ request.
func (a *API) budgetPath(r *http.Request) (string, error) {
	p := r.PathValue("path")
	if len(p) > a.MaxKeyLen {
		return "", fault.New("ERR", "budget path is too long: %d bytes, the limit (--max-key-len) is %d", len(p), a.MaxKeyLen)
	}
	if err := budget.ValidPath(p); err != nil {
		return "", err
	}
	return p, nil
}

func (a *API) budgetGet(w http.ResponseWriter, r *http.Request) {
	if !a.allowed(w, r, false) {
		return
	}
	p, err := a.budgetPath(r)
	if err != nil {
		writeError(w, err)
		return
	}
	st, err := a.Service.Cluster.ReadState(false)
	if err != nil {
		writeError(w, err)
		return
	}
	node := st.Tree.Get(p)
	if node == nil {
		writeProblem(w, http.StatusNotFound, "NOBUDGET", "no budget node at '"+p+"'")
		return
	}
	b := st.Tree.NodeJSON(node)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(http.StatusOK)
	w.Write(append(b, '\n'))
}

// BudgetWrite is the answer to PUT and DELETE /v1/budgets/{path}.
type BudgetWrite struct {
	Path    string `json:"path"`
	Warning string `json:"warning,omitempty"`
	Deleted *int   `json:"deleted,omitempty"`
}

func (a *API) budgetPut(w http.ResponseWriter, r *http.Request) {
	var raw json.RawMessage
	if !a.decode(w, r, true, &raw) {
		return
	}
	p, err := a.budgetPath(r)
	if err != nil {
		writeError(w, err)
		return
	}
	cfg, err := budget.ParseJSON(raw)
	if err != nil {
		writeError(w, err)
		return
	}
	warn, err := a.Service.SetBudget(p, &cfg)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, BudgetWrite{Path: p, Warning: warn})
}

func (a *API) budgetDelete(w http.ResponseWriter, r *http.Request) {
	if !a.allowed(w, r, true) {
		return
	}
	p, err := a.budgetPath(r)
	if err == nil {
		err = knownParams(r, "recursive")
	}
	recursive := false
	switch v := r.URL.Query().Get("recursive"); v {
	case "", "false":
	case "true":
		recursive = true
	default:
		if err == nil {
			err = fault.New("ERR", "recursive must be true or false")
		}
	}
	if err != nil {
		writeError(w, err)
		return
	}
	n, err := a.Service.DelBudget(p, recursive)
	if err != nil {
		writeError(w, err)
		return
	}
	if n == 0 {
		writeProblem(w, http.StatusNotFound, "NOBUDGET", "no budget node at '"+p+"'")
		return
	}
	writeJSON(w, http.StatusOK, BudgetWrite{Path: p, Deleted: &n})
}

// reset forgets the bucket a call names, as RL.RESET (admin).
func (a *API) reset(w http.ResponseWriter, r *http.Request) {
	var req Request
	if !a.decode(w, r, true, &req) {
		return
	}
	if req.Rate != nil || req.Quota != nil || req.Cost != nil || req.WaitMs != nil || req.DryRun || req.TTLMs != nil || req.Concurrency != nil {
		writeError(w, fault.New("ERR", "reset takes key or path, and subject, only"))
		return
	}
	var lim engine.Limit
	var spec quota.Spec
	call, _, err := a.call(&req, opPeek, &lim, &spec)
	if err != nil {
		writeError(w, err)
		return
	}
	var sc limiter.Scratch
	found, err := a.Service.Reset(&call, &sc)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]bool{"reset": found})
}
