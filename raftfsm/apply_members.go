package raftfsm

import "github.com/sluice-rl/sluice/budget"

// Member entries change the member map (node id → addresses, which
// followers forward writes by) and the set of nodes an operator removed.
// Each applied one publishes a new State and tells OnMembers.
func init() {
	registerCommand(AddMember, (*Entry).asMemberJoin, (*FSM).applyMemberJoin)
	registerCommand(RemoveMember, (*Entry).asMemberRemoval, (*FSM).applyMemberRemoval)
}

// memberJoin is AddMember's payload. Auto marks a node's own request to
// join, refused for a node an operator removed.
type memberJoin struct {
	Member Member
	Auto   bool
}

func (e *Entry) asMemberJoin() (memberJoin, error) {
	if e.Member == nil || e.Member.ID == "" {
		return memberJoin{}, badPayload("member without id")
	}
	return memberJoin{Member: *e.Member, Auto: e.Auto}, nil
}

func (f *FSM) applyMemberJoin(p memberJoin, _ uint64) Response {
	cur := f.state.Load()
	m := p.Member
	if p.Auto && cur.Removed[m.ID] {
		return Response{Err: errRemoved(m.ID)}
	}
	removed := cloneMap(cur.Removed)
	delete(removed, m.ID)
	members := cloneMap(cur.Members)
	// A member's id or either address identifies it: drop stale records
	// that share one, as a rejoining node's would.
	for k, v := range members {
		if k == m.ID || v.RespAddr == m.RespAddr || v.RaftAddr == m.RaftAddr {
			delete(members, k)
		}
	}
	members[m.ID] = m
	f.publishMembers(cur, members, removed)
	return Response{}
}

// memberRemoval is RemoveMember's payload: an operator's RL.CLUSTER LEAVE.
type memberRemoval struct{ ID string }

func (e *Entry) asMemberRemoval() (memberRemoval, error) {
	if e.ID == "" {
		return memberRemoval{}, badPayload("remove without id")
	}
	return memberRemoval{ID: e.ID}, nil
}

func (f *FSM) applyMemberRemoval(p memberRemoval, _ uint64) Response {
	cur := f.state.Load()
	removed := cloneMap(cur.Removed)
	removed[p.ID] = true
	members := cloneMap(cur.Members)
	delete(members, p.ID)
	f.publishMembers(cur, members, removed)
	return Response{}
}

// publishMembers publishes the state cur with new member and removed maps.
func (f *FSM) publishMembers(cur *State, members map[string]Member, removed map[string]bool) {
	next := &State{Tree: cur.Tree, Members: members, Removed: removed}
	f.state.Store(next)
	if f.OnMembers != nil {
		f.OnMembers(next)
	}
}

// cloneMap copies m with room for one more key (never nil, unlike
// maps.Clone of a nil map).
func cloneMap[K comparable, V any](m map[K]V) map[K]V {
	out := make(map[K]V, len(m)+1)
	for k, v := range m {
		out[k] = v
	}
	return out
}

func errRemoved(id string) error {
	return &budget.Error{Code: "ERR", Msg: "node '" + id + "' was removed from the cluster with RL.CLUSTER LEAVE; an operator re-admits it with RL.CLUSTER JOIN"}
}
