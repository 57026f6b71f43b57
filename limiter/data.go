package limiter

import (
	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/keyspace"
)

// Data commands: the Redis values existing rate-limit libraries keep
// (package keyspace). In a cluster every key has one owner, the member
// its bucket would have (the store's ranking of the members), and its
// commands run there: another node relays them in one hop, so three
// application instances on three nodes share one counter. A command
// whose keys have different owners is refused (keys of one command
// share an owner when they share a {hash tag}, as in Redis Cluster).

// errOwnersUnsettled refuses a data command while this node's ranking of
// the members is not the member list yet (a moment after a change): no
// key is decided by an older list.
var errOwnersUnsettled = keyspace.Errf("TRYAGAIN the cluster's members do not agree on the member list yet: a key's owner is not known until they do")

// placed waits, in a cluster, until keys are placed over the current
// members (ownersCurrent); false: they are not yet.
func (s *Service) placed() bool { return s.Cluster == nil || s.ownersCurrent() == nil }

// errKeysApart refuses a command whose keys live on different members.
var errKeysApart = keyspace.Errf("ERR the keys of this command live on different nodes: give them one {hash tag} (as in Redis Cluster) so that they live together")

// DataOwner returns the member that keeps key ("" with self true for this
// node, or a node alone).
func (s *Service) DataOwner(key []byte) (id string, self bool) {
	return s.Store.Owner(engine.SpaceData, hashTag(key))
}

// hashTag is the part of key that places it: between the first { and the
// next } when that is not empty, else the whole key (Redis Cluster's rule).
func hashTag(key []byte) []byte {
	for i, c := range key {
		if c == '{' {
			for j := i + 1; j < len(key); j++ {
				if key[j] == '}' {
					if j > i+1 {
						return key[i+1 : j]
					}
					return key
				}
			}
			return key
		}
	}
	return key
}

// owner returns the one member that keeps every key of keys, or false
// when they are apart.
func (s *Service) owner(keys [][]byte) (id string, self, ok bool) {
	self = true
	for i, k := range keys {
		o, me := s.DataOwner(k)
		if i > 0 && (o != id || me != self) {
			return "", false, false
		}
		id, self = o, me
	}
	return id, self, true
}

// errNotOwner refuses a command another member relayed here by a member
// list on which this node keeps its keys, when this node's own list says
// it does not: the sender has not yet learnt of a change this node has
// (or the other way round), and it asks again once they agree.
var errNotOwner = keyspace.Errf("TRYAGAIN this node does not keep these keys by its member list: the node that relayed the command places them by another list, and the two agree in a moment")

// where says where a data command or script on keys runs: at member id
// (remote) or here; a refusal (loading, members not agreed on, keys
// apart) when it runs nowhere now. relayed: another member sent it here;
// it runs here only if this node's own member list places the keys here
// too, never relayed on. A relay from a node that has not yet learnt of a
// change of the members is thus refused by the key's old owner, which has
// dropped the key (DropMovedKeys): run, it would make a second copy
// beside the new owner's, counting a window again from zero, and that
// copy would come back as the key's value should the key return here.
func (s *Service) where(keys [][]byte, relayed bool) (id string, remote bool, refused keyspace.Reply) {
	if err := s.loaded(); err != nil {
		return "", false, keyspace.Errf(err.Error())
	}
	if s.Relays == nil {
		return "", false, keyspace.Reply{}
	}
	if !s.placed() {
		return "", false, errOwnersUnsettled
	}
	id, self, ok := s.owner(keys)
	switch {
	case relayed && (!ok || !self):
		return "", false, errNotOwner
	case !ok:
		return "", false, errKeysApart
	}
	return id, !self, keyspace.Reply{}
}

// Data runs the data command sp with args a at now, where its keys live
// (where).
func (s *Service) Data(now int64, sp *keyspace.Spec, a [][]byte, relayed bool) keyspace.Reply {
	if s.Keys == nil {
		return keyspace.Errf("ERR data commands are not enabled on this node")
	}
	if !sp.ArityOK(len(a)) {
		return keyspace.WrongArity(sp.Name)
	}
	id, remote, refused := s.where(sp.Keys(a), relayed)
	switch {
	case refused.IsError():
		return refused
	case remote:
		return s.Relays.Data(id, a)
	}
	return s.Keys.Exec(now, sp, a)
}

// DataInfo returns the type and TTL of key in the keyspace, where it
// lives (TYPE, TTL and PTTL ask it before the buckets).
func (s *Service) DataInfo(now int64, key []byte, relayed bool) (keyspace.KeyInfo, bool) {
	if s.Keys == nil {
		return keyspace.KeyInfo{}, false
	}
	if id, self := s.DataOwner(key); !self && !relayed && s.Relays != nil {
		// Ask the owner: TYPE there answers the type, PTTL the TTL.
		t := s.Relays.Data(id, [][]byte{[]byte("TYPE"), key})
		typ := keyspace.TypeOf(t.Str) // 0 for none, or a bucket's algorithm
		if t.Kind != keyspace.Status || typ == 0 {
			return keyspace.KeyInfo{}, false
		}
		p := s.Relays.Data(id, [][]byte{[]byte("PTTL"), key})
		if p.Kind != keyspace.Int || p.Int == -2 {
			return keyspace.KeyInfo{}, false
		}
		return keyspace.KeyInfo{Type: typ, TTLMs: p.Int}, true
	}
	return s.Keys.Info(now, key)
}

// DropMovedKeys removes the keys this node keeps but no longer owns, once
// the store's member list has changed since the last call: a key whose
// owner changed starts again from empty at its new owner, and the old
// value here must not come back should the key return. The node calls it
// every second; after a change it drops twice, at the first call that
// sees the new list and at the next, so that a command decided here by
// the former list an instant before (its keys not yet locked when the
// first drop ran) leaves no copy behind either.
func (s *Service) DropMovedKeys() int {
	if s.Keys == nil || s.Relays == nil {
		return 0
	}
	view := s.Store.View()
	if view == 0 {
		return 0
	}
	if s.keysView.Swap(view) != view {
		s.dropAgain.Store(true)
	} else if !s.dropAgain.Swap(false) {
		return 0
	}
	return s.Keys.DropIf(func(key []byte) bool {
		_, self := s.DataOwner(key)
		return !self
	})
}
