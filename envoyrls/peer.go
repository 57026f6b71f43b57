package envoyrls

// Per-descriptor charging (Options.PerDescriptor), envoyproxy/ratelimit's
// semantics on sluice's buckets. The peer keeps one counter per descriptor
// and window, INCRBY hits, and refuses when the count passes the limit: a
// refused request's hits stay counted, so the count may go past the limit
// and then even hits_addend 0 is refused until the window ends. Here a
// descriptor's bucket is the same fixed window; a refusal empties it (the
// count at the limit) and sets a flag for the window (the count past it),
// which is what hits_addend 0 reads.

import (
	"strings"
	"unsafe"

	"github.com/sluice-rl/sluice/budget"
	"github.com/sluice-rl/sluice/limiter"
)

// chargeEach decides each descriptor on its own and reports whether the
// request is admitted: no descriptor refused but quota ones, and not
// every quota one (shadow_mode descriptors never refuse).
func (s *Server) chargeEach(w *work) (bool, error) {
	hold := false
	if s.opts.StopIncrementWhenOverLimit {
		var err error
		if hold, err = s.markWouldExceed(w); err != nil {
			return false, err
		}
	}
	refused, quotas, quotasOver := false, 0, 0
	for i := range w.parts {
		p := &w.parts[i]
		p.quota = p.kind != unlimited && (s.opts.GlobalQuotaMode || p.rule != nil && p.rule.QuotaMode)
		if p.quota {
			quotas++
		}
		switch p.kind {
		case refund:
			if err := s.refund(p, w); err != nil {
				return false, err
			}
			continue
		case limited, shadow, charge:
		default:
			continue
		}
		// With the stop setting, a descriptor that would go over is
		// charged (and refused); the others are left as they are.
		if err := s.chargeOne(p, w, hold && !p.over && p.kind != charge); err != nil {
			return false, err
		}
		if s.metrics != nil && s.metrics.peer != nil {
			s.metrics.peer.count(p.statsKey(w), int64(p.rpu), p.call.Cost, p.before, p.after, p.kind == shadow)
		}
		switch {
		case p.code != codeOver:
		case p.kind == shadow:
			p.code, p.shadowHit = codeOK, true
		case p.kind == charge:
			// Counted, as every hit is here; a cost after the response
			// refuses nothing.
			p.code = codeOK
		case p.quota:
			quotasOver++
		default:
			refused = true
		}
	}
	return !refused && (quotas == 0 || quotasOver < quotas), nil
}

// chargeOne charges descriptor p its hits (only reads it with peekOnly)
// and fills its status as the peer reports it.
func (s *Server) chargeOne(p *part, w *work, peekOnly bool) error {
	hits := p.call.Cost
	if p.deny { // requests_per_unit 0: any hit is over
		p.code, p.remaining, p.limit, p.retry = codeOK, 0, 0, -1
		p.before, p.after = 0, hits
		p.reset = p.windowLeft(w.now)
		if hits > 0 {
			p.code = codeOver
		}
		return nil
	}
	var o limiter.Outcome
	var err error
	limit := int64(p.rpu)
	if peekOnly || hits == 0 {
		o, err = s.read(p, w, hits)
		p.after = limit - o.Result.Remaining // not charged
		if o.Allowed == 0 {
			p.after = limit + 1 // past the limit: refused hits counted
		}
		p.before = max(p.after-hits, 0)
	} else {
		one := p.call
		one.HasWait = true
		if o, err = s.svc.Acquire(&one, &w.sc, nil); err == nil && o.Allowed == 0 {
			p.before = limit - o.Result.Remaining
			// Refused with the hits still there (in a cluster, a node's
			// lease ran dry while its owner has tokens): not over its
			// limit, so nothing is counted.
			if o.Result.Remaining < hits {
				err = s.countRefused(p, w, o.Result.Remaining)
			}
		} else {
			p.before = limit - o.Result.Remaining - hits
		}
		p.after = p.before + hits
	}
	if err != nil {
		return grpcError(err)
	}
	p.describe(&o)
	if p.code == codeOver {
		p.remaining = 0
	}
	return nil
}

// read returns p's state without charging it: refused only when hits is
// 0 and the window has counted a refused hit (the count is past the limit).
func (s *Server) read(p *part, w *work, hits int64) (limiter.Outcome, error) {
	one := p.call
	one.Cost = 0
	o, err := s.svc.Peek(&one, &w.sc)
	o.Allowed = 1
	if err != nil || hits != 0 || o.Result.Remaining > 0 {
		return o, err
	}
	over, err := s.overMarked(p, w)
	if over {
		o.Allowed = 0
	}
	return o, err
}

// countRefused counts a refused descriptor's hits: its bucket emptied
// (left tokens were there) and its over flag set for the window.
func (s *Server) countRefused(p *part, w *work, left int64) error {
	for i := 0; i < 4 && left > 0; i++ {
		one := p.call
		one.Cost, one.HasWait = left, true
		o, err := s.svc.Acquire(&one, &w.sc, nil)
		if err != nil {
			return err
		}
		if o.Allowed != 0 {
			break // emptied
		}
		left = o.Result.Remaining // taken meanwhile by another request
	}
	flag := s.overFlag(p, w)
	_, err := s.svc.Acquire(&flag, &w.sc, nil)
	return err
}

// overMarked reports whether p's window has counted a refused hit.
func (s *Server) overMarked(p *part, w *work) (bool, error) {
	flag := s.overFlag(p, w)
	o, err := s.svc.Peek(&flag, &w.sc)
	return err == nil && o.Allowed == 0, err
}

// overFlag is the call on p's over flag: its key with a suffix no
// descriptor key has (a NUL byte), one token per window of p's unit.
func (s *Server) overFlag(p *part, w *work) budget.Call {
	w.flag = append(append(w.flag[:0], p.call.Path...), "\x00over"...)
	if p.calFlag != nil {
		return budget.Call{Path: w.flag, Quota: p.calFlag, Cost: 1, HasCost: true, HasWait: true}
	}
	return budget.Call{Path: w.flag, Rate: p.flag, Cost: 1, HasCost: true, HasWait: true}
}

// markWouldExceed sets p.over on each descriptor that its hits would
// take over its limit, and reports whether any would.
func (s *Server) markWouldExceed(w *work) (bool, error) {
	anyOver := false
	for i := range w.parts {
		p := &w.parts[i]
		if p.kind != limited && p.kind != shadow {
			continue
		}
		var err error
		switch {
		case p.deny:
			p.over = p.call.Cost > 0
		case p.call.Cost == 0:
			p.over, err = s.overMarked(p, w)
		default:
			var o limiter.Outcome
			o, err = s.svc.Peek(&p.call, &w.sc)
			p.over = o.Allowed == 0
		}
		if err != nil {
			return false, grpcError(err)
		}
		anyOver = anyOver || p.over
	}
	return anyOver, nil
}

// statsKey is descriptor p's key in the peer's stats: its rule's, or for
// an override the domain and the descriptor's keys and values, as the
// peer's descriptorKey names it (built in w.stat, no string kept).
func (p *part) statsKey(w *work) string {
	if p.entries == nil {
		return p.metric
	}
	b := append(w.stat[:0], strings.TrimSuffix(p.metric, ".override")...)
	b = append(b, '.')
	for i, e := range p.entries {
		if i > 0 {
			b = append(b, '.')
		}
		b = append(b, e.GetKey()...)
		if v := e.GetValue(); v != "" {
			b = append(append(b, '_'), v...)
		}
	}
	w.stat = b
	return unsafe.String(unsafe.SliceData(b), len(b))
}
