package commands

import (
	"strings"
	"time"

	"github.com/sluice-rl/sluice/budget"
	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/limiter"
	"github.com/sluice-rl/sluice/usage"
)

// DefaultUsageCount and DefaultTopCount are RL.USAGE's and RL.TOP's
// COUNT when none is given; MaxTopCount bounds RL.TOP's.
const (
	DefaultUsageCount = 100
	DefaultTopCount   = 10
	MaxTopCount       = 1000
)

func usageCommands() []*Command {
	return []*Command{
		{Name: "RL.USAGE", Arity: -1, Flags: FlagReadOnly, Handler: usageCmd,
			Summary: "Report budget nodes' limits, what is left, quotas, reservations in flight and the last minute's admitted and refused calls.",
			Syntax:  "[prefix] [KEY subject] [AFTER path] [COUNT n]"},
		{Name: "RL.TOP", Arity: -1, Flags: FlagReadOnly, Handler: topCmd,
			Summary: "List the keys refused (or admitted) most over the last minutes, cluster-wide.",
			Syntax:  "[DENIED|ADMITTED] [COUNT n] [LOCAL]"},
	}
}

// usageArgs are RL.USAGE's arguments.
type usageArgs struct {
	prefix, after string
	subject       []byte
	count         int
}

// parseUsageArgs parses RL.USAGE's arguments (a[0] is the command), or
// with subject false RL.QUOTA LIST's, which take no KEY.
func parseUsageArgs(a [][]byte, subject bool) (usageArgs, string) {
	u := usageArgs{count: DefaultUsageCount}
	i := 1
	syntax := "ERR syntax error: RL.USAGE [prefix] [KEY subject] [AFTER path] [COUNT n]"
	if !subject {
		syntax = "ERR syntax error: RL.QUOTA LIST [prefix] [AFTER level] [COUNT n]"
	}
	keyword := func(b []byte) bool { return eq(b, "KEY") && subject || eq(b, "AFTER") || eq(b, "COUNT") }
	if i < len(a) && !(keyword(a[i]) && i+1 < len(a)) {
		u.prefix = string(a[i])
		i++
	}
	seen := map[string]bool{}
	for ; i < len(a); i += 2 {
		kw := strings.ToUpper(string(a[i]))
		if !keyword(a[i]) || i+1 >= len(a) {
			return u, syntax
		}
		if seen[kw] {
			return u, twice(kw)
		}
		seen[kw] = true
		v := a[i+1]
		switch kw {
		case "KEY":
			u.subject = append([]byte{}, v...)
		case "AFTER":
			u.after = string(v)
		case "COUNT":
			n, e := intArg(v, "COUNT", 1, limiter.MaxUsageCount)
			if e != "" {
				return u, e
			}
			u.count = int(n)
		}
	}
	return u, ""
}

func usageCmd(ctx *Ctx) {
	u, e := parseUsageArgs(ctx.Args, true)
	if e != "" {
		ctx.Conn.WriteError(e)
		return
	}
	nodes, next, err := ctx.Env.Service.Usage(u.prefix, u.after, u.subject, u.count, &ctx.S.scratch)
	if err != nil {
		ctx.Conn.WriteError(err.Error())
		return
	}
	c := ctx.Conn
	ctx.WriteMap(2)
	c.WriteBulkString("nodes")
	c.WriteArray(len(nodes))
	for i := range nodes {
		writePairs(ctx, UsageFields(&nodes[i], ctx.Env.Clock()))
	}
	c.WriteBulkString("next")
	c.WriteBulkString(next)
}

// Field is one name and value of a reply written as a map (RESP3) or
// flat pairs (RESP2): an int64 or a string.
type Field struct {
	Name string
	Int  int64
	Str  string
	IsS  bool
}

func writePairs(ctx *Ctx, fs []Field) {
	ctx.WriteMap(len(fs))
	for _, f := range fs {
		ctx.Conn.WriteBulkString(f.Name)
		if f.IsS {
			ctx.Conn.WriteBulkString(f.Str)
		} else {
			ctx.Conn.WriteInt64(f.Int)
		}
	}
}

func intF(name string, v int64) Field  { return Field{Name: name, Int: v} }
func strF(name string, v string) Field { return Field{Name: name, Str: v, IsS: true} }

// counted is n, or -1 when it was not counted.
func counted(ok bool, n int64) int64 {
	if !ok {
		return -1
	}
	return n
}

// UsageFields are the fields RL.USAGE (and GET /v1/usage) report for one
// node, in their order, at now.
func UsageFields(u *limiter.NodeUsage, now int64) []Field {
	fs := []Field{strF("path", u.Path)}
	if u.HasLimit {
		fs = append(fs, intF("rate", u.Limit.Rate), strF("window", budget.FormatWindow(time.Duration(u.Limit.Window))), intF("burst", u.Limit.Burst))
	} else {
		fs = append(fs, intF("rate", 0), strF("window", ""), intF("burst", 0))
	}
	remaining, reset, by, note := int64(-1), int64(0), "", ""
	switch {
	case u.PeekErr != nil:
		note = strings.TrimPrefix(u.PeekErr.Error(), "ERR ")
	case u.Peek.Unlimited:
		note = "unlimited"
	default:
		remaining, reset, by = u.Peek.Result.Remaining, engine.CeilMs(u.Peek.Result.ResetAfter), string(u.Peek.LimitedBy)
	}
	fs = append(fs, intF("remaining", remaining), intF("reset_after_ms", reset), strF("limited_by", by), strF("note", note))
	if q := u.Quota; q != nil {
		fs = append(fs, strF("quota_level", string(q.Level)), intF("quota_limit", q.Limit), intF("quota_used", q.Used),
			strF("quota_period", q.Period.String()), intF("quota_resets_at", q.End/1e9), intF("quota_reset_after_ms", engine.CeilMs(q.End-now)))
	} else {
		fs = append(fs, strF("quota_level", ""), intF("quota_limit", 0), intF("quota_used", 0),
			strF("quota_period", ""), intF("quota_resets_at", 0), intF("quota_reset_after_ms", 0))
	}
	fs = append(fs, intF("in_flight", int64(u.InFlight)),
		intF("admitted_1m", counted(u.Counted, u.Admitted)), intF("refused_1m", counted(u.Counted, u.Refused)))
	return fs
}

// TopResult is a cluster-wide heavy-hitters answer.
type TopResult struct {
	By      string
	Summary usage.Summary
	// Nodes is how many nodes' summaries went in; Unreachable names the
	// members that did not answer (their calls are missing).
	Nodes       int
	Unreachable []string
}

// Top merges this node's summary of kind (limiter.TopRefused or
// TopAdmitted) with every other member's, asked over the nodes'
// authenticated connections; local: this node's alone.
func (env *Env) Top(kind string, local bool) TopResult {
	sums, unreachable := env.Service.Top(kind, local)
	return TopResult{By: kind, Summary: usage.Merge(sums...), Nodes: len(sums), Unreachable: unreachable}
}

func topCmd(ctx *Ctx) {
	a := ctx.Args
	kind, count, local := limiter.TopRefused, DefaultTopCount, false
	seen := map[string]bool{}
	for i := 1; i < len(a); i++ {
		kw := strings.ToUpper(string(a[i]))
		if seen[kw] || (kw == "DENIED" || kw == "ADMITTED") && (seen["DENIED"] || seen["ADMITTED"]) {
			ctx.Conn.WriteError(twice(kw))
			return
		}
		seen[kw] = true
		switch kw {
		case "DENIED":
			kind = limiter.TopRefused
		case "ADMITTED":
			kind = limiter.TopAdmitted
		case "LOCAL":
			local = true
		case "COUNT":
			if i+1 >= len(a) {
				ctx.Conn.WriteError("ERR syntax error: COUNT needs a number")
				return
			}
			n, e := intArg(a[i+1], "COUNT", 1, MaxTopCount)
			if e != "" {
				ctx.Conn.WriteError(e)
				return
			}
			count = int(n)
			i++
		default:
			ctx.Conn.WriteError("ERR syntax error: RL.TOP [DENIED|ADMITTED] [COUNT n] [LOCAL]")
			return
		}
	}
	r := ctx.Env.Top(kind, local)
	keys := r.Summary.Entries
	if len(keys) > count {
		keys = keys[:count]
	}
	c := ctx.Conn
	ctx.WriteMap(7)
	c.WriteBulkString("by")
	c.WriteBulkString(r.By)
	c.WriteBulkString("window_s")
	c.WriteInt64(usage.Windows * usage.Window / 1e9)
	c.WriteBulkString("total")
	c.WriteInt64(r.Summary.N)
	c.WriteBulkString("bound")
	c.WriteInt64(r.Summary.Floor)
	c.WriteBulkString("nodes")
	c.WriteInt(r.Nodes)
	c.WriteBulkString("unreachable")
	c.WriteArray(len(r.Unreachable))
	for _, id := range r.Unreachable {
		c.WriteBulkString(id)
	}
	c.WriteBulkString("keys")
	c.WriteArray(len(keys))
	for _, e := range keys {
		writePairs(ctx, []Field{strF("key", e.Key), intF("count", e.Count), intF("error", e.Err)})
	}
}
