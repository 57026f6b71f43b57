package peer

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"time"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/fault"
	"github.com/sluice-rl/sluice/keyspace"
	"github.com/sluice-rl/sluice/limiter"
	"github.com/sluice-rl/sluice/protocol/window"
	"github.com/sluice-rl/sluice/raftfsm"
	"github.com/sluice-rl/sluice/usage"
)

// Relays is limiter.Relays over RESP: a client command that belongs to
// another member is sent there as the command a client would send, on a
// connection named with raftfsm.ForwardPrefix (so that the member serves
// it and relays nothing on), and its reply comes back typed.
type Relays struct {
	n       *Node
	client  *Client
	timeout time.Duration // a relay's bound when the call gives none
}

func newRelays(n *Node, timeout time.Duration) *Relays {
	return &Relays{n: n, client: n.client(raftfsm.ForwardPrefix, 10*time.Second, 500*time.Millisecond), timeout: timeout}
}

// Self is this node's id.
func (r *Relays) Self() string { return r.n.Raft.ID() }

// do sends args to member within timeout (0: the relay's bound) and
// parses the reply; unreachable is true when the member did not answer
// (or is no member with an address: known false then).
func (r *Relays) do(member string, timeout time.Duration, args ...[]byte) (rep Reply, addr string, known bool, err error) {
	addr, known = r.n.addr(member)
	if !known {
		return rep, "", false, errNotMember
	}
	if timeout <= 0 {
		timeout = r.timeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	raw, err := r.client.DoContext(ctx, addr, args)
	if err != nil {
		return rep, addr, true, err
	}
	rep, err = ParseReply(raw)
	return rep, addr, true, err
}

var errNotMember = fault.New("ERR", "not a member")

// issuerErr is the refusal of a reservation command whose issuer did not
// answer (or has just left: the limiter refuses an id of a node that is
// no member before it relays).
func issuerErr(id, member, addr string, err error) error {
	return fault.New("TRYAGAIN", "reservation '%s' lives on node '%s' (%s), which did not answer: %v",
		fault.Printable([]byte(id)), fault.Printable([]byte(member)), addr, err)
}

// Settle runs RL.SETTLE id ACTUAL n at member, the reservation's issuer.
func (r *Relays) Settle(member, id string, n int64) (limiter.Outcome, error) {
	rep, addr, known, err := r.do(member, 0, []byte("RL.SETTLE"), []byte(id), []byte("ACTUAL"), strconv.AppendInt(nil, n, 10))
	if !known || err != nil && !isFault(err) {
		return limiter.Outcome{}, issuerErr(id, member, addr, err)
	}
	if err != nil {
		return limiter.Outcome{}, err
	}
	if err := rep.Err(); err != nil {
		return limiter.Outcome{}, err
	}
	return outcome(rep, 6)
}

// Release runs RL.RELEASE id at member, the reservation's issuer.
func (r *Relays) Release(member, id string) (bool, error) {
	return r.done(member, id, []byte("RL.RELEASE"), []byte(id))
}

// Renew runs RL.RENEW id TTL ms at member, the reservation's issuer.
func (r *Relays) Renew(member, id string, ttl int64) (bool, error) {
	return r.done(member, id, []byte("RL.RENEW"), []byte(id), []byte("TTL"), strconv.AppendInt(nil, ttl/int64(time.Millisecond), 10))
}

func (r *Relays) done(member, id string, args ...[]byte) (bool, error) {
	rep, addr, known, err := r.do(member, 0, args...)
	if !known || err != nil && !isFault(err) {
		return false, issuerErr(id, member, addr, err)
	}
	if err != nil {
		return false, err
	}
	if err := rep.Err(); err != nil {
		return false, err
	}
	if rep.Kind != ':' {
		return false, errUnexpected(rep)
	}
	return rep.Int == 1, nil
}

// Reserve runs the reservation c with o at member, the one that decides
// the key's concurrency slots, as RL.RESERVE (reserveArgs), waiting at
// most timeout. answered is false when member did not answer or is no
// member.
func (r *Relays) Reserve(member string, c *limiter.Call, o limiter.ReserveOpts, timeout time.Duration) (out limiter.Outcome, id string, answered bool, err error) {
	rep, _, known, err := r.do(member, timeout, reserveArgs(c, o)...)
	if !known || err != nil && !isFault(err) {
		return out, "", false, nil
	}
	if err != nil {
		return out, "", true, err
	}
	if err := rep.Err(); err != nil {
		return out, "", true, err
	}
	if out, err = outcome(rep, 7); err != nil {
		return out, "", true, err
	}
	return out, rep.Elems[6].Str, true, nil
}

// reserveArgs writes the reservation c with o as the RL.RESERVE a client
// would send for it: the same key or node, subject, limits (so the same
// buckets), concurrency, cost, TTL and WAIT, whichever front it came from.
func reserveArgs(c *limiter.Call, o limiter.ReserveOpts) [][]byte {
	num := func(n int64) []byte { return strconv.AppendInt(nil, n, 10) }
	a := [][]byte{[]byte("RL.RESERVE"), c.Path}
	if c.Subject != nil {
		a = append(a, []byte("KEY"), c.Subject)
	}
	if l := c.Rate; l != nil {
		a = append(a, []byte("RATE"), num(l.Rate), []byte("PER"), []byte(window.Format(time.Duration(l.Window))),
			[]byte("BURST"), num(l.Burst), []byte("ALGO"), []byte(l.Algo.String()))
	}
	if q := c.Quota; q != nil {
		a = append(a, []byte("QUOTA"), num(q.N), []byte("PER"), []byte(q.Period.String()), []byte("TZ"), []byte(q.Period.Zone()))
	}
	if o.Concurrency > 0 {
		a = append(a, []byte("CONCURRENCY"), num(o.Concurrency))
	}
	a = append(a, []byte("COST"), num(c.Cost))
	if o.TTL > 0 {
		a = append(a, []byte("TTL"), num(o.TTL/int64(time.Millisecond)))
	}
	if c.HasWait {
		a = append(a, []byte("WAIT"), num(c.WaitMs))
	}
	return a
}

// TopSummary asks member for its usage summary of kind (RL.TOPSUMMARY).
func (r *Relays) TopSummary(member, kind string) (usage.Summary, error) {
	var sum usage.Summary
	rep, _, _, err := r.do(member, 0, []byte("RL.TOPSUMMARY"), []byte(kind))
	if err == nil {
		err = rep.Err()
	}
	if err != nil {
		return sum, err
	}
	if rep.Kind != '$' || rep.Null {
		return sum, errUnexpected(rep)
	}
	return sum, json.Unmarshal([]byte(rep.Str), &sum)
}

// Data runs a data command at member, the owner of its keys, and returns
// its answer as the keyspace writes it.
func (r *Relays) Data(member string, args [][]byte) keyspace.Reply {
	rep, addr, known, err := r.do(member, r.n.DataTimeout, args...)
	var sent *Unanswered
	switch {
	case known && errors.As(err, &sent):
		// It may have run there: saying TRYAGAIN would have a client
		// run a write twice.
		return keyspace.Errf("ERR the node that keeps this key, '" + fault.Printable([]byte(member)) + "' (" + addr + "), did not answer in time: the command may have run there")
	case !known || err != nil && !isFault(err):
		return keyspace.Errf("TRYAGAIN the node that keeps this key, '" + fault.Printable([]byte(member)) + "' (" + addr + "), could not be reached")
	}
	if err != nil {
		return keyspace.Errf(err.Error())
	}
	out := dataReply(rep)
	if sp := keyspace.Lookup(args[0]); sp != nil && sp.ReplyMap && out.Kind == keyspace.Array {
		out.Kind = keyspace.Map
	}
	return out
}

// dataReply converts a member's reply to the keyspace's.
func dataReply(rep Reply) keyspace.Reply {
	switch rep.Kind {
	case '+':
		return keyspace.Reply{Kind: keyspace.Status, Str: rep.Str}
	case '-':
		return keyspace.Errf(rep.Str)
	case ':':
		return keyspace.IntReply(rep.Int)
	case '$':
		if rep.Null {
			return keyspace.NilReply
		}
		return keyspace.BulkString(rep.Str)
	}
	if rep.Null {
		return keyspace.Reply{Kind: keyspace.NilArray}
	}
	out := keyspace.Reply{Kind: keyspace.Array, Elems: make([]keyspace.Reply, len(rep.Elems))}
	for i, e := range rep.Elems {
		out.Elems[i] = dataReply(e)
	}
	return out
}

func isFault(err error) bool { _, ok := err.(*fault.Error); return ok }

func errUnexpected(rep Reply) error {
	return fault.New("ERR", "unexpected reply from another node (type %q)", rep.Kind)
}

// outcome reads the six fields of an RL.ACQUIRE-shaped reply — allowed,
// remaining, limit, retry_after_ms, reset_after_ms, limited_by — from an
// array of size fields.
func outcome(rep Reply, size int) (limiter.Outcome, error) {
	if rep.Kind != '*' || len(rep.Elems) != size {
		return limiter.Outcome{}, errUnexpected(rep)
	}
	var n [5]int64
	for i := range n {
		if rep.Elems[i].Kind != ':' {
			return limiter.Outcome{}, errUnexpected(rep)
		}
		n[i] = rep.Elems[i].Int
	}
	ms := int64(time.Millisecond)
	return limiter.Outcome{Allowed: int(n[0]), LimitedBy: []byte(rep.Elems[5].Str), Result: engine.Result{Allowed: n[0] == 1,
		Remaining: n[1], Limit: n[2], RetryAfter: n[3] * ms, ResetAfter: n[4] * ms}}, nil
}

var _ limiter.Relays = (*Relays)(nil)
