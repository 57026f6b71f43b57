package raftfsm

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"sync/atomic"

	"github.com/hashicorp/raft"
	"github.com/sluice-rl/sluice/budget"
)

// State is the replicated state at one applied index. It is immutable:
// Apply publishes a new State, so readers need no lock.
type State struct {
	Tree    *budget.Tree
	Members map[string]Member
	// Removed holds the ids an operator removed with RL.CLUSTER LEAVE: such
	// a node does not rejoin on its own, only when an operator joins it or
	// it starts again with no Raft state (JoinAfresh).
	Removed map[string]bool
}

// SortedMembers returns the members ordered by id.
func (s *State) SortedMembers() []Member {
	out := make([]Member, 0, len(s.Members))
	for _, m := range s.Members {
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Response is what applying one entry answers.
type Response struct {
	// Err is a refusal with its reply code (ERR, BUDGET); nothing changed.
	Err error
	// Warn accompanies an accepted change (an overcommitted parent).
	Warn string
	// N counts what changed (nodes removed by a delete).
	N int
	// Index is the log index of the entry.
	Index uint64
}

// FSM is the Raft state machine. Apply is deterministic: it uses only the
// entry and the log index, never the clock.
type FSM struct {
	state   atomic.Pointer[State]
	quotas  *quotaTable
	applied atomic.Uint64
	// boot is the state this node had applied before it last stopped, served
	// to readers until Raft has re-applied that far (Raft replays the log
	// only once a leader tells it the commit index, which without a quorum
	// may be never).
	boot atomic.Pointer[bootView]
	// OnApply, if set, runs after every applied entry (under Raft's FSM
	// goroutine; keep it short).
	OnApply func(index uint64)
	// quotaObs, if set, learns of applied quota changes (SetQuotaObserver).
	quotaObs  atomic.Pointer[QuotaObserver]
	maxQuotas atomic.Int64
	// OnConfiguration, if set, learns of each applied Raft configuration;
	// OnMembers, of each applied change of the member list.
	OnConfiguration func(index uint64, c raft.Configuration)
	OnMembers       func(st *State)

	writes writeTable
	moved  signal // fired at every applied entry
}

// NewFSM returns a state machine with an empty tree and no members.
func NewFSM() *FSM {
	f := &FSM{quotas: newQuotaTable()}
	f.state.Store(&State{Tree: budget.Empty, Members: map[string]Member{}, Removed: map[string]bool{}})
	return f
}

// State returns the current replicated state.
func (f *FSM) State() *State {
	if b := f.boot.Load(); b != nil {
		if f.applied.Load() < b.index {
			return b.st
		}
		f.boot.CompareAndSwap(b, nil)
	}
	return f.state.Load()
}

// QuotaUsed returns the committed count of a quota counter in the period
// [start, end), without allocating.
//
// While a restarted node replays its log, the counts it had saved stand in
// for the ones being rebuilt (the larger of the two, as counts mostly grow).
func (f *FSM) QuotaUsed(key []byte, start, end int64) int64 {
	n := f.quotas.Used(key, start, end)
	if b := f.boot.Load(); b != nil && f.applied.Load() < b.index {
		if it, ok := b.quotas[string(key)]; ok && it.Start == start && it.End == end {
			n = max(n, it.Used)
		}
	}
	return n
}

// Quota returns a committed quota counter as it stands.
func (f *FSM) Quota(key string) (QuotaItem, bool) { return f.quotas.Get(key) }

// QuotaSeq returns the last batch of quota counts applied from origin;
// its counts are in the committed totals by the time it is reported.
func (f *FSM) QuotaSeq(origin string) uint64 { return f.quotas.LastSeq(origin) }

// QuotaObserver learns, in Raft's apply goroutine, of each quota change
// as it is applied. A batch already applied is skipped and not reported.
type QuotaObserver interface {
	QuotaAdded(origin string, seq uint64, items []QuotaItem)
	// QuotaReset reports a reset, with the time its proposer made it (a
	// node replaying its log sees resets made before it started).
	QuotaReset(keys []QuotaKey, at int64)
	// QuotaReserved reports the units granted to origin for each item of
	// a reservation (negative: units it released).
	QuotaReserved(origin string, items []QuotaItem, grants []int64)
}

// SetQuotaObserver sets the observer of quota changes.
func (f *FSM) SetQuotaObserver(o QuotaObserver) { f.quotaObs.Store(&o) }

// QuotaCounters returns the number of committed quota counters.
func (f *FSM) QuotaCounters() int { return f.quotas.Len() }

// QuotaParts is the number of parts ScanQuotas divides the committed quota
// counters into.
const QuotaParts = len(quotaTable{}.shards)

// ScanQuotas calls f with each committed quota counter of one part (0 ≤
// part < QuotaParts), under that part's read lock: f must not call back
// into the FSM. A counter lives in one part for its whole life, so a scan
// part by part sees each counter that lives throughout exactly once.
func (f *FSM) ScanQuotas(part int, fn func(it QuotaItem)) {
	sh := &f.quotas.shards[part]
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	for _, it := range sh.m {
		fn(it)
	}
}

// SetMaxQuotaCounters sets the number of committed quota counters above
// which QuotaRoom refuses new ones (0: no limit). It is this node's
// setting, not replicated state.
func (f *FSM) SetMaxQuotaCounters(n int) { f.maxQuotas.Store(int64(n)) }

// QuotaRoom reports whether a call may count against the quota counter
// key: it exists, or there is room for a new one.
func (f *FSM) QuotaRoom(key []byte) bool {
	max := f.maxQuotas.Load()
	if max <= 0 || int64(f.quotas.Len()) < max {
		return true
	}
	sh := f.quotas.shard(key)
	sh.mu.RLock()
	_, ok := sh.m[string(key)]
	sh.mu.RUnlock()
	return ok
}

// Applied returns the index of the last applied entry.
func (f *FSM) Applied() uint64 { return f.applied.Load() }

// Apply applies one committed log entry through the apply table.
func (f *FSM) Apply(l *raft.Log) any {
	defer func() {
		f.applied.Store(l.Index)
		if f.OnApply != nil {
			f.OnApply(l.Index)
		}
		f.appliedSignal()
	}()
	if l.Type != raft.LogCommand {
		return Response{Index: l.Index}
	}
	e, err := decodeEntry(l.Data)
	if err != nil {
		return Response{Err: refusal(err), Index: l.Index}
	}
	return commands[e.Type].apply(f, e, l.Index)
}

// snapshotFormat versions the snapshot encoding.
const snapshotFormat = 1

type snapshotDoc struct {
	Format  int                         `json:"format"`
	Version uint64                      `json:"version"`
	Budgets map[string]budget.Versioned `json:"budgets"`
	Members map[string]Member           `json:"members"`
	Quotas  []QuotaItem                 `json:"quotas,omitempty"`
	Seqs    map[string]uint64           `json:"quota_seqs,omitempty"`
	// Applied is the index of the last entry Raft handed to the state
	// machine when the snapshot was taken (the snapshot's own index).
	Applied uint64          `json:"applied,omitempty"`
	Writes  []writeDoc      `json:"writes,omitempty"`
	Removed map[string]bool `json:"removed,omitempty"`
}

// Snapshot captures the current state; Persist does the I/O without
// holding up Apply.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	// The quota counters change in place, so they are copied here (Apply
	// waits meanwhile); the tree is immutable and only referenced.
	return &snapshot{st: f.state.Load(), quotas: f.quotas.items(), seqs: f.quotas.seqsCopy(),
		applied: f.applied.Load(), writes: f.writes.docs()}, nil
}

type snapshot struct {
	st      *State
	quotas  []QuotaItem
	seqs    map[string]uint64
	applied uint64
	writes  []writeDoc
}

func (s *snapshot) Persist(sink raft.SnapshotSink) error {
	doc := snapshotDoc{Format: snapshotFormat, Version: s.st.Tree.Version(), Budgets: s.st.Tree.Versioned(), Members: s.st.Members, Quotas: s.quotas, Seqs: s.seqs,
		Applied: s.applied, Writes: s.writes, Removed: s.st.Removed}
	if err := json.NewEncoder(sink).Encode(doc); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

func (s *snapshot) Release() {}

// Restore replaces all state with a snapshot's.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	var doc snapshotDoc
	if err := json.NewDecoder(rc).Decode(&doc); err != nil {
		return fmt.Errorf("raftfsm: snapshot: %w", err)
	}
	if doc.Format != snapshotFormat {
		return fmt.Errorf("raftfsm: snapshot format %d, this version reads %d", doc.Format, snapshotFormat)
	}
	t, err := budget.FromVersioned(doc.Budgets, doc.Version)
	if err != nil {
		return fmt.Errorf("raftfsm: snapshot tree: %w", err)
	}
	if doc.Members == nil {
		doc.Members = map[string]Member{}
	}
	if doc.Removed == nil {
		doc.Removed = map[string]bool{}
	}
	f.state.Store(&State{Tree: t, Members: doc.Members, Removed: doc.Removed})
	f.quotas.replace(doc.Quotas, doc.Seqs)
	f.writes = writesFrom(doc.Writes)
	if doc.Applied > 0 {
		f.applied.Store(doc.Applied)
	}
	f.appliedSignal()
	return nil
}

// ResponseError extracts the refusal of an applied entry, if any.
func ResponseError(r any) (Response, error) {
	resp, ok := r.(Response)
	if !ok {
		return Response{}, errors.New("raftfsm: unexpected apply response")
	}
	return resp, nil
}

// StoreConfiguration is raft.ConfigurationStore: with it, Raft hands
// configuration entries to the state machine too, so that the applied
// index tracked here counts every entry Raft passes to the FSM.
func (f *FSM) StoreConfiguration(index uint64, c raft.Configuration) {
	f.applied.Store(index)
	if f.OnConfiguration != nil {
		f.OnConfiguration(index, c)
	}
	f.appliedSignal()
}

// appliedSignal wakes everyone waiting for the applied index to move.
func (f *FSM) appliedSignal() { f.moved.fire() }

// appliedChanged returns a channel closed at the next applied entry.
func (f *FSM) appliedChanged() <-chan struct{} { return f.moved.wait() }
