package commands

import (
	"strconv"
	"strings"
	"time"

	"github.com/sluice-rl/sluice/bounds"
	"github.com/sluice-rl/sluice/budget"
	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/limiter"
	"github.com/sluice-rl/sluice/quota"
)

// MaxWaitMs bounds WAIT (bounds.MaxWaitMs).
const MaxWaitMs = bounds.MaxWaitMs

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
	optReserve // TTL ms, CONCURRENCY n (RL.RESERVE)
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
	period   quota.Period
	cost     int64
	hasCost  bool
	waitMs   int64
	hasWait  bool
	dryRun   bool
	// RL.RESERVE's own: TTL (ms, 0 for the node's default) and the
	// inline form's CONCURRENCY (0 for none).
	ttlMs       int64
	concurrency int64
}

func parseLimitArgs(args [][]byte, allowed int) (la limitArgs, errMsg string) {
	la.target = args[1]
	// seen has one bit per option, so that an option given twice is
	// refused rather than the last one silently winning.
	var seen uint16
	once := func(bit uint16, opt string) string {
		if seen&bit != 0 {
			return twice(opt)
		}
		seen |= bit
		return ""
	}
	need := func(i int, bit uint16, opt string) ([]byte, string) {
		if e := once(bit, opt); e != "" {
			return nil, e
		}
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
			if v, e = need(i, 1<<0, "RATE"); e == "" {
				la.rate, e = boundArg(v, "RATE", bounds.Rate)
				la.hasRate = true
			}
		case allowed&optLimit != 0 && eq(a, "PER"):
			if v, e = need(i, 1<<1, "PER"); e == "" {
				var ok bool
				if la.per, ok = bounds.ParseWindow(v); !ok {
					e = errPrefix + bounds.WindowMsg("PER")
				}
				la.hasPer = true
			}
		case allowed&optLimit != 0 && eq(a, "BURST"):
			if v, e = need(i, 1<<2, "BURST"); e == "" {
				la.burst, e = boundArg(v, "BURST", bounds.Burst)
				la.hasBurst = true
			}
		case allowed&optLimit != 0 && eq(a, "ALGO"):
			if v, e = need(i, 1<<3, "ALGO"); e == "" {
				var ok bool
				if la.algo, ok = engine.ParseAlgo(string(v)); !ok {
					e = errPrefix + bounds.OneOfMsg("ALGO", engine.AlgoNames())
				}
				la.hasAlgo = true
			}
		case allowed&optCost != 0 && eq(a, "COST"):
			if v, e = need(i, 1<<4, "COST"); e == "" {
				la.cost, e = boundArg(v, "COST", bounds.Cost)
				la.hasCost = true
			}
		case allowed&optWait != 0 && eq(a, "WAIT"):
			if v, e = need(i, 1<<5, "WAIT"); e == "" {
				la.waitMs, e = boundArg(v, "WAIT", bounds.Wait)
				la.hasWait = true
			}
		case allowed&optSubject != 0 && eq(a, "KEY"):
			if v, e = need(i, 1<<6, "KEY"); e == "" {
				la.subject = v
			}
		case allowed&optDryRun != 0 && eq(a, "DRYRUN"):
			e = once(1<<8, "DRYRUN")
			la.dryRun = true
			i-- // takes no value
		case allowed&optReserve != 0 && eq(a, "TTL"):
			if v, e = need(i, 1<<9, "TTL"); e == "" {
				la.ttlMs, e = boundArg(v, "TTL", bounds.TTL)
			}
		case allowed&optReserve != 0 && eq(a, "CONCURRENCY"):
			if v, e = need(i, 1<<10, "CONCURRENCY"); e == "" {
				la.concurrency, e = boundArg(v, "CONCURRENCY", bounds.Concurrency)
			}
		case allowed&(optLimit|optQuota) != 0 && eq(a, "QUOTA"):
			if v, e = need(i, 1<<7, "QUOTA"); e == "" {
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
	if err := budget.CheckSubject(la.inline(), la.subject); err != nil {
		return la, err.Error()
	}
	return la, ""
}

// parseQuota parses QUOTA n [PER period] [TZ zone] starting at args[i]
// (QUOTA) and returns the index of its last value.
func (la *limitArgs) parseQuota(args [][]byte, i int) (int, string) {
	var e string
	if la.quota, e = boundArg(args[i+1], "QUOTA", bounds.Quota); e != "" {
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
	p, err := quota.ParsePeriod(period, zone)
	if err != nil {
		return i, strings.Replace(err.Error(), "quota period", "QUOTA … PER", 1)
	}
	la.hasQuota, la.period = true, p
	return i, ""
}

// inline reports whether the call carries its own limit (RATE or QUOTA).
func (la *limitArgs) inline() bool { return la.hasRate || la.hasQuota }

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

// writeResult writes the six-element reply (docs/commands.md, "Reply").
func writeResult(ctx *Ctx, allowed int, r *engine.Result, limitedBy []byte) {
	ctx.Conn.WriteArray(6)
	writeFields(ctx, allowed, r, limitedBy)
}

// writeFields writes the six fields of the reply, in an array the caller
// has begun.
func writeFields(ctx *Ctx, allowed int, r *engine.Result, limitedBy []byte) {
	c := ctx.Conn
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

// Watcher is a connection that can tell, while a call is held, that its
// client has gone away (the server's connections are). A client that went
// away has its queued commands dropped.
type Watcher = limiter.Watcher

// watcher returns the connection as a Watcher, or nil.
func (ctx *Ctx) watcher() Watcher {
	if w, ok := ctx.Conn.(Watcher); ok {
		return w
	}
	return nil
}

// call builds the service call of parsed arguments; rate is the inline
// bucket's limit (nil for none), spec the inline quota's.
func (la *limitArgs) call(rate *engine.Limit, spec *quota.Spec) budget.Call {
	c := budget.Call{Path: la.target, Subject: la.subject, Rate: rate, Cost: la.cost, HasCost: la.hasCost,
		WaitMs: la.waitMs, HasWait: la.hasWait, DryRun: la.dryRun}
	if la.hasQuota {
		*spec = quota.Spec{N: la.quota, Period: la.period}
		c.Quota = spec
	}
	return c
}

// reply renders an outcome, or the error.
func (ctx *Ctx) reply(out *limiter.Outcome, err error) {
	if err != nil {
		ctx.Conn.WriteError(err.Error())
		return
	}
	writeResult(ctx, out.Allowed, &out.Result, out.LimitedBy)
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
	var rate *engine.Limit
	if la.hasRate {
		ctx.S.lim = lim
		rate = &ctx.S.lim
	}
	call := la.call(rate, &ctx.S.spec)
	call.Now = ctx.Now()
	out, err := ctx.Env.Service.Acquire(&call, &ctx.S.scratch, ctx.watcher())
	ctx.reply(&out, err)
}

// parseCall parses the arguments of RL.PEEK and RL.REFUND into a call,
// or replies with the error.
func (ctx *Ctx) parseCall(lim *engine.Limit, spec *quota.Spec) (la limitArgs, c budget.Call, ok bool) {
	la, e := parseLimitArgs(ctx.Args, optLimit|optCost|optSubject)
	if e == "" && la.hasRate {
		*lim, e = la.limit()
	}
	if e != "" {
		ctx.Conn.WriteError(e)
		return la, c, false
	}
	if !ctx.checkKey(la.target) {
		return la, c, false
	}
	var rate *engine.Limit
	if la.hasRate {
		rate = lim
	}
	return la, la.call(rate, spec), true
}

func peekCmd(ctx *Ctx) {
	_, call, ok := ctx.parseCall(&ctx.S.lim, &ctx.S.spec)
	if !ok {
		return
	}
	out, err := ctx.Env.Service.Peek(&call, &ctx.S.scratch)
	ctx.reply(&out, err)
}

func refundCmd(ctx *Ctx) {
	la, call, ok := ctx.parseCall(&ctx.S.lim, &ctx.S.spec)
	if !ok {
		return
	}
	if !la.hasCost {
		ctx.Conn.WriteError("ERR COST is required: RL.REFUND key COST n")
		return
	}
	out, err := ctx.Env.Service.Refund(&call, la.cost, &ctx.S.scratch)
	ctx.reply(&out, err)
}

func resetCmd(ctx *Ctx) {
	la, e := parseLimitArgs(ctx.Args, optSubject)
	if e != "" {
		ctx.Conn.WriteError(e)
		return
	}
	ok, err := ctx.Env.Service.Reset(&budget.Call{Path: la.target, Subject: la.subject}, &ctx.S.scratch)
	ctx.writeBool(ok, err)
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
	if !bounds.Cost.In(qty) {
		ctx.Conn.WriteError("Cell error: " + bounds.Cost.Msg("quantity"))
		return
	}
	ctx.S.lim = lim
	call := budget.Call{Path: a[1], Rate: &ctx.S.lim, Cost: qty, HasCost: true, Now: ctx.Now()}
	out, err := ctx.Env.Service.Acquire(&call, &ctx.S.scratch, nil)
	if err != nil {
		ctx.Conn.WriteError(err.Error())
		return
	}
	r := &out.Result
	limited, retry := 1, int64(-1)
	if r.Allowed {
		limited = 0
	} else if r.RetryAfter >= 0 {
		retry = cellSeconds(r.RetryAfter)
	}
	c := ctx.Conn
	c.WriteArray(5)
	c.WriteInt(limited)
	c.WriteInt64(r.Limit)
	c.WriteInt64(r.Remaining)
	c.WriteInt64(retry)
	c.WriteInt64(cellSeconds(r.ResetAfter))
}
