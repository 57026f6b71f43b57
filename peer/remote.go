package peer

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sluice-rl/sluice/raftfsm"
)

// Remote is raftfsm.Remote over RESP: what a node asks of other nodes
// outside Raft, sent as the commands an operator would send, with the
// peer credentials.
type Remote struct {
	join, fwd *Client
	// probe PINGs members (raftfsm's reach.go): short timeouts, its
	// own connections, so that a probe never waits behind a join.
	probe *Client
	// id is this node's id, which its credentials name: known from the
	// configuration or, with a Raft port the OS picks, once Raft has
	// bound it (the node's own join request carries it).
	id atomic.Pointer[string]
}

// NewRemote returns the Remote of node id (empty when Raft is yet to
// pick it: SetID then), which logs in with login(id) and dials with
// clientTLS when set.
func NewRemote(id string, login func(id string) (user, password string), clientTLS *tls.Config) *Remote {
	r := &Remote{}
	r.SetID(id)
	current := func() (string, string) { return login(*r.id.Load()) }
	c := func(name string) *Client {
		return &Client{TLS: clientTLS, Login: current, Name: name,
			Timeout: 10 * time.Second, DialTimeout: 500 * time.Millisecond}
	}
	r.join, r.fwd = c("sluice-peer:"+id), c(raftfsm.ForwardPrefix+id)
	r.probe = c("sluice-peer:" + id)
	r.probe.Timeout = time.Second
	return r
}

// SetID names the node once Raft has picked its id.
func (r *Remote) SetID(id string) { r.id.Store(&id) }

// Forward sends RL.CLUSTER APPLY with the encoded entry to the leader.
func (r *Remote) Forward(ctx context.Context, addr string, entry []byte) (raftfsm.Response, error) {
	raw, err := r.fwd.DoContext(ctx, addr, [][]byte{[]byte("RL.CLUSTER"), []byte("APPLY"), entry})
	if err != nil {
		var he *HandshakeError
		return raftfsm.Response{}, &raftfsm.Error{Code: "TRYAGAIN", Msg: "leader " + addr + " unreachable: " + err.Error(), Retry: !errors.As(err, &he)}
	}
	if err := replyError(raw); err != nil {
		return raftfsm.Response{}, err
	}
	body, ok := bulkBody(raw)
	if !ok {
		return raftfsm.Response{}, &raftfsm.Error{Code: "ERR", Msg: "unexpected reply to a forwarded write: " + strings.TrimSpace(string(raw))}
	}
	return raftfsm.DecodeResponse(body)
}

// Relay sends a client command to addr and returns its raw reply.
func (r *Remote) Relay(ctx context.Context, addr string, args [][]byte) ([]byte, error) {
	return r.fwd.DoContext(ctx, addr, args)
}

// Join sends RL.CLUSTER JOIN … AUTO: the node's own request to join
// (AUTO FRESH from a node that has no Raft state).
func (r *Remote) Join(ctx context.Context, addr string, m raftfsm.Member, fresh bool) error {
	if *r.id.Load() == "" {
		r.SetID(m.ID)
	}
	args := [][]byte{[]byte("RL.CLUSTER"), []byte("JOIN"), []byte(m.ID), []byte(m.RaftAddr), []byte(m.RespAddr), []byte("AUTO")}
	if fresh {
		args = append(args, []byte("FRESH"))
	}
	raw, err := r.join.DoContext(ctx, addr, args)
	if err != nil {
		return err
	}
	if err := replyError(raw); err != nil {
		return err
	}
	return nil
}

// Ping sends PING to addr: any reply, an error reply or a refused
// login included, is an answer.
func (r *Remote) Ping(ctx context.Context, addr string) error {
	_, err := r.probe.DoContext(ctx, addr, [][]byte{[]byte("PING")})
	if he := (*HandshakeError)(nil); errors.As(err, &he) {
		return nil
	}
	return err
}

// Status asks the node at addr for RL.CLUSTER INFO (its node_id) and
// RL.CLUSTER NODES (empty for a node that has no Raft configuration yet).
func (r *Remote) Status(ctx context.Context, addr string) (raftfsm.PeerStatus, error) {
	var st raftfsm.PeerStatus
	raw, err := r.join.DoContext(ctx, addr, [][]byte{[]byte("RL.CLUSTER"), []byte("INFO")})
	if err == nil {
		err = replyError(raw)
	}
	if err != nil {
		return st, err
	}
	rep, perr := ParseReply(raw)
	pairs, ok := rep.Strings()
	if perr != nil || !ok {
		return st, fmt.Errorf("unexpected reply to RL.CLUSTER INFO from %s: %q", addr, raw)
	}
	for i := 0; i+1 < len(pairs); i += 2 {
		switch pairs[i] {
		case "node_id":
			st.ID = pairs[i+1]
		case "role":
			st.Leader = pairs[i+1] == "leader"
		case "commit_index":
			st.CommitIndex, _ = strconv.ParseUint(pairs[i+1], 10, 64)
		}
	}
	if raw, err = r.join.DoContext(ctx, addr, [][]byte{[]byte("RL.CLUSTER"), []byte("NODES")}); err == nil {
		err = replyError(raw)
	}
	if err != nil {
		return st, err
	}
	st.InCluster = !strings.HasPrefix(string(raw), "*0\r\n")
	return st, nil
}

func (r *Remote) Close() {
	r.probe.Close()
	r.join.Close()
	r.fwd.Close()
}

// replyError is an error reply as a *raftfsm.Error (Reply.Err): TRYAGAIN
// and CLUSTERDOWN (the node is no longer the leader, or is stopping) may
// succeed at the next leader. Any other reply is nil.
func replyError(raw []byte) error {
	if len(raw) == 0 || raw[0] != '-' {
		return nil
	}
	rep, err := ParseReply(raw)
	if err != nil {
		return err
	}
	return rep.Err()
}

// bulkBody returns the payload of a RESP bulk string reply.
func bulkBody(raw []byte) ([]byte, bool) {
	rep, err := ParseReply(raw)
	if err != nil || rep.Kind != '$' || rep.Null {
		return nil, false
	}
	return []byte(rep.Str), true
}

var _ raftfsm.Remote = (*Remote)(nil)
