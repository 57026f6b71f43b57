package raftfsm

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"

	"github.com/sluice-rl/sluice/budget"
)

// ReqID names one write of one node, so that a write retried after an
// unknown outcome (leadership lost while applying, a forward whose reply
// never came) is applied once: the state machine remembers the outcome of
// recent writes per node and answers a repeat with it, changing nothing.
type ReqID struct {
	Node string `json:"node"`
	Seq  uint64 `json:"seq"`
}

// Bounds of the table of remembered writes. A retry comes within one
// --apply-timeout of its first attempt, far inside these.
const (
	writesPerNode = 1024
	writeNodes    = 256
)

// outcome is a remembered Response in a form that snapshots can carry.
type outcome struct {
	Seq   uint64 `json:"seq"`
	Index uint64 `json:"index"`
	Code  string `json:"code,omitempty"`
	Msg   string `json:"msg,omitempty"`
	Warn  string `json:"warn,omitempty"`
	N     int    `json:"n,omitempty"`
}

func outcomeOf(seq, index uint64, r Response) outcome {
	o := outcome{Seq: seq, Index: index, Warn: r.Warn, N: r.N}
	if r.Err != nil {
		var be *budget.Error
		if errors.As(r.Err, &be) {
			o.Code, o.Msg = be.Code, be.Msg
		} else {
			o.Code, o.Msg = "ERR", r.Err.Error()
		}
	}
	return o
}

func (o outcome) response() Response {
	r := Response{Warn: o.Warn, N: o.N, Index: o.Index}
	if o.Code != "" {
		r.Err = &budget.Error{Code: o.Code, Msg: o.Msg}
	}
	return r
}

// EncodeResponse is the form in which a leader answers a forwarded write.
func EncodeResponse(r Response) []byte {
	b, _ := json.Marshal(outcomeOf(0, r.Index, r))
	return b
}

// DecodeResponse reads what EncodeResponse wrote.
func DecodeResponse(b []byte) (Response, error) {
	var o outcome
	if err := json.Unmarshal(b, &o); err != nil {
		return Response{}, fmt.Errorf("raftfsm: forwarded reply: %w", err)
	}
	return o.response(), nil
}

// writeTable holds the remembered outcomes. Only Raft's FSM goroutine
// touches it (Apply, Snapshot, Restore), so it needs no lock; evictions
// depend only on the log, so every replica keeps the same table.
type writeTable struct {
	nodes map[string]*nodeWrites
}

type nodeWrites struct {
	last uint64 // log index of the node's latest write
	byID map[uint64]outcome
}

// repeat returns the outcome of write id if it was applied already (nil:
// a write without id, never a repeat).
func (w *writeTable) repeat(id *ReqID) (Response, bool) {
	if id == nil {
		return Response{}, false
	}
	o, ok := w.get(id)
	return o.response(), ok
}

func (w *writeTable) get(id *ReqID) (outcome, bool) {
	nw := w.nodes[id.Node]
	if nw == nil {
		return outcome{}, false
	}
	o, ok := nw.byID[id.Seq]
	return o, ok
}

// remember records the outcome r of write id (nil: nothing to remember).
func (w *writeTable) remember(id *ReqID, r Response) {
	if id != nil {
		w.put(id, outcomeOf(id.Seq, r.Index, r))
	}
}

func (w *writeTable) put(id *ReqID, o outcome) {
	if w.nodes == nil {
		w.nodes = map[string]*nodeWrites{}
	}
	nw := w.nodes[id.Node]
	if nw == nil {
		if len(w.nodes) >= writeNodes {
			w.dropOldestNode()
		}
		nw = &nodeWrites{byID: map[uint64]outcome{}}
		w.nodes[id.Node] = nw
	}
	nw.last = o.Index
	nw.byID[id.Seq] = o
	if len(nw.byID) > writesPerNode {
		lowest := uint64(0)
		first := true
		for s := range nw.byID {
			if first || s < lowest {
				lowest, first = s, false
			}
		}
		delete(nw.byID, lowest)
	}
}

func (w *writeTable) dropOldestNode() {
	oldest, idx := "", uint64(0)
	for id, nw := range w.nodes {
		if oldest == "" || nw.last < idx || nw.last == idx && id < oldest {
			oldest, idx = id, nw.last
		}
	}
	delete(w.nodes, oldest)
}

// writeDoc is the table as snapshots carry it.
type writeDoc struct {
	Node     string    `json:"node"`
	Outcomes []outcome `json:"outcomes"`
}

func (w *writeTable) docs() []writeDoc {
	out := make([]writeDoc, 0, len(w.nodes))
	for id, nw := range w.nodes {
		d := writeDoc{Node: id, Outcomes: make([]outcome, 0, len(nw.byID))}
		for _, o := range nw.byID {
			d.Outcomes = append(d.Outcomes, o)
		}
		sort.Slice(d.Outcomes, func(i, j int) bool { return d.Outcomes[i].Seq < d.Outcomes[j].Seq })
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out
}

func writesFrom(docs []writeDoc) writeTable {
	w := writeTable{nodes: map[string]*nodeWrites{}}
	for _, d := range docs {
		nw := &nodeWrites{byID: make(map[uint64]outcome, len(d.Outcomes))}
		for _, o := range d.Outcomes {
			nw.byID[o.Seq] = o
			nw.last = max(nw.last, o.Index)
		}
		w.nodes[d.Node] = nw
	}
	return w
}
