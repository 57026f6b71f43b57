// Package envoyrls is sluice's front for Envoy's global rate limit service
// protocol (envoy.service.ratelimit.v3.RateLimitService): it maps each
// ShouldRateLimit request onto one call of the service core
// (limiter.Service), every descriptor a part of that call, so that the
// descriptors of a request are admitted together or not at all — or, under
// Options that `sluice ratelimit` sets (options.go, peer.go), answers as
// envoyproxy/ratelimit does, each descriptor charged on its own.
//
// A descriptor is limited by the first of: its own limit override (an
// inline fixed window), in a domain with rules; the rules of its domain
// when the domain is in the envoyproxy/ratelimit configuration loaded with
// --envoy-config (Config: an inline fixed window per matched rule, keyed by
// the request's entries as envoyproxy/ratelimit keys its counters);
// otherwise the budget tree, at the path domain/key1/value1/…/keyN/valueN
// with valueN as the subject (KEY), unless Options.RulesOnly.
// docs/envoy.md states the mapping for users.
package envoyrls

import (
	"context"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluice-rl/sluice/budget"
	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/fault"
	"github.com/sluice-rl/sluice/limiter"
	"github.com/sluice-rl/sluice/protocol/ratehdr"
	"github.com/sluice-rl/sluice/quota"
)

// MaxEntries bounds the entries of a descriptor that maps onto the budget
// tree: the domain and a key and a value per entry must fit in
// budget.MaxDepth path segments.
const MaxEntries = (budget.MaxDepth - 1) / 2

// KeyPrefix starts the inline keys of descriptors limited by a loaded
// configuration or a limit override.
const KeyPrefix = "envoy/"

// Server answers ShouldRateLimit from a limiter.Service.
type Server struct {
	rlsv3.UnimplementedRateLimitServiceServer

	svc *limiter.Service
	// cfg is the loaded configuration (nil: none), replaced whole by
	// SetConfig; a request reads it once, into its work.
	cfg     atomic.Pointer[Config]
	metrics *Metrics
	// MaxKeyLen bounds the keys and paths a descriptor builds (--max-key-len).
	maxKeyLen int
	pool      sync.Pool
	opts      Options
}

// NewServer returns the Envoy front of svc with the loaded configuration
// cfg (nil: every domain maps onto the budget tree); m may be nil.
func NewServer(svc *limiter.Service, cfg *Config, m *Metrics, maxKeyLen int) *Server {
	s := &Server{svc: svc, metrics: m, maxKeyLen: maxKeyLen, opts: SluiceOptions()}
	s.cfg.Store(cfg)
	s.pool.New = func() any { return new(work) }
	return s
}

// SetConfig puts a newly loaded configuration in force for the next
// request; requests under way finish with the one they began with.
func (s *Server) SetConfig(cfg *Config) { s.cfg.Store(cfg) }

// Config returns the configuration in force (nil: none).
func (s *Server) Config() *Config { return s.cfg.Load() }

// kind is how one descriptor is limited.
type kind uint8

const (
	noLimit   kind = iota // nothing matched: not limited
	unlimited             // a rule with unlimited: true
	limited               // charged with the request
	shadow                // charged, never refusing (shadow_mode)
	refund                // is_negative_hits: tokens given back
	charge                // apply_on_stream_done with hits: charged, never refused
)

// part is one descriptor of a request being decided.
type part struct {
	kind    kind
	deny    bool // requests_per_unit 0: always over the limit
	rule    *Rule
	lim     engine.Limit // an override's
	call    budget.Call
	rpu     uint32
	unit    Unit
	window  time.Duration
	flag    *engine.Limit // the over flag's limit: one a window (PerDescriptor)
	cal     *quota.Spec   // a calendar rule's quota (timezone:), else nil
	calFlag *quota.Spec   // its over flag: one a period
	name    string
	metric  string
	entries []*entry // an override's: the peer's stats key names them
	keyFrom int      // the call's key and subject in work.buf
	keyTo   int
	subTo   int

	code      rlsv3.RateLimitResponse_Code
	remaining int64
	limit     int64
	reset     int64 // ns
	retry     int64 // ns, -1 never
	shadowHit bool  // a shadow_mode rule that would have refused
	over      bool  // PerDescriptor with StopIncrementWhenOverLimit: would go over
	quota     bool  // PerDescriptor: a quota descriptor (quota_mode, QUOTA_MODE)
	// PerDescriptor: the window's count before and after the request, as
	// envoyproxy/ratelimit's stats count them.
	before, after int64
}

// work is the reusable state of one request.
type work struct {
	parts []part
	group []budget.Call
	buf   []byte
	sc    limiter.Scratch
	cfg   *Config // the configuration this request is decided by
	now   int64   // the service clock when the request began (ns)
	path  []*Rule // the rules the descriptor being classified matched
	flag  []byte  // the key of a PerDescriptor over-limit flag
	stat  []byte  // an override's peer stats key
}

func (s *Server) domainLabel(domain string, w *work) string {
	if w.cfg.HasDomain(domain) {
		return domain
	}
	p := w.parts
	for i := range p {
		if p[i].kind != noLimit {
			return domain
		}
	}
	return "unknown"
}

// ShouldRateLimit decides a request: under sluice's semantics every
// descriptor that limits is a part of one call, admitted together or not
// at all; with Options.PerDescriptor each is charged on its own, as
// envoyproxy/ratelimit charges them.
func (s *Server) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	if s.metrics == nil || s.metrics.peer == nil {
		return s.shouldRateLimit(req)
	}
	// The peer's gRPC interceptor counts each call and its time.
	start := time.Now()
	resp, err := s.answer(req)
	s.metrics.peer.request(time.Since(start))
	return resp, err
}

// answer decides a request of the gRPC service or of the peer's /json
// endpoint, counting a failure as the peer's service_error.
func (s *Server) answer(req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	resp, err := s.shouldRateLimit(req)
	if err != nil && s.metrics != nil && s.metrics.peer != nil {
		s.metrics.peer.callError()
	}
	return resp, err
}

func (s *Server) shouldRateLimit(req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	if req.GetDomain() == "" {
		return nil, s.requestError("rate limit domain must not be empty")
	}
	if len(req.GetDescriptors()) == 0 {
		return nil, s.requestError("rate limit descriptor list must not be empty")
	}
	if len(req.Descriptors) > budget.MaxParts && !s.opts.PerDescriptor {
		// One call holds at most MaxParts parts; charged one by one, a
		// request may carry any number, as the peer's.
		return nil, status.Errorf(codes.InvalidArgument, "a request may carry at most %d descriptors, this one has %d", budget.MaxParts, len(req.Descriptors))
	}
	w := s.pool.Get().(*work)
	defer s.pool.Put(w)
	w.cfg = s.cfg.Load()
	if w.cfg == nil && s.opts.RulesOnly {
		return nil, errNoConfig
	}
	w.now = s.svc.Clock()
	resp, err := s.decide(req, w)
	if err != nil {
		return nil, err
	}
	return resp, nil
}

func (s *Server) decide(req *rlsv3.RateLimitRequest, w *work) (*rlsv3.RateLimitResponse, error) {
	if err := s.prepare(req, w); err != nil {
		return nil, err
	}
	if s.opts.PerDescriptor {
		admitted, err := s.chargeEach(w)
		if err != nil {
			return nil, err
		}
		return s.respond(req, w, admitted, false, &limiter.Outcome{}), nil
	}
	return s.chargeTogether(req, w)
}

// prepare classifies every descriptor of req and builds its call.
func (s *Server) prepare(req *rlsv3.RateLimitRequest, w *work) error {
	domain := req.Domain
	n := len(req.Descriptors)
	if cap(w.parts) < n {
		w.parts = make([]part, n)
	}
	w.parts = w.parts[:n]
	w.buf = w.buf[:0]
	hits := int64(req.HitsAddend)
	if hits == 0 {
		hits = 1
	}
	replaced := false
	for i, d := range req.Descriptors {
		p := &w.parts[i]
		*p = part{}
		if err := s.classify(domain, d, hits, p, w); err != nil {
			return err
		}
		replaced = replaced || p.rule != nil && len(p.rule.Limit.Replaces) > 0
	}
	if replaced {
		// A rule named in another matched rule's replaces is dropped.
		for i := range w.parts {
			p := &w.parts[i]
			if p.rule == nil || p.rule.Limit.Name == "" {
				continue
			}
			for j := range w.parts {
				if q := w.parts[j].rule; q != nil && containsName(q.Limit.Replaces, p.rule.Limit.Name) {
					p.kind, p.rule, p.deny = noLimit, nil, false
					break
				}
			}
		}
	}
	// Keys and paths point into w.buf only once it has stopped growing.
	for i := range w.parts {
		p := &w.parts[i]
		if p.keyTo > p.keyFrom {
			p.call.Path = w.buf[p.keyFrom:p.keyTo:p.keyTo]
			if p.subTo > p.keyTo {
				p.call.Subject = w.buf[p.keyTo:p.subTo:p.subTo]
			}
		}
	}
	return nil
}

// chargeTogether decides every descriptor that limits as a part of one
// call, admitted together or not at all (sluice's semantics).
func (s *Server) chargeTogether(req *rlsv3.RateLimitRequest, w *work) (*rlsv3.RateLimitResponse, error) {
	denied := false
	w.group = w.group[:0]
	for i := range w.parts {
		p := &w.parts[i]
		if p.kind == limited {
			if p.deny {
				denied = true
			} else {
				w.group = append(w.group, p.call)
			}
		}
	}
	var out limiter.Outcome
	admitted := !denied
	single := len(w.group) == 1 && !denied
	if len(w.group) > 0 {
		call := w.group[0]
		call.With = w.group[1:]
		call.HasWait = true
		// Several descriptors are each described from this one decision
		// (Parts), not looked at again; a request a requests_per_unit 0
		// denies charges nothing, and its group is decided as a dry run
		// to describe them.
		call.EachPart = !single
		call.DryRun = denied
		var err error
		if out, err = s.svc.Acquire(&call, &w.sc, nil); err != nil {
			return nil, grpcError(err)
		}
		if !denied {
			admitted = out.Allowed != 0
		}
		if !single {
			s.describeGroup(w, admitted)
		}
	}
	// Each descriptor's status.
	for i := range w.parts {
		p := &w.parts[i]
		switch p.kind {
		case noLimit, unlimited:
			continue
		case refund:
			if err := s.refund(p, w); err != nil {
				return nil, err
			}
			continue
		case charge:
			if err := s.charge(p, w); err != nil {
				return nil, err
			}
			continue
		}
		if p.deny {
			p.code, p.remaining, p.limit, p.retry = rlsv3.RateLimitResponse_OVER_LIMIT, 0, 0, -1
			p.reset = p.windowLeft(w.now)
			if p.kind == shadow {
				p.code, p.shadowHit = rlsv3.RateLimitResponse_OK, true
			}
			continue
		}
		var o limiter.Outcome
		var err error
		switch {
		case p.kind == limited && !single:
			continue // described from the group's decision (describeGroup)
		case p.kind == shadow && admitted:
			one := p.call
			one.HasWait = true
			if o, err = s.svc.Acquire(&one, &w.sc, nil); err == nil && o.Allowed == 0 {
				p.shadowHit = true
			}
		case single:
			o = out
		default:
			// A shadow descriptor of a refused request, outside its call:
			// OVER_LIMIT if it would refuse on its own, else its tokens,
			// untouched.
			if o, err = s.svc.Peek(&p.call, &w.sc); err == nil && o.Allowed != 0 {
				one := p.call
				one.Cost, one.HasCost = 0, true
				o, err = s.svc.Peek(&one, &w.sc)
				o.Allowed = 1
			}
			p.shadowHit = p.kind == shadow && o.Allowed == 0
		}
		if err != nil {
			return nil, grpcError(err)
		}
		p.describe(&o)
		if p.kind == shadow {
			p.code = rlsv3.RateLimitResponse_OK
		}
	}
	return s.respond(req, w, admitted, denied, &out), nil
}

// describeGroup describes each limited descriptor of a request of several
// (or one a requests_per_unit 0 denies) from what the group's one Acquire
// decided for it (Scratch.Parts, in the order of w.group): admitted, as
// the charge left its levels; refused, OVER_LIMIT where its own levels
// refused it, else its tokens, untouched.
func (s *Server) describeGroup(w *work, admitted bool) {
	parts := w.sc.Parts()
	g := 0
	for i := range w.parts {
		p := &w.parts[i]
		if p.kind != limited || p.deny {
			continue
		}
		o := &parts[g]
		g++
		if !admitted && o.Allowed != 0 {
			o.Allowed = 1
		}
		p.describe(o)
	}
}

// refund gives back the tokens of an is_negative_hits descriptor.
func (s *Server) refund(p *part, w *work) error { return s.adjust(p, w, s.svc.Refund) }

// charge takes the hits of an apply_on_stream_done descriptor, never
// refusing: the cost of a response already sent.
func (s *Server) charge(p *part, w *work) error { return s.adjust(p, w, s.svc.Charge) }

// adjust moves p's hits by op (a refund or a forced charge), which decides
// nothing, and describes p afterwards.
func (s *Server) adjust(p *part, w *work, op func(*limiter.Call, int64, *limiter.Scratch) (limiter.Outcome, error)) error {
	o, err := op(&p.call, p.call.Cost, &w.sc)
	if err != nil {
		return grpcError(err)
	}
	p.describe(&o)
	return nil
}

func containsName(names []string, n string) bool {
	for _, x := range names {
		if x == n {
			return true
		}
	}
	return false
}

// describe fills the status of p from the outcome of its call.
func (p *part) describe(o *limiter.Outcome) {
	r := &o.Result
	p.code = rlsv3.RateLimitResponse_OK
	if o.Allowed == 0 {
		p.code = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	p.remaining, p.limit, p.reset, p.retry = max(r.Remaining, 0), r.Limit, r.ResetAfter, r.RetryAfter
	if o.Unlimited {
		p.limit = -1
	}
}

// windowLeft returns the time until p's fixed window ends at now.
func (p *part) windowLeft(now int64) int64 {
	if p.cal != nil {
		_, end := p.cal.Period.Bounds(now)
		return end - now
	}
	if p.window <= 0 {
		return 0
	}
	return int64(p.window) - now%int64(p.window)
}

// classify decides how descriptor d limits and builds its call.
func (s *Server) classify(domain string, d *rlsv3ext, hits int64, p *part, w *work) error {
	if h := d.GetHitsAddend(); h != nil {
		if h.Value > engine.MaxCost {
			return status.Errorf(codes.InvalidArgument, "hits_addend must be at most %d", int64(engine.MaxCost))
		}
		hits = int64(h.Value)
	}
	p.call = budget.Call{Cost: hits, HasCost: true}
	entries := d.GetEntries()
	if len(entries) == 0 {
		if s.opts.RulesOnly {
			return nil // as the peer: no rule matches no entries
		}
		return status.Error(codes.InvalidArgument, "a descriptor must have at least one entry")
	}
	if !w.cfg.HasDomain(domain) {
		// A limit override counts only in a domain with rules, as in
		// envoyproxy/ratelimit.
		if !s.opts.RulesOnly {
			if err := s.budgetPath(domain, d, p, w); err != nil || p.kind != noLimit {
				return err
			}
		}
		if s.metrics != nil && s.metrics.peer != nil {
			s.metrics.peer.domainNotFound(domain)
		}
		return nil
	}
	if lo := d.GetLimit(); lo != nil {
		// An override: an inline fixed window on the descriptor's key.
		window := UnitWindow(Unit(lo.GetUnit()))
		if window == 0 {
			return s.requestError("limit override: unit must be SECOND, MINUTE, HOUR, DAY, WEEK, MONTH or YEAR")
		}
		p.rpu, p.unit, p.window, p.flag = lo.GetRequestsPerUnit(), Unit(lo.GetUnit()), window, overFlags[window]
		p.metric = domain + ".override"
		p.entries = entries
		p.kind = limited
		if p.rpu == 0 {
			p.deny = true
		} else {
			var err error
			if p.lim, err = engine.NewLimit(engine.FixedWindow, int64(p.rpu), window, int64(p.rpu)); err != nil {
				return status.Errorf(codes.InvalidArgument, "limit override: %v", err)
			}
			p.call.Rate = &p.lim
		}
		return s.inlineKey(domain, entries, nil, p, w)
	}
	return s.ruleLimit(domain, d, p, w)
}

// ruleLimit limits descriptor d of a domain with rules by the rule it
// matches, if any.
func (s *Server) ruleLimit(domain string, d *rlsv3ext, p *part, w *work) error {
	entries := d.GetEntries()
	// The rule of the last entry, when every entry matched (Match).
	w.matchedPath(domain, entries)
	if len(w.path) < len(entries) || w.path[len(entries)-1].Limit == nil {
		return nil
	}
	r := w.path[len(entries)-1]
	p.rule, p.metric, p.name = r, r.metric, r.Limit.Name
	if r.DetailedMetric || r.valueLabel {
		// Opted in: labels that name values (envoyproxy/ratelimit's
		// detailed_metric, value_to_metric), at the cost of a string per
		// descriptor.
		p.metric = w.label(domain, entries, r.DetailedMetric)
	}
	if r.Limit.Unlimited {
		p.kind = unlimited
		return nil
	}
	p.rpu, p.unit, p.window, p.flag = r.Limit.RequestsPerUnit, r.Limit.Unit, r.Limit.window, r.Limit.flag
	p.cal, p.calFlag = r.Limit.calendar, r.Limit.calFlag
	p.kind = limited
	if r.ShadowMode {
		p.kind = shadow
	}
	switch {
	case p.rpu == 0:
		p.deny = true
	case p.cal != nil:
		p.call.Quota = p.cal
	default:
		p.call.Rate = &r.Limit.lim
	}
	switch {
	case p.deny:
	case d.GetIsNegativeHits():
		p.kind = refund
	case r.Limit.StreamDone && p.call.Cost > 0:
		p.kind = charge
	}
	return s.inlineKey(domain, entries, r, p, w)
}

// inlineKey builds the counter key of a descriptor limited inline:
// envoy/<domain>/<key>=<value>/…, a share_threshold rule's pattern in place
// of the values it matched.
func (s *Server) inlineKey(domain string, entries []*entry, r *Rule, p *part, w *work) error {
	p.keyFrom = len(w.buf)
	w.buf = append(append(w.buf, KeyPrefix...), domain...)
	if r == nil {
		w.path = w.path[:0] // an override: no rules, no shared values
	}
	for i, e := range entries {
		w.buf = append(append(append(w.buf, '/'), e.GetKey()...), '=')
		if v := w.shared(i); v != "" {
			w.buf = append(w.buf, v...)
		} else {
			w.buf = append(w.buf, e.GetValue()...)
		}
	}
	p.keyTo, p.subTo = len(w.buf), len(w.buf)
	if p.keyTo-p.keyFrom > s.maxKeyLen {
		return status.Errorf(codes.InvalidArgument, "the descriptor's key is %d bytes, the limit (--max-key-len) is %d", p.keyTo-p.keyFrom, s.maxKeyLen)
	}
	return nil
}

// matchedPath sets w.path to the rules the entries matched, level by
// level as Match walks them, one per entry up to where matching stopped.
func (w *work) matchedPath(domain string, entries []*entry) {
	w.path = w.path[:0]
	set := w.cfg.domains[domain].rules
	for _, e := range entries {
		kr := set[e.GetKey()]
		if kr == nil {
			return
		}
		next := kr.exact[e.GetValue()]
		if next == nil {
			for _, r := range kr.patterns {
				if wildcardMatch(r.parts, e.GetValue()) {
					next = r
					break
				}
			}
		}
		if next == nil {
			next = kr.any
		}
		if next == nil {
			return
		}
		w.path = append(w.path, next)
		set = next.children
	}
}

// shared returns the value pattern that stands for entry i's value in
// counters and labels: that of a share_threshold rule it matched, or "".
func (w *work) shared(i int) string {
	if i < len(w.path) {
		if r := w.path[i]; r.ShareThreshold && r.parts != nil {
			return r.Value
		}
	}
	return ""
}

// label is the metrics label of a descriptor that matched w.path, as
// envoyproxy/ratelimit names its stats when the rules ask for values
// (detailed_metric: every value; value_to_metric: the values of its
// level), a share_threshold pattern always standing for the values it
// matched, so that the labels stay as many as the patterns.
func (w *work) label(domain string, entries []*entry, detailed bool) string {
	var b strings.Builder
	b.WriteString(domain)
	for i, e := range entries {
		b.WriteString(".")
		b.WriteString(e.GetKey())
		v := w.shared(i)
		if v == "" && i < len(w.path) {
			v = labelValue(w.path[i], e.GetValue(), detailed)
		}
		if v != "" {
			b.WriteString("_" + v)
		}
	}
	return b.String()
}

// labelValue is the value a label gives entry value matched by rule r.
func labelValue(r *Rule, value string, detailed bool) string {
	switch {
	case detailed || r.ValueToMetric:
		return value
	case r.parts != nil:
		return r.Value // the pattern
	case r.Value != "":
		return value
	}
	return ""
}

// budgetPath maps a descriptor of a domain without loaded rules onto the
// budget tree: domain/key1/value1/…, the last value as the subject.
func (s *Server) budgetPath(domain string, d *rlsv3ext, p *part, w *work) error {
	entries := d.GetEntries()
	if len(entries) > MaxEntries {
		return status.Errorf(codes.InvalidArgument, "a descriptor of domain '%s' maps onto the budget tree and may have at most %d entries, this one has %d", domain, MaxEntries, len(entries))
	}
	p.keyFrom = len(w.buf)
	w.buf = appendSegment(w.buf, domain)
	for _, e := range entries {
		w.buf = appendSegment(append(w.buf, '/'), e.GetKey())
		w.buf = appendSegment(append(w.buf, '/'), e.GetValue())
	}
	p.keyTo = len(w.buf)
	w.buf = append(w.buf, entries[len(entries)-1].GetValue()...)
	p.subTo = len(w.buf)
	path := w.buf[p.keyFrom:p.keyTo]
	if len(path) > s.maxKeyLen {
		return status.Errorf(codes.InvalidArgument, "the descriptor's budget path is %d bytes, the limit (--max-key-len) is %d", len(path), s.maxKeyLen)
	}
	tree := s.svc.Cluster.State().Tree
	plan, _, ok := tree.Resolve(path)
	if !ok {
		p.keyTo = p.keyFrom // not limited: nothing on the path is configured
		return nil
	}
	p.metric = plan.Config.Path
	if eff, ok := plan.Config.Effective(); ok {
		p.window = time.Duration(eff.Window)
		p.unit = unitOf(p.window)
		p.rpu = uint32(min(eff.Rate, math.MaxUint32))
	}
	p.kind = limited
	if d.GetIsNegativeHits() {
		p.kind = refund
	}
	return nil
}

// appendSegment appends s as one budget path segment: bytes a segment may
// not hold (controls, space, '#', '/', and '%' itself) as %XX.
func appendSegment(b []byte, s string) []byte {
	if s == "" {
		return append(b, "%00"...)
	}
	const hex = "0123456789ABCDEF"
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c == '#' || c == '/' || c == '%' || c == 0x7f {
			b = append(b, '%', hex[c>>4], hex[c&15])
			continue
		}
		b = append(b, c)
	}
	return b
}

// respond builds the response: the overall code, one status per
// descriptor, and the headers Options ask for.
func (s *Server) respond(req *rlsv3.RateLimitRequest, w *work, admitted, denied bool, out *limiter.Outcome) *rlsv3.RateLimitResponse {
	// The messages of a response are allocated in two blocks: they go to
	// the transport and cannot be reused.
	blk := new(respBlock)
	resp := &blk.resp
	resp.OverallCode = codeOK
	if !admitted && !s.opts.GlobalShadowMode {
		resp.OverallCode = codeOver
	}
	if !admitted && s.opts.GlobalShadowMode && s.metrics != nil && s.metrics.peer != nil {
		s.metrics.peer.globalShadowHit()
	}
	// One descriptor, the usual request, is in the response's block: one
	// allocation in all. More take two more.
	sts, ptrs := blk.one[:], blk.onePtr[:]
	if len(w.parts) != 1 {
		sts = make([]statusBlock, len(w.parts))
		ptrs = make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(w.parts))
	}
	resp.Statuses = ptrs
	for i := range w.parts {
		resp.Statuses[i] = s.status(req.Domain, w, &w.parts[i], &sts[i])
	}
	if s.opts.IETFHeaders {
		s.ietfHeaders(blk, w, admitted, denied, out)
	}
	if s.opts.LimitHeaders != nil {
		s.limitHeaders(blk, w)
	}
	if s.opts.DynamicMetadata {
		resp.DynamicMetadata = dynamicMetadata(req, w)
	}
	s.countRequest(w, req.Domain, admitted)
	return resp
}

// status fills the status of descriptor p in sb and counts it.
func (s *Server) status(domain string, w *work, p *part, sb *statusBlock) *rlsv3.RateLimitResponse_DescriptorStatus {
	st := &sb.st
	st.Code = codeOK
	switch p.kind {
	case noLimit:
		s.count(w, domain, "", "no_limit")
		return st
	case unlimited:
		st.LimitRemaining = math.MaxUint32
		s.count(w, domain, p.metric, "unlimited")
		return st
	}
	st.Code = p.code
	sb.lim.Name, sb.lim.RequestsPerUnit, sb.lim.Unit = p.name, p.rpu, p.unit
	st.CurrentLimit = &sb.lim
	st.LimitRemaining = uint32(min(p.remaining, math.MaxUint32))
	reset := p.reset
	switch {
	case s.opts.WholeSecondReset && p.cal != nil:
		reset = (p.windowLeft(w.now) + int64(time.Second) - 1) / int64(time.Second) * int64(time.Second)
	case s.opts.WholeSecondReset && p.window >= time.Second:
		reset = wholeSeconds(p.window, w.now)
	}
	sb.reset.Seconds, sb.reset.Nanos = reset/1e9, int32(reset%1e9)
	st.DurationUntilReset = &sb.reset
	result := "ok"
	switch {
	case p.shadowHit:
		result = "shadow_over_limit"
	case p.code == codeOver:
		result = "over_limit"
	}
	s.count(w, domain, p.metric, result)
	return st
}

// ietfHeaders adds sluice's headers (SPEC §10) of the descriptor that
// refused or, if none did, of the one with the fewest tokens left.
func (s *Server) ietfHeaders(blk *respBlock, w *work, admitted, denied bool, out *limiter.Outcome) {
	pick := -1
	for i := range w.parts {
		p := &w.parts[i]
		if p.kind == noLimit || p.kind == unlimited || p.kind == shadow || p.kind == refund || p.limit < 0 {
			continue
		}
		switch {
		case pick < 0:
			pick = i
		case w.parts[pick].code != codeOver && (p.code == codeOver || p.remaining < w.parts[pick].remaining):
			pick = i
		}
	}
	if pick < 0 {
		return
	}
	p := &w.parts[pick]
	retry := time.Duration(p.retry)
	if !admitted && !denied && out.Allowed == 0 && out.Result.RetryAfter != 0 {
		// The call's own answer: how long until every part admits.
		retry = time.Duration(out.Result.RetryAfter)
	}
	if denied {
		retry = -1 // a requests_per_unit 0 never admits
	}
	ratehdr.Each(p.limit, p.remaining, false, time.Duration(p.reset), p.window, blk.add)
	if !admitted {
		if v, ok := ratehdr.RetryAfter(retry); ok {
			blk.add("Retry-After", v)
		}
	}
}

// limitHeaders adds envoyproxy/ratelimit's three headers of the last
// descriptor over its limit or, if none is, of the limited one with the
// fewest requests left (the first of equals); the reset in whole seconds.
func (s *Server) limitHeaders(blk *respBlock, w *work) {
	pick, least := -1, uint32(math.MaxUint32)
	for i, st := range blk.resp.Statuses {
		switch {
		case st.CurrentLimit == nil:
		case st.Code == codeOver && !w.parts[i].quota:
			pick, least = i, 0
		case st.LimitRemaining < least:
			pick, least = i, st.LimitRemaining
		}
	}
	if pick < 0 {
		return
	}
	st, h := blk.resp.Statuses[pick], s.opts.LimitHeaders
	blk.add(h.Limit, strconv.FormatUint(uint64(st.CurrentLimit.RequestsPerUnit), 10))
	blk.add(h.Remaining, strconv.FormatUint(uint64(st.LimitRemaining), 10))
	blk.add(h.Reset, strconv.FormatInt(wholeSeconds(UnitWindow(st.CurrentLimit.Unit), w.now)/1e9, 10))
}

// add appends a response header from the block's room.
func (blk *respBlock) add(name, value string) {
	resp := &blk.resp
	if resp.ResponseHeadersToAdd == nil {
		resp.ResponseHeadersToAdd = blk.hp[:0]
	}
	h := &blk.hv[len(resp.ResponseHeadersToAdd)]
	h.Key, h.Value = name, value
	resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd, h)
}

// respBlock holds a response and its headers (at most six: ratehdr's
// five and Retry-After), and the status of a request of one descriptor.
type respBlock struct {
	resp   rlsv3.RateLimitResponse
	hv     [6]corev3.HeaderValue
	hp     [6]*corev3.HeaderValue
	one    [1]statusBlock
	onePtr [1]*rlsv3.RateLimitResponse_DescriptorStatus
}

// statusBlock holds one descriptor's status and what it points to.
type statusBlock struct {
	st    rlsv3.RateLimitResponse_DescriptorStatus
	lim   rlsv3.RateLimitResponse_RateLimit
	reset durationpb.Duration
}

func (s *Server) count(w *work, domain, descriptor, result string) {
	if s.metrics != nil {
		s.metrics.descriptor(s.domainLabel(domain, w), descriptor, result)
	}
}

func (s *Server) countRequest(w *work, domain string, admitted bool) {
	if s.metrics != nil {
		res := "ok"
		if !admitted {
			res = "over_limit"
		}
		s.metrics.request(s.domainLabel(domain, w), res)
	}
}

// grpcError maps a service error onto a gRPC status: refusals of the
// request's content are InvalidArgument, a cluster without leader
// Unavailable, anything else Internal.
func grpcError(err error) error {
	switch fault.Code(err) {
	case "TRYAGAIN", "CLUSTERDOWN", "LOADING":
		return status.Error(codes.Unavailable, err.Error())
	case "ERR", "NOBUDGET", "BUDGET":
		return status.Error(codes.InvalidArgument, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}

type (
	rlsv3ext = rlcommon.RateLimitDescriptor
	entry    = rlcommon.RateLimitDescriptor_Entry
)
