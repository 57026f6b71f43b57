package httpapi

import (
	"net/http"
	"time"

	"github.com/sluice-rl/sluice/bounds"
	"github.com/sluice-rl/sluice/budget"
	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/fault"
	"github.com/sluice-rl/sluice/limiter"
	"github.com/sluice-rl/sluice/quota"
)

// MaxTTLMs bounds ttl_ms, as TTL's bound for RL.RESERVE.
const MaxTTLMs = bounds.MaxTTLMs

// ReserveReply is RL.RESERVE's reply: the six fields and the id (empty
// when refused).
type ReserveReply struct {
	Reply
	ID string `json:"id"`
}

// IDRequest is the body of /v1/settle (id, actual), /v1/release (id) and
// /v1/renew (id, ttl_ms).
type IDRequest struct {
	ID     string `json:"id"`
	Actual *int64 `json:"actual"`
	TTLMs  *int64 `json:"ttl_ms"`
}

func (a *API) registerReserve(mux *http.ServeMux) {
	mux.HandleFunc("POST /v1/reserve", a.reserve)
	mux.HandleFunc("POST /v1/settle", a.settle)
	mux.HandleFunc("POST /v1/release", a.release)
	mux.HandleFunc("POST /v1/renew", a.renew)
}

func (a *API) reserve(w http.ResponseWriter, r *http.Request) {
	var req Request
	if !a.decode(w, r, false, &req) {
		return
	}
	var lim engine.Limit
	var spec quota.Spec
	call, window, err := a.call(&req, opReserve, &lim, &spec)
	var o limiter.ReserveOpts
	if err == nil {
		o, err = reserveOpts(&req)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	var sc limiter.Scratch
	out, id, err := a.Service.Reservation(&call, o, &sc, requestWatcher{r})
	if err != nil {
		writeError(w, err)
		return
	}
	a.writeOutcome(w, &out, &call, window, true, func(r Reply) any { return ReserveReply{Reply: r, ID: id} })
}

// reserveOpts checks ttl_ms and concurrency.
func reserveOpts(req *Request) (limiter.ReserveOpts, error) {
	var o limiter.ReserveOpts
	if req.TTLMs != nil {
		if !bounds.TTL.In(*req.TTLMs) {
			return o, refused(bounds.TTL.Msg("ttl_ms"))
		}
		o.TTL = *req.TTLMs * int64(time.Millisecond)
	}
	if req.Concurrency != nil {
		if !bounds.Concurrency.In(*req.Concurrency) {
			return o, refused(bounds.Concurrency.Msg("concurrency"))
		}
		if req.Path != nil {
			return o, fault.New("ERR", "concurrency belongs to the inline form (key); a budget node's limit is its concurrency")
		}
		o.Concurrency = *req.Concurrency
	}
	return o, nil
}

// decodeID reads an IDRequest that must carry id, and which of actual and
// ttl_ms the endpoint takes (want: "actual", "ttl_ms" or "").
func (a *API) decodeID(w http.ResponseWriter, r *http.Request, want string) (IDRequest, bool) {
	var req IDRequest
	if !a.decode(w, r, false, &req) {
		return req, false
	}
	var err error
	switch {
	case req.ID == "":
		err = fault.New("ERR", "id is required: the id /v1/reserve returned")
	case want != "actual" && req.Actual != nil, want != "ttl_ms" && req.TTLMs != nil:
		err = fault.New("ERR", "actual belongs to settle and ttl_ms to renew")
	case want == "actual" && (req.Actual == nil || !bounds.Cost.In(*req.Actual)):
		err = refused(bounds.Cost.Msg("actual"))
	case want == "ttl_ms" && (req.TTLMs == nil || !bounds.TTL.In(*req.TTLMs)):
		err = refused(bounds.TTL.Msg("ttl_ms"))
	}
	if err != nil {
		writeError(w, err)
		return req, false
	}
	return req, true
}

func (a *API) settle(w http.ResponseWriter, r *http.Request) {
	req, ok := a.decodeID(w, r, "actual")
	if !ok {
		return
	}
	out, err := a.Service.Settle(req.ID, *req.Actual)
	if err != nil {
		writeError(w, err)
		return
	}
	c := budget.Call{Path: out.LimitedBy}
	a.writeOutcome(w, &out, &c, 0, false, func(r Reply) any { return r })
}

func (a *API) release(w http.ResponseWriter, r *http.Request) {
	req, ok := a.decodeID(w, r, "")
	if !ok {
		return
	}
	done, err := a.Service.Release(req.ID)
	writeDone(w, "released", done, err)
}

func (a *API) renew(w http.ResponseWriter, r *http.Request) {
	req, ok := a.decodeID(w, r, "ttl_ms")
	if !ok {
		return
	}
	done, err := a.Service.Renew(req.ID, *req.TTLMs*int64(time.Millisecond))
	writeDone(w, "renewed", done, err)
}

// writeDone answers {"<name>": true|false}, or the error.
func writeDone(w http.ResponseWriter, name string, done bool, err error) {
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]bool{name: done})
}
