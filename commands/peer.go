package commands

import (
	"github.com/sluice-rl/sluice/access"
	"github.com/sluice-rl/sluice/quota"
	"github.com/sluice-rl/sluice/raftfsm"
)

// A session that authenticates with node credentials (package access)
// is that node's: the internal commands take the node they act for from
// the session, never from their arguments alone, and refuse every other
// session, admins included.

// Peer returns the node id the session authenticated as, or "" for a
// session that is not a node's.
func (s *Session) Peer() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peer
}

// setPeer makes the session node id's: its user, the admin role (a node
// forwards operators' writes), and the identity internal commands check.
func (s *Session) setPeer(id string) {
	s.mu.Lock()
	s.user, s.peer = access.PeerUserPrefix+id, id
	s.setRole(access.RoleAdmin)
	s.mu.Unlock()
}

// fromPeer is the check at the top of every internal handler (commands
// only nodes send): the session must have authenticated as a node and, if
// from is not nil, as the node from names. Otherwise it replies NOPERM
// and the handler changes nothing.
func fromPeer(ctx *Ctx, from []byte) bool {
	id := ctx.S.Peer()
	switch {
	case id == "":
		ctx.Conn.WriteError("NOPERM '" + lower(ctx.Cmd.Name) + "' is internal: only another node of the cluster, authenticated with the cluster secret, may send it")
		return false
	case from != nil && string(from) != id:
		ctx.Conn.WriteError("NOPERM " + ctx.Cmd.Name + " for node '" + printable(from, 64) + "' on a connection authenticated as node '" + printable([]byte(id), 64) + "'")
		return false
	}
	return true
}

// checkForwarded validates an entry a node forwards to the leader
// (RL.CLUSTER APPLY) against the node that sends it: what it writes on
// its own behalf must name it, and a batch of quota counts must not be
// numbered or dated ahead of this node's clock (a forged number far ahead
// would make the origin's later batches look already counted). It
// replies with the error and returns false for an entry it refuses.
func checkForwarded(ctx *Ctx, e *raftfsm.Entry) bool {
	id := ctx.S.Peer()
	if e.Req != nil && e.Req.Node != id {
		ctx.Conn.WriteError("NOPERM RL.CLUSTER APPLY: a write numbered by node '" + printable([]byte(e.Req.Node), 64) + "' from node '" + printable([]byte(id), 64) + "'")
		return false
	}
	if e.Type == raftfsm.QuotaAdd && e.Origin != id || (e.Type == raftfsm.QuotaReserve || e.Type == raftfsm.QuotaReturn) && quota.OriginNode(e.Origin) != id {
		ctx.Conn.WriteError("NOPERM RL.CLUSTER APPLY: quota counts or reservations of node '" + printable([]byte(e.Origin), 64) + "' from node '" + printable([]byte(id), 64) + "'")
		return false
	}
	if e.Type == raftfsm.QuotaAdd {
		if e.Seq == 0 || ctx.Env.Service.AheadOfClock(e.Seq, e.Now) {
			ctx.Conn.WriteError("ERR RL.CLUSTER APPLY: quota batch number or time more than an hour ahead of this node's clock")
			return false
		}
	}
	return true
}
