package raftfsm

import "github.com/sluice-rl/sluice/budget"

// Budget entries change the budget tree; each applied one publishes a new
// State sharing the members of the last.
func init() {
	registerCommand(SetBudget, (*Entry).asBudgetSet, (*FSM).applyBudgetSet)
	registerCommand(DelBudget, (*Entry).asBudgetDelete, (*FSM).applyBudgetDelete)
	registerCommand(ImportBudgets, (*Entry).asBudgetImport, (*FSM).applyBudgetImport)
}

// budgetSet is SetBudget's payload: one node's config.
type budgetSet struct {
	Path   string
	Config *budget.Config // never nil
}

func (e *Entry) asBudgetSet() (budgetSet, error) {
	if e.Config == nil || e.Path == "" {
		return budgetSet{}, badPayload("set without path or config")
	}
	return budgetSet{Path: e.Path, Config: e.Config}, nil
}

func (f *FSM) applyBudgetSet(p budgetSet, index uint64) Response {
	cur := f.state.Load()
	ch, err := cur.Tree.Set(p.Path, *p.Config, index)
	if err != nil {
		return Response{Err: err}
	}
	f.publishTree(cur, ch.Tree)
	return Response{Warn: ch.Warn, N: 1}
}

// budgetDelete is DelBudget's payload: a node, or a subtree.
type budgetDelete struct {
	Path      string
	Recursive bool
}

func (e *Entry) asBudgetDelete() (budgetDelete, error) {
	if e.Path == "" {
		return budgetDelete{}, badPayload("delete without path")
	}
	return budgetDelete{Path: e.Path, Recursive: e.Recursive}, nil
}

func (f *FSM) applyBudgetDelete(p budgetDelete, index uint64) Response {
	cur := f.state.Load()
	t, n, err := cur.Tree.Del(p.Path, p.Recursive, index)
	if err != nil {
		return Response{Err: err}
	}
	if n == 0 {
		return Response{}
	}
	f.publishTree(cur, t)
	return Response{N: n}
}

// budgetImport is ImportBudgets' payload: many configs at once, replacing
// the tree or merged into it; IfEmpty seeds only an empty tree.
type budgetImport struct {
	Budgets          map[string]budget.Config
	Replace, IfEmpty bool
}

func (e *Entry) asBudgetImport() (budgetImport, error) {
	return budgetImport{Budgets: e.Budgets, Replace: e.Replace, IfEmpty: e.IfEmpty}, nil
}

func (f *FSM) applyBudgetImport(p budgetImport, index uint64) Response {
	cur := f.state.Load()
	if p.IfEmpty && cur.Tree.Len() > 0 {
		return Response{}
	}
	ch, err := cur.Tree.Import(p.Budgets, p.Replace, index)
	if err != nil {
		return Response{Err: err}
	}
	f.publishTree(cur, ch.Tree)
	return Response{Warn: ch.Warn, N: len(p.Budgets)}
}

// publishTree publishes the state cur with tree t.
func (f *FSM) publishTree(cur *State, t *budget.Tree) {
	f.state.Store(&State{Tree: t, Members: cur.Members, Removed: cur.Removed})
}
