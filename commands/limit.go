package commands

import (
	"strconv"
	"strings"
	"time"

	"github.com/sluice-rl/sluice/budget"
	"github.com/sluice-rl/sluice/engine"
)

// MaxWaitMs bounds WAIT: a held connection costs a goroutine and a timer,
// and shutdown must not wait longer than this for in-flight replies.
const MaxWaitMs = 60000

func limitCommands() []*Command {
	return []*Command{
		{Name: "RL.ACQUIRE", Arity: -2, Flags: 0, FirstKey: 1, Handler: acquireCmd,
			Summary: "Check a limit and consume tokens if admitted.",
			Syntax:  "key RATE n [PER unit] [BURST n] [ALGO name] [QUOTA n PER period [TZ zone]] [COST n] [WAIT ms] [DRYRUN] | path [KEY subject] [COST n] [WAIT ms] [DRYRUN]"},
		{Name: "RL.PEEK", Arity: -2, Flags: FlagReadOnly | FlagFast, FirstKey: 1, Handler: peekCmd,
			Summary: "Report what RL.ACQUIRE would answer, consuming nothing.",
			Syntax:  "key|path [KEY subject] [RATE n [PER unit] [BURST n] [ALGO name]] [QUOTA n PER period [TZ zone]] [COST n]"},
		{Name: "RL.REFUND", Arity: -4, Flags: FlagAdmin, FirstKey: 1, Handler: refundCmd,
			Summary: "Give tokens back to a bucket (and its quota), up to its capacity.",
			Syntax:  "key|path [KEY subject] [RATE n [PER unit] [BURST n] [ALGO name]] [QUOTA n PER period [TZ zone]] COST n"},
		{Name: "RL.RESET", Arity: -2, Flags: FlagAdmin, FirstKey: 1, Handler: resetCmd,
			Summary: "Forget a bucket, leaving it full.",
			Syntax:  "key|path [KEY subject]"},
		{Name: "CL.THROTTLE", Arity: -1, Flags: FlagFast, FirstKey: 1, Handler: throttleCmd,
			Summary: "redis-cell compatible GCRA rate limit.",
			Syntax:  "key max_burst count_per_period period [quantity]"},
	}
}

// Which options a limiting command takes.
const (
	optLimit = 1 << iota // RATE PER BURST ALGO
	optCost
	optWait
	optDryRun
	optSubject // KEY
	optQuota   // QUOTA n PER period [TZ zone] (with optLimit too)
)

// limitArgs are the parsed options of RL.ACQUIRE, RL.PEEK and RL.REFUND.
type limitArgs struct {
	target  []byte // key (inline) or path (budget)
	subject []byte // KEY, budget form only
	// Inline limit; hasRate distinguishes the inline form.
	hasRate, hasPer, hasBurst, hasAlgo bool
	rate, burst                        int64
	per                                time.Duration
	algo                               engine.Algo
	// Inline calendar quota (QUOTA n PER period [TZ zone]).
	hasQuota bool
	quota    int64
	period   budget.Period
	cost     int64
	hasCost  bool
	waitMs   int64
	hasWait  bool
	dryRun   bool
}

func parseLimitArgs(args [][]byte, allowed int) (la limitArgs, errMsg string) {
	la.target = args[1]
	need := func(i int, opt string) ([]byte, string) {
		if i+1 >= len(args) {
			return nil, "ERR syntax error: " + opt + " needs a value"
		}
		return args[i+1], ""
	}
	for i := 2; i < len(args); i++ {
		a := args[i]
		var v []byte
		var e string
		switch {
		case allowed&optLimit != 0 && eq(a, "RATE"):
			if v, e = need(i, "RATE"); e == "" {
				la.rate, e = intArg(v, "RATE", 1, engine.MaxRate)
				la.hasRate = true
			}
		case allowed&optLimit != 0 && eq(a, "PER"):
			if v, e = need(i, "PER"); e == "" {
				var ok bool
				if la.per, ok = engine.ParseWindow(v); !ok || la.per < engine.MinWindow || la.per > engine.MaxWindow {
					e = "ERR PER must be second, minute, hour, day, week or a duration such as 250ms, 5m, 1h30m, 7d, between 1ms and 3650d"
				}
				la.hasPer = true
			}
		case allowed&optLimit != 0 && eq(a, "BURST"):
			if v, e = need(i, "BURST"); e == "" {
				la.burst, e = intArg(v, "BURST", 1, engine.MaxBurst)
				la.hasBurst = true
			}
		case allowed&optLimit != 0 && eq(a, "ALGO"):
			if v, e = need(i, "ALGO"); e == "" {
				var ok bool
				if la.algo, ok = engine.ParseAlgo(string(v)); !ok {
					e = "ERR ALGO must be one of token_bucket, gcra, sliding_window, fixed_window, leaky_bucket"
				}
				la.hasAlgo = true
			}
		case allowed&optCost != 0 && eq(a, "COST"):
			if v, e = need(i, "COST"); e == "" {
				la.cost, e = intArg(v, "COST", 0, engine.MaxCost)
				la.hasCost = true
			}
		case allowed&optWait != 0 && eq(a, "WAIT"):
			if v, e = need(i, "WAIT"); e == "" {
				la.waitMs, e = intArg(v, "WAIT", 0, MaxWaitMs)
				la.hasWait = true
			}
		case allowed&optSubject != 0 && eq(a, "KEY"):
			if v, e = need(i, "KEY"); e == "" {
				la.subject = v
			}
		case allowed&optDryRun != 0 && eq(a, "DRYRUN"):
			la.dryRun = true
			i-- // takes no value
		case allowed&(optLimit|optQuota) != 0 && eq(a, "QUOTA"):
			if v, e = need(i, "QUOTA"); e == "" {
				i, e = la.parseQuota(args, i)
				i-- // the loop steps over the last value
			}
		default:
			e = "ERR syntax error near '" + printable(a, 64) + "'"
		}
		if e != "" {
			return la, e
		}
		i++
	}
	if !la.hasRate && (la.hasPer || la.hasBurst || la.hasAlgo) {
		return la, "ERR RATE is required with PER, BURST or ALGO"
	}
	if la.inline() && la.subject != nil {
		return la, "ERR KEY belongs to the budget form; an inline limit's key is the first argument"
	}
	return la, ""
}

// parseQuota parses QUOTA n [PER period] [TZ zone] starting at args[i]
// (QUOTA) and returns the index of its last value.
func (la *limitArgs) parseQuota(args [][]byte, i int) (int, string) {
	var e string
	if la.quota, e = intArg(args[i+1], "QUOTA", 1, engine.MaxRate); e != "" {
		return i, e
	}
	i++
	period, zone := "month", ""
	hasPer, hasTZ := false, false
	// PER and TZ follow QUOTA n, in either order.
	for i+1 < len(args) {
		switch {
		case !hasPer && eq(args[i+1], "PER"):
			if i+2 >= len(args) {
				return i, "ERR syntax error: QUOTA n PER needs a period"
			}
			period, i, hasPer = string(args[i+2]), i+2, true
			continue
		case !hasTZ && eq(args[i+1], "TZ"):
			if i+2 >= len(args) {
				return i, "ERR syntax error: TZ needs a time zone"
			}
			zone, i, hasTZ = string(args[i+2]), i+2, true
			continue
		}
		break
	}
	p, err := budget.ParsePeriod(period, zone)
	if err != nil {
		return i, strings.Replace(err.Error(), "quota period", "QUOTA … PER", 1)
	}
	la.hasQuota, la.period = true, p
	return i, ""
}

// inline reports whether the call carries its own limit (RATE or QUOTA).
func (la *limitArgs) inline() bool { return la.hasRate || la.hasQuota }

// quotaLimit builds the inline quota's limit.
func (la *limitArgs) quotaLimit() engine.Limit {
	l, _ := engine.NewQuotaLimit(la.quota, la.period.Code()) // both checked by parseQuota
	return l
}

// limit builds the inline limit, or the reply explaining why it cannot.
func (la *limitArgs) limit() (engine.Limit, string) {
	per := la.per
	if !la.hasPer {
		per = time.Second
	}
	burst := la.burst
	if !la.hasBurst {
		burst = la.rate
	}
	l, err := engine.NewLimit(la.algo, la.rate, per, burst)
	if err != nil {
		return l, errPrefix + err.Error()
	}
	return l, ""
}

func (ctx *Ctx) checkKey(k []byte) bool {
	if len(k) > ctx.Env.MaxKeyLen {
		ctx.Conn.WriteError("ERR key is too long: " + strconv.Itoa(len(k)) + " bytes, the limit (--max-key-len) is " + strconv.Itoa(ctx.Env.MaxKeyLen))
		return false
	}
	return true
}

// writeResult writes the six-element reply of SPEC §3.
func writeResult(ctx *Ctx, allowed int, r *engine.Result, limitedBy []byte) {
	c := ctx.Conn
	c.WriteArray(6)
	c.WriteInt(allowed)
	c.WriteInt64(r.Remaining)
	c.WriteInt64(r.Limit)
	if allowed == 1 {
		c.WriteInt(0)
	} else {
		c.WriteInt64(engine.CeilMs(r.RetryAfter)) // degrade (2) still says when the limit frees up
	}
	c.WriteInt64(engine.CeilMs(r.ResetAfter))
	c.WriteBulk(limitedBy)
}

// hold blocks this connection until a reservation is due. It returns false
// if the server began to stop first.
func (ctx *Ctx) hold(ns int64) bool {
	t := time.NewTimer(time.Duration(ns))
	defer t.Stop()
	ctx.Env.Metrics.waiting.Inc()
	defer ctx.Env.Metrics.waiting.Dec()
	var gone <-chan struct{}
	if w, ok := ctx.Conn.(Watcher); ok {
		var stop func()
		gone, stop = w.Watch()
		defer stop()
	}
	select {
	case <-t.C:
		return true
	case <-ctx.Env.Shutdown:
		return false
	case <-gone:
		return false // the client went away: its reservation goes back
	}
}

// Watcher is a connection that can tell, while a call is held, that its
// client has gone away (the server's connections are).
type Watcher interface {
	// Watch returns a channel closed when the client disconnects, and a
	// function to call when the hold ends; it returns once watching has
	// stopped. A client that went away has its queued commands dropped.
	Watch() (gone <-chan struct{}, stop func())
}

func acquireCmd(ctx *Ctx) {
	var la limitArgs
	var lim engine.Limit
	if m := &ctx.S.memo; m.matches(ctx.Args[2:]) {
		la, lim = m.la, m.lim
		la.target = ctx.Args[1]
	} else {
		var e string
		la, e = parseLimitArgs(ctx.Args, optLimit|optCost|optWait|optDryRun|optSubject)
		if e != "" {
			ctx.Conn.WriteError(e)
			return
		}
		if la.hasRate {
			if lim, e = la.limit(); e != "" {
				ctx.Conn.WriteError(e)
				return
			}
		}
		if la.inline() {
			m.remember(ctx.Args[2:], &la, lim)
		}
	}
	if !ctx.checkKey(la.target) {
		return
	}
	if !la.inline() {
		budgetAcquire(ctx, &la, false)
		return
	}
	cost := int64(1)
	if la.hasCost {
		cost = la.cost
	}
	rate := &lim
	if !la.hasRate {
		rate = nil // a quota alone
	}
	now := ctx.Now()
	r, limitedBy, room := ctx.inlineCall(&la, rate, now, cost, la.waitMs*int64(time.Millisecond), la.dryRun)
	if !room {
		ctx.Conn.WriteError(budget.ErrQuotaCountersFull.Error())
		return
	}
	allowed := 0
	if r.Allowed {
		allowed = 1
	}
	if r.Allowed && r.Wait > 0 && !la.dryRun {
		if ctx.hold(r.Wait) {
			// Describe the bucket as it is now, when the reply goes out.
			cur, by, _ := ctx.inlineCall(&la, rate, ctx.Env.Clock(), 0, 0, true)
			r.Remaining, r.ResetAfter, limitedBy = cur.Remaining, cur.ResetAfter, by
		} else {
			// Stopping: give the reserved tokens back rather than admit early.
			later := ctx.Env.Clock()
			back, by := ctx.inlineRefund(&la, rate, later, cost)
			allowed, r.RetryAfter = 0, max(now+r.Wait-later, 1)
			r.Remaining, r.ResetAfter, limitedBy = back.Remaining, back.ResetAfter, by
		}
	}
	if !la.dryRun {
		ctx.Env.Metrics.inline.count(allowed, cost)
	}
	writeResult(ctx, allowed, &r, limitedBy)
}

// inlineQuotaPrefix starts the counter key of an inline quota (budget
// quotas use budget.QuotaKeyPrefix).
const inlineQuotaPrefix = "i|"

// inlineCall charges an inline call at now — its bucket under rate unless
// rate is nil, and its quota if it has one — or with dry only evaluates
// it. It returns the result and the limited_by of its tightest level;
// room is false, and nothing is charged, when the call would start a quota
// counter and there is no room for one (budget.ErrQuotaCountersFull).
func (ctx *Ctx) inlineCall(la *limitArgs, rate *engine.Limit, now, cost, wait int64, dry bool) (r engine.Result, limitedBy []byte, room bool) {
	if !la.hasQuota {
		return ctx.Env.Store.Acquire(now, engine.Request{Key: la.target, Limit: rate, Cost: cost}, wait, dry), la.target, true
	}
	qlim := la.quotaLimit()
	var reqs [2]engine.Request
	n := 0
	if rate != nil {
		reqs[0] = engine.Request{Key: la.target, Limit: rate, Cost: cost}
		n = 1
	}
	reqs[n] = ctx.inlineQuota(la, &qlim, now, cost)
	// (The key as ctx.S.qkey holds it: reqs would move to the heap.)
	if cost > 0 && !dry && !ctx.Env.QuotaRoom(ctx.S.qkey) {
		return r, nil, false
	}
	r = ctx.Env.Store.AcquireAll(now, reqs[:n+1], wait, dry)
	if r.Level == n {
		return r, ctx.quotaName(la.target), true
	}
	return r, la.target, true
}

// inlineQuota returns the request of an inline call's quota counter in the
// period holding now (the store adds the cluster's committed count).
func (ctx *Ctx) inlineQuota(la *limitArgs, qlim *engine.Limit, now, cost int64) engine.Request {
	key := append(append(ctx.S.qkey[:0], inlineQuotaPrefix...), la.target...)
	ctx.S.qkey = key
	start, end := la.period.Bounds(now)
	return engine.Request{Space: engine.SpaceQuota, Key: key, Limit: qlim, Cost: cost, PeriodStart: start, PeriodEnd: end}
}

// quotaName is limited_by for a quota: "quota:" and the level.
func (ctx *Ctx) quotaName(level []byte) []byte {
	ctx.S.qname = append(append(ctx.S.qname[:0], "quota:"...), level...)
	return ctx.S.qname
}

// inlineRefund gives n tokens back to an inline call's bucket (unless rate
// is nil) and quota, and describes the call afterwards.
func (ctx *Ctx) inlineRefund(la *limitArgs, rate *engine.Limit, now, n int64) (engine.Result, []byte) {
	if !la.hasQuota {
		r, _ := ctx.Env.Store.Refund(now, engine.SpaceInline, la.target, rate, n)
		return r, la.target
	}
	if rate != nil {
		ctx.Env.Store.Refund(now, engine.SpaceInline, la.target, rate, n)
	}
	qlim := la.quotaLimit()
	q := ctx.inlineQuota(la, &qlim, now, 0)
	ctx.Env.Store.RefundQuota(now, &q, n)
	r, by, _ := ctx.inlineCall(la, rate, now, 0, 0, true)
	r.Allowed = true
	return r, by
}

func peekCmd(ctx *Ctx) {
	la, e := parseLimitArgs(ctx.Args, optLimit|optCost|optSubject)
	if e != "" {
		ctx.Conn.WriteError(e)
		return
	}
	if !ctx.checkKey(la.target) {
		return
	}
	if !la.inline() && budgetTarget(ctx, la.target) {
		budgetAcquire(ctx, &la, true)
		return
	}
	lim, hasRate, ok := inlineRate(ctx, &la)
	if !ok {
		return
	}
	rate := &lim
	if !hasRate {
		rate = nil
	}
	cost := int64(1)
	if la.hasCost {
		cost = la.cost
	}
	r, by, _ := ctx.inlineCall(&la, rate, ctx.Now(), cost, 0, true)
	allowed := 0
	if r.Allowed {
		allowed = 1
	}
	writeResult(ctx, allowed, &r, by)
}

// inlineRate returns the bucket limit an inline PEEK or REFUND works
// with: none (hasRate false) for a quota alone, else as inlineLimit.
func inlineRate(ctx *Ctx, la *limitArgs) (l engine.Limit, hasRate, ok bool) {
	if la.hasQuota && !la.hasRate {
		if la.subject != nil {
			ctx.Conn.WriteError("ERR KEY belongs to the budget form; an inline limit's key is the first argument")
			return l, false, false
		}
		return l, false, true
	}
	l, ok = inlineLimit(ctx, la)
	return l, true, ok
}

// inlineLimit returns the limit an inline PEEK or REFUND works with: the
// one given, else the bucket's own. It replies and returns false if there is
// neither.
func inlineLimit(ctx *Ctx, la *limitArgs) (engine.Limit, bool) {
	if la.subject != nil {
		ctx.Conn.WriteError("NOBUDGET no budget node on path '" + printable(la.target, 256) + "'; KEY applies to budget paths only")
		return engine.Limit{}, false
	}
	if la.hasRate {
		l, e := la.limit()
		if e != "" {
			ctx.Conn.WriteError(e)
			return l, false
		}
		return l, true
	}
	if l, ok := ctx.Env.Store.Limit(engine.SpaceInline, la.target); ok {
		return l, true
	}
	ctx.Conn.WriteError("NOBUDGET no budget node on path '" + printable(la.target, 256) +
		"' and no bucket for that key; give RATE … to name an inline limit")
	return engine.Limit{}, false
}

func refundCmd(ctx *Ctx) {
	la, e := parseLimitArgs(ctx.Args, optLimit|optCost|optSubject)
	if e != "" {
		ctx.Conn.WriteError(e)
		return
	}
	if !la.hasCost {
		ctx.Conn.WriteError("ERR COST is required: RL.REFUND key COST n")
		return
	}
	if !ctx.checkKey(la.target) {
		return
	}
	if !la.inline() && budgetTarget(ctx, la.target) {
		budgetRefund(ctx, &la)
		return
	}
	lim, hasRate, ok := inlineRate(ctx, &la)
	if !ok {
		return
	}
	rate := &lim
	if !hasRate {
		rate = nil
	}
	r, by := ctx.inlineRefund(&la, rate, ctx.Now(), la.cost)
	writeResult(ctx, 1, &r, by)
}

func resetCmd(ctx *Ctx) {
	la, e := parseLimitArgs(ctx.Args, optSubject)
	if e != "" {
		ctx.Conn.WriteError(e)
		return
	}
	if budgetTarget(ctx, la.target) {
		budgetReset(ctx, &la)
		return
	}
	if la.subject != nil {
		ctx.Conn.WriteError("NOBUDGET no budget node on path '" + printable(la.target, 256) + "'; KEY applies to budget paths only")
		return
	}
	if ctx.Env.Store.Reset(engine.SpaceInline, la.target) {
		ctx.Conn.WriteInt(1)
	} else {
		ctx.Conn.WriteInt(0)
	}
}

// --- CL.THROTTLE -------------------------------------------------------------

const cellUsage = "Cell error: Usage: cl.throttle <key> <max_burst> <count per period> <period> [<quantity>]"

// parseCellInt parses an integer the way redis-cell does (Rust's i64 parse:
// an optional sign, then digits), with redis-cell's error text.
func parseCellInt(b []byte) (int64, string) {
	s := b
	if len(s) > 0 && s[0] == '+' {
		s = s[1:]
		if len(s) > 0 && s[0] == '-' {
			s = nil
		}
	}
	// Rust accepts leading zeros; strip them for parseInt.
	neg := len(s) > 0 && s[0] == '-'
	digits := s
	if neg {
		digits = s[1:]
	}
	for len(digits) > 1 && digits[0] == '0' {
		digits = digits[1:]
	}
	var n int64
	var ok bool
	if neg {
		n, ok = parseInt(append([]byte{'-'}, digits...))
	} else {
		n, ok = parseInt(digits)
	}
	if !ok {
		return 0, "Cell error: Couldn't parse as integer: " + cellPrintable(b)
	}
	return n, ""
}

// cellPrintable keeps an argument on one reply line, as Redis does for
// module errors (CR and LF become spaces).
func cellPrintable(b []byte) string {
	if len(b) > 256 {
		b = b[:256]
	}
	out := []byte(string(b))
	for i, c := range out {
		if c == '\r' || c == '\n' {
			out[i] = ' '
		}
	}
	return string(out)
}

// cellSeconds rounds like redis-cell: whole seconds, plus one if the
// duration has a non-zero millisecond part.
func cellSeconds(ns int64) int64 {
	s := ns / int64(time.Second)
	if (ns%int64(time.Second))/int64(time.Millisecond) > 0 {
		s++
	}
	return s
}

func throttleCmd(ctx *Ctx) {
	a := ctx.Args
	if len(a) != 5 && len(a) != 6 {
		ctx.Conn.WriteError(cellUsage)
		return
	}
	var v [4]int64
	v[3] = 1
	for i := 2; i < len(a); i++ {
		n, e := parseCellInt(a[i])
		if e != "" {
			ctx.Conn.WriteError(e)
			return
		}
		v[i-2] = n
	}
	if !ctx.checkKey(a[1]) {
		return
	}
	maxBurst, count, period, qty := v[0], v[1], v[2], v[3]
	lim, err := engine.NewCellLimit(maxBurst, count, period)
	if err != nil {
		ctx.Conn.WriteError("Cell error: " + err.Error())
		return
	}
	if qty < 0 || qty > engine.MaxCost {
		ctx.Conn.WriteError("Cell error: quantity must be an integer between 0 and " + strconv.FormatInt(engine.MaxCost, 10))
		return
	}
	r := ctx.Env.Store.Acquire(ctx.Now(), engine.Request{Key: a[1], Limit: &lim, Cost: qty}, 0, false)
	limited, retry := 1, int64(-1)
	if r.Allowed {
		limited = 0
	} else if r.RetryAfter >= 0 {
		retry = cellSeconds(r.RetryAfter)
	}
	allowed := 1 - limited
	ctx.Env.Metrics.inline.count(allowed, qty)
	c := ctx.Conn
	c.WriteArray(5)
	c.WriteInt(limited)
	c.WriteInt64(r.Limit)
	c.WriteInt64(r.Remaining)
	c.WriteInt64(retry)
	c.WriteInt64(cellSeconds(r.ResetAfter))
}
