package commands

import (
	"strconv"
	"strings"
	"sync"

	"github.com/sluice-rl/sluice/budget"
	"github.com/sluice-rl/sluice/raftfsm"
)

func budgetCommands() []*Command {
	return []*Command{
		{Name: "RL.BUDGET", Arity: -2, Flags: 0, Handler: budgetCmd, Summary: "Read and change the replicated budget tree.",
			Syntax: "SET path json|keywords | GET path [CONSISTENT] | DEL path [RECURSIVE] | LIST [prefix] | EXPORT | IMPORT json [REPLACE] [IFEMPTY]"},
	}
}

func budgetCmd(ctx *Ctx) {
	a := ctx.Args
	sub := a[1]
	switch {
	case eq(sub, "GET") && (len(a) == 3 || len(a) == 4 && eq(a[3], "CONSISTENT")):
		st, ok := ctx.readState(len(a) == 4)
		if !ok {
			return
		}
		tree := st.Tree
		if n := tree.Get(string(a[2])); n != nil {
			ctx.Conn.WriteBulk(tree.NodeJSON(n))
		} else {
			ctx.WriteNull()
		}
	case eq(sub, "LIST") && len(a) <= 3:
		st, ok := ctx.readState(false)
		if !ok {
			return
		}
		tree := st.Tree
		prefix := ""
		if len(a) == 3 {
			prefix = string(a[2])
		}
		paths := tree.Paths(prefix)
		ctx.Conn.WriteArray(len(paths))
		for _, p := range paths {
			ctx.Conn.WriteBulkString(p)
		}
	case eq(sub, "EXPORT") && len(a) == 2:
		st, ok := ctx.readState(false)
		if !ok {
			return
		}
		ctx.Conn.WriteBulk(st.Tree.Export())
	case eq(sub, "SET") && len(a) >= 3:
		if !adminRole(ctx) {
			return
		}
		path := string(a[2])
		if e := ctx.validPath(path); e != "" {
			ctx.Conn.WriteError(e)
			return
		}
		var cfg budget.Config
		var err error
		if len(a) == 4 && len(a[3]) > 0 && a[3][0] == '{' {
			cfg, err = budget.ParseJSON(a[3])
		} else {
			cfg, err = budget.ParseKeywords(a[3:])
		}
		if err != nil {
			ctx.Conn.WriteError(err.Error())
			return
		}
		ctx.write(&raftfsm.Entry{Type: raftfsm.SetBudget, Path: path, Config: &cfg}, ctx.okWarn)
	case eq(sub, "DEL") && (len(a) == 3 || len(a) == 4):
		if !adminRole(ctx) {
			return
		}
		recursive := len(a) == 4 && eq(a[3], "RECURSIVE")
		if len(a) == 4 && !recursive {
			ctx.Conn.WriteError(errSyntax)
			return
		}
		ctx.write(&raftfsm.Entry{Type: raftfsm.DelBudget, Path: string(a[2]), Recursive: recursive},
			func(r raftfsm.Response) { ctx.Conn.WriteInt(r.N) })
	case eq(sub, "IMPORT") && len(a) >= 3:
		if !adminRole(ctx) {
			return
		}
		if len(a[2]) > MaxImportBytes {
			ctx.Conn.WriteError("ERR IMPORT json is " + strconv.Itoa(len(a[2])) + " bytes; at most " + strconv.Itoa(MaxImportBytes) +
				" (8 MiB, about 100,000 nodes) go in one Raft entry: split the tree into several IMPORTs without REPLACE")
			return
		}
		e := raftfsm.Entry{Type: raftfsm.ImportBudgets}
		for _, opt := range a[3:] {
			switch {
			case eq(opt, "REPLACE"):
				e.Replace = true
			case eq(opt, "IFEMPTY"):
				e.IfEmpty = true
			default:
				ctx.Conn.WriteError("ERR syntax error near '" + printable(opt, 64) + "' (RL.BUDGET IMPORT json [REPLACE] [IFEMPTY])")
				return
			}
		}
		cfgs, err := budget.ParseExport(a[2])
		if err != nil {
			ctx.Conn.WriteError(err.Error())
			return
		}
		e.Budgets = cfgs
		ctx.write(&e, ctx.okWarn)
	default:
		ctx.Conn.WriteError("ERR unknown subcommand or wrong number of arguments for '" + printable(sub, 64) +
			"'. Try RL.BUDGET SET, GET, DEL, LIST, EXPORT or IMPORT.")
	}
}

// MaxImportBytes bounds one RL.BUDGET IMPORT: the whole tree travels as
// one Raft entry, held by every node's log cache and forwarded between
// nodes, so its size bounds the memory a write can cost.
const MaxImportBytes = 8 << 20

// readState returns the replicated state for a read: on a new leader once
// it has caught up; with consistent, a linearizable read at the leader,
// to which a follower relays the command.
func (ctx *Ctx) readState(consistent bool) (*raftfsm.State, bool) {
	st, err := ctx.Env.Cluster.ReadState(consistent)
	switch {
	case err == raftfsm.ErrNotLeader && consistent:
		ctx.forward()
		return nil, false
	case err != nil:
		ctx.Conn.WriteError(err.Error())
		return nil, false
	}
	return st, true
}

func (ctx *Ctx) okWarn(r raftfsm.Response) {
	if r.Warn != "" {
		ctx.Conn.WriteString("OK WARN " + strings.ReplaceAll(r.Warn, "\n", " "))
		return
	}
	ctx.Conn.WriteString(okReply)
}

func (ctx *Ctx) validPath(p string) string {
	if len(p) > ctx.Env.MaxKeyLen {
		return "ERR budget path is too long: " + strconv.Itoa(len(p)) + " bytes, the limit (--max-key-len) is " + strconv.Itoa(ctx.Env.MaxKeyLen)
	}
	if err := budget.ValidPath(p); err != nil {
		return err.Error()
	}
	return ""
}

// budgetLabels caches each budget label's metric children for one tree.
type budgetLabels struct {
	tree *budget.Tree
	m    map[string]acquireCounters
}

var labelMu sync.Mutex

func (env *Env) counters(tree *budget.Tree, label string) acquireCounters {
	c := env.labels.Load()
	if c == nil || c.tree != tree {
		labelMu.Lock()
		if c = env.labels.Load(); c == nil || c.tree != tree {
			c = &budgetLabels{tree: tree, m: map[string]acquireCounters{}}
			for _, l := range tree.Labels() {
				c.m[l] = env.Metrics.Budget(l)
			}
			env.labels.Store(c)
		}
		labelMu.Unlock()
	}
	if a, ok := c.m[label]; ok {
		return a
	}
	return env.Metrics.inline
}

// budgetAcquire runs the budget form of RL.ACQUIRE (and RL.PEEK: dry run).
func budgetAcquire(ctx *Ctx, la *limitArgs, peek bool) {
	tree := ctx.Env.Cluster.State().Tree
	call := budget.Call{Path: la.target, Subject: la.subject, Cost: la.cost, HasCost: la.hasCost,
		WaitMs: la.waitMs, HasWait: la.hasWait || peek, DryRun: la.dryRun || peek, Quotas: ctx.Env}
	now := ctx.Now()
	out, err := tree.Acquire(ctx.Env.Store, now, &call, &ctx.S.scratch)
	if err != nil {
		ctx.Conn.WriteError(err.Error())
		return
	}
	r := &out.Result
	if out.Allowed == 1 && r.Wait > 0 && !call.DryRun {
		if ctx.hold(r.Wait) {
			// Describe the levels as they are now, when the reply goes out.
			peek := budget.Call{Path: call.Path, Subject: call.Subject, HasCost: true, HasWait: true, DryRun: true, Quotas: call.Quotas}
			if cur, err := tree.Acquire(ctx.Env.Store, ctx.Env.Clock(), &peek, &ctx.S.scratch); err == nil {
				r.Remaining, r.ResetAfter = cur.Result.Remaining, cur.Result.ResetAfter
			}
		} else {
			later := ctx.Env.Clock()
			back, _ := tree.Refund(ctx.Env.Store, later, &call, out.Cost, &ctx.S.scratch)
			out.Allowed, r.RetryAfter = 0, max(now+r.Wait-later, 1)
			r.Remaining, r.ResetAfter = back.Result.Remaining, back.Result.ResetAfter
		}
	}
	if !call.DryRun {
		ctx.Env.counters(tree, out.Label).count(out.Allowed, out.Cost)
	}
	writeResult(ctx, out.Allowed, r, out.LimitedBy)
}

// budgetTarget reports whether path resolves in the budget tree.
func budgetTarget(ctx *Ctx, path []byte) bool {
	_, _, ok := ctx.Env.Cluster.State().Tree.Resolve(path)
	return ok
}

func budgetRefund(ctx *Ctx, la *limitArgs) {
	tree := ctx.Env.Cluster.State().Tree
	call := budget.Call{Path: la.target, Subject: la.subject, Quotas: ctx.Env}
	out, err := tree.Refund(ctx.Env.Store, ctx.Now(), &call, la.cost, &ctx.S.scratch)
	if err != nil {
		ctx.Conn.WriteError(err.Error())
		return
	}
	writeResult(ctx, 1, &out.Result, out.LimitedBy)
}

func budgetReset(ctx *Ctx, la *limitArgs) {
	tree := ctx.Env.Cluster.State().Tree
	ok, err := tree.Reset(ctx.Env.Store, &budget.Call{Path: la.target, Subject: la.subject}, &ctx.S.scratch)
	switch {
	case err != nil:
		ctx.Conn.WriteError(err.Error())
	case ok:
		ctx.Conn.WriteInt(1)
	default:
		ctx.Conn.WriteInt(0)
	}
}
