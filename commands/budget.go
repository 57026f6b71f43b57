package commands

import (
	"strconv"
	"strings"

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
		ctx.okWarn(ctx.Env.Service.SetBudget(path, &cfg))
	case eq(sub, "DEL") && (len(a) == 3 || len(a) == 4):
		if !adminRole(ctx) {
			return
		}
		recursive := len(a) == 4 && eq(a[3], "RECURSIVE")
		if len(a) == 4 && !recursive {
			ctx.Conn.WriteError(errSyntax)
			return
		}
		if n, err := ctx.Env.Service.DelBudget(string(a[2]), recursive); err != nil {
			ctx.Conn.WriteError(err.Error())
		} else {
			ctx.Conn.WriteInt(n)
		}
	case eq(sub, "IMPORT") && len(a) >= 3:
		if !adminRole(ctx) {
			return
		}
		if len(a[2]) > MaxImportBytes {
			ctx.Conn.WriteError("ERR IMPORT json is " + strconv.Itoa(len(a[2])) + " bytes; at most " + strconv.Itoa(MaxImportBytes) +
				" (8 MiB, about 100,000 nodes) go in one Raft entry: split the tree into several IMPORTs without REPLACE")
			return
		}
		replace, ifEmpty := false, false
		for _, opt := range a[3:] {
			switch {
			case eq(opt, "REPLACE") && replace, eq(opt, "IFEMPTY") && ifEmpty:
				ctx.Conn.WriteError(twice(strings.ToUpper(string(opt))))
				return
			case eq(opt, "REPLACE"):
				replace = true
			case eq(opt, "IFEMPTY"):
				ifEmpty = true
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
		ctx.okWarn(ctx.Env.Service.ImportBudgets(cfgs, replace, ifEmpty))
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
	for try := 0; ; try++ {
		st, err := ctx.Env.Cluster.ReadState(consistent)
		switch {
		case err == raftfsm.ErrNotLeader && consistent && try < maxRelays:
			if !ctx.forward("read") {
				continue // this node leads now: read here
			}
			return nil, false
		case err == raftfsm.ErrNotLeader && consistent:
			ctx.Conn.WriteError(raftfsm.ErrNoLeader.Error())
			return nil, false
		case err != nil:
			ctx.Conn.WriteError(err.Error())
			return nil, false
		}
		return st, true
	}
}

// okWarn renders the outcome of a budget write: OK, with a warning if
// the change came with one.
func (ctx *Ctx) okWarn(warn string, err error) {
	switch {
	case err != nil:
		ctx.Conn.WriteError(err.Error())
		return
	case warn != "":
		ctx.Conn.WriteString("OK WARN " + strings.ReplaceAll(warn, "\n", " "))
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

// Count records an admission decision in the metrics of its budget label
// (inline calls: label ""): the service's Counted hook, for every front.
func (m *Metrics) Count(tree *budget.Tree, label string, allowed int, cost int64) {
	if tree == nil {
		m.inline.count(allowed, cost)
		return
	}
	m.counters(tree, label).count(allowed, cost)
}

func (m *Metrics) counters(tree *budget.Tree, label string) acquireCounters {
	c := m.labels.Load()
	if c == nil || c.tree != tree {
		m.labelMu.Lock()
		if c = m.labels.Load(); c == nil || c.tree != tree {
			c = &budgetLabels{tree: tree, m: map[string]acquireCounters{}}
			for _, l := range tree.Labels() {
				c.m[l] = m.Budget(l)
			}
			m.labels.Store(c)
		}
		m.labelMu.Unlock()
	}
	if a, ok := c.m[label]; ok {
		return a
	}
	return m.inline
}
