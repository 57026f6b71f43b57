package raftfsm

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/sluice-rl/sluice/budget"
)

func (n *Node) viewPath() string { return filepath.Join(n.opts.DataDir, "view.json") }

// saveViews saves the applied state to the data dir every second it
// changed, and once more at shutdown. A save that takes long (many quota
// counters) spaces the next ones out: at most a tenth of the time goes to
// saving.
func (n *Node) saveViews() {
	defer n.wg.Done()
	var saved uint64
	var next time.Time
	save := func(force bool) {
		if b := n.fsm.boot.Load(); b != nil && n.fsm.Applied() < b.index {
			return // still behind what was saved last time
		}
		if n.fsm.Applied() == saved || !force && time.Now().Before(next) {
			return
		}
		began := time.Now()
		idx, err := n.fsm.SaveView(n.viewPath())
		if err != nil {
			n.log.Warn("saving the applied state", "err", err)
			return
		}
		saved, next = idx, time.Now().Add(10*time.Since(began))
	}
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-n.stop:
			save(true)
			return
		case <-t.C:
			save(false)
		}
	}
}

type bootView struct {
	st     *State
	index  uint64
	quotas map[string]QuotaItem // counts as saved: a floor while replaying
}

// viewDoc is the state saved to the data dir for the next start.
type viewDoc struct {
	Index uint64 `json:"index"`
	snapshotDoc
}

// SaveView writes the applied state to path (atomically) and returns the
// index it holds.
func (f *FSM) SaveView(path string) (uint64, error) {
	idx := f.applied.Load()
	st := f.state.Load()
	doc := viewDoc{Index: idx, snapshotDoc: snapshotDoc{Format: snapshotFormat, Version: st.Tree.Version(), Budgets: st.Tree.Versioned(), Members: st.Members, Removed: st.Removed, Quotas: f.quotas.items(), Seqs: f.quotas.seqsCopy()}}
	b, err := json.Marshal(doc)
	if err != nil {
		return 0, err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return 0, err
	}
	return idx, os.Rename(tmp, path)
}

// LoadView serves the state saved at path to readers until Raft has applied
// past it, if it is newer than what Raft restored (after index).
func (f *FSM) LoadView(path string, after uint64) error {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var doc viewDoc
	if err := json.Unmarshal(b, &doc); err != nil || doc.Format != snapshotFormat {
		return fmt.Errorf("raftfsm: %s: not a saved view (%v)", path, err)
	}
	if doc.Index <= after || doc.Index <= f.applied.Load() {
		return nil
	}
	t, err := budget.FromVersioned(doc.Budgets, doc.Version)
	if err != nil {
		return fmt.Errorf("raftfsm: %s: %w", path, err)
	}
	if doc.Members == nil {
		doc.Members = map[string]Member{}
	}
	quotas := make(map[string]QuotaItem, len(doc.Quotas))
	for _, q := range doc.Quotas {
		quotas[string(q.Key)] = q
	}
	if doc.Removed == nil {
		doc.Removed = map[string]bool{}
	}
	f.boot.Store(&bootView{st: &State{Tree: t, Members: doc.Members, Removed: doc.Removed}, index: doc.Index, quotas: quotas})
	return nil
}
