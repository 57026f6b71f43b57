package commands

import (
	"strconv"
	"strings"

	"github.com/sluice-rl/sluice/raftfsm"
)

// Cluster is the Raft member behind configuration writes and reads;
// *raftfsm.Node implements it.
type Cluster interface {
	ID() string
	State() *raftfsm.State
	// ReadState is the state for a read (see raftfsm.Node.ReadState).
	ReadState(consistent bool) (*raftfsm.State, error)
	IsLeader() bool
	Leader() (id, respAddr string, ok bool)
	Role() string
	Removed() bool
	AppliedIndex() uint64
	// Write proposes an entry wherever the leader is; Apply applies one
	// forwarded by another node, here only.
	Write(e *raftfsm.Entry) (raftfsm.Response, error)
	Apply(entry []byte) (raftfsm.Response, error)
	Join(id, raftAddr, respAddr string, by raftfsm.JoinBy) error
	Leave(id string) error
	Stats() map[string]string
	Voters() ([]raftfsm.Voter, error)
}

func clusterCommands() []*Command {
	return []*Command{
		{Name: "RL.CLUSTER", Arity: -2, Flags: 0, Handler: clusterCmd, Summary: "Cluster membership and state.",
			Syntax: "INFO | NODES | JOIN id raft_addr resp_addr | LEAVE id"},
	}
}

// relayed reports whether another node sent the current command here (on
// a connection named with raftfsm.ForwardPrefix): it runs here, and is
// relayed no further.
func (ctx *Ctx) relayed() bool { return strings.HasPrefix(ctx.S.Name(), raftfsm.ForwardPrefix) }

// forward relays the current command to the leader (what names it in
// the refusal of a node that does not lead: "read", "membership change").
// It returns false, having replied nothing, when this node has become the
// leader meanwhile: the caller serves the command here.
func (ctx *Ctx) forward(what string) bool {
	if ctx.relayed() {
		ctx.Conn.WriteError(raftfsm.NotLeaderReply + " (the " + what + " was relayed here by a node with an older view)")
		return true
	}
	raw, err := ctx.Env.Service.Forward(ctx.Args)
	if err == raftfsm.ErrLeaderHere {
		return false
	}
	if err != nil {
		ctx.Conn.WriteError(err.Error())
		return true
	}
	ctx.writeRelayed(raw)
	return true
}

func clusterCmd(ctx *Ctx) {
	a := ctx.Args
	cl := ctx.Env.Cluster
	switch sub := a[1]; {
	case eq(sub, "INFO") && len(a) == 2:
		st := cl.Stats()
		leaderID, leaderAddr, _ := cl.Leader()
		role := cl.Role()
		if cl.Removed() {
			role = "removed"
		}
		pairs := []string{
			"node_id", cl.ID(), "role", role, "leader_id", leaderID, "leader_addr", leaderAddr,
			"term", st["term"], "commit_index", st["commit_index"], "applied_index", strconv.FormatUint(cl.AppliedIndex(), 10),
			"members", strconv.Itoa(len(cl.State().Members)),
			"sync_interval_ms", strconv.FormatInt(ctx.Env.SyncInterval.Milliseconds(), 10),
			"sync_lag_ms", strconv.FormatInt(lagMs(ctx.Env.SyncLag()), 10),
		}
		ctx.WriteMap(len(pairs) / 2)
		for _, p := range pairs {
			ctx.Conn.WriteBulkString(p)
		}
	case eq(sub, "NODES") && len(a) == 2:
		servers, err := cl.Voters()
		if err != nil {
			ctx.Conn.WriteError("TRYAGAIN " + err.Error())
			return
		}
		members := cl.State().Members
		leaderID, _, _ := cl.Leader()
		ctx.Conn.WriteArray(len(servers))
		for _, s := range servers {
			id := s.ID
			role := MemberRole(s, cl.ID(), leaderID, cl.Role())
			suffrage := "voter"
			if !s.Voter {
				suffrage = "nonvoter"
			}
			ctx.Conn.WriteArray(5)
			ctx.Conn.WriteBulkString(id)
			ctx.Conn.WriteBulkString(members[id].RespAddr)
			ctx.Conn.WriteBulkString(s.RaftAddr)
			ctx.Conn.WriteBulkString(suffrage)
			ctx.Conn.WriteBulkString(role)
		}
	case eq(sub, "JOIN") && (len(a) == 5 || len(a) == 6 && eq(a[5], "AUTO") || len(a) == 7 && eq(a[5], "AUTO") && eq(a[6], "FRESH")):
		// AUTO marks a node's own request to join (sent by the node
		// itself), which is refused for a node an operator removed;
		// AUTO FRESH, one from a node that started with no Raft state
		// (its data directory deleted: the way to move a node), which
		// re-admits it.
		if len(a) > 5 && !fromPeer(ctx, nil) || !adminRole(ctx) {
			return
		}
		id, raftAddr, respAddr := string(a[2]), string(a[3]), string(a[4])
		if id == "" || strings.ContainsAny(id, " ,=\r\n") {
			ctx.Conn.WriteError("ERR node id must be non-empty, without spaces, commas or '='")
			return
		}
		by := raftfsm.JoinByOperator
		switch len(a) {
		case 6:
			by = raftfsm.JoinBySelf
		case 7:
			by = raftfsm.JoinAfresh
		}
		ctx.membership(func() error { return cl.Join(id, raftAddr, respAddr, by) })
	case eq(sub, "APPLY") && len(a) == 3:
		// A write another node forwards to this one, the leader: an
		// encoded log entry; the reply is its encoded outcome.
		if !fromPeer(ctx, nil) {
			return
		}
		e, err := raftfsm.Decode(a[2])
		if err != nil {
			ctx.Conn.WriteError("ERR RL.CLUSTER APPLY: " + err.Error())
			return
		}
		if !checkForwarded(ctx, e) {
			return
		}
		// The argument lives in the connection's read buffer, which the
		// next command overwrites; Raft keeps the entry (its log cache
		// sends it to followers later), so it gets a copy of its own.
		resp, err := cl.Apply(append([]byte(nil), a[2]...))
		if err != nil {
			ctx.Conn.WriteError(err.Error())
			return
		}
		ctx.Conn.WriteBulk(raftfsm.EncodeResponse(resp))
	case eq(sub, "LEAVE") && len(a) == 3:
		if !adminRole(ctx) {
			return
		}
		ctx.membership(func() error { return cl.Leave(string(a[2])) })
	default:
		ctx.Conn.WriteError("ERR unknown subcommand or wrong number of arguments for '" + printable(sub, 64) + "'. Try RL.CLUSTER INFO, NODES, JOIN id raft_addr resp_addr or LEAVE id.")
	}
}

// MemberRole is the role RL.CLUSTER NODES and /v1/cluster show for the
// member v, seen from the node self whose own role is selfRole:
// its own role for itself, unreachable for a member that does not answer
// its probes (SPEC §5), leader for the leader it knows, else follower.
func MemberRole(v raftfsm.Voter, self, leaderID, selfRole string) string {
	switch {
	case v.ID == self:
		return selfRole
	case v.Unreachable:
		return "unreachable"
	case v.ID == leaderID:
		return "leader"
	}
	return "follower"
}

// membership runs a leader-only membership change here or on the leader.
func (ctx *Ctx) membership(change func() error) {
	for try := 0; ; try++ {
		err := change()
		switch {
		case err == nil:
			ctx.Conn.WriteString(okReply)
		case err == raftfsm.ErrNotLeader && try < maxRelays:
			if !ctx.forward("membership change") {
				continue
			}
		default:
			ctx.Conn.WriteError(err.Error())
		}
		return
	}
}

// maxRelays bounds how often a command relayed to the leader comes back
// to be served here because this node became the leader meanwhile.
const maxRelays = 3

// adminRole replies NOPERM unless the session has the admin role.
func adminRole(ctx *Ctx) bool {
	if ok, e := adminOnly(ctx); !ok {
		ctx.Conn.WriteError(strings.Replace(e, "'client'", "'"+lower(ctx.Cmd.Name)+"'", 1))
		return false
	}
	return true
}

// SyncLag returns the longest time since a peer's consumption arrived, in
// ns, or -1 for a node with no peers.
func (env *Env) SyncLag() int64 { return env.Service.SyncLag(env.Cluster.ID(), env.Started) }

func lagMs(ns int64) int64 {
	if ns < 0 {
		return -1
	}
	return ns / 1e6
}
