package raftfsm

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/raft"
)

// ForwardPrefix names the connections that carry writes forwarded by
// another node: such a write is never forwarded again, so a stale view of
// the leader cannot bounce a write between two followers.
const ForwardPrefix = "sluice-forward:"

// Write proposes e wherever the leader is and waits for its outcome: on
// the leader it applies, elsewhere it forwards the entry to the leader.
// While no leader is known or the leader is unreachable it waits for one,
// up to ApplyTimeout; an attempt whose outcome is unknown is retried, which
// is safe because the state machine applies each write id once. It
// replies only once this node has applied the write too (read-your-writes
// here); a write committed but not applied here in time is an error
// (NotAppliedError).
func (n *Node) Write(e *Entry) (Response, error) {
	if n.removed.Load() {
		return Response{}, ErrRemoved
	}
	e.Req = &ReqID{Node: n.opts.ID, Seq: n.seq.Add(1)}
	b := e.Encode()
	ctx, cancel := context.WithTimeout(context.Background(), n.opts.ApplyTimeout)
	defer cancel()
	resp, err := n.propose(ctx, b)
	if err != nil {
		return resp, err
	}
	// Committed: this node normally applies it within milliseconds. A
	// commit that came late in the write's time still gets a while here.
	if dl, _ := ctx.Deadline(); time.Until(dl) < n.opts.ApplyTimeout/2 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.Background(), n.opts.ApplyTimeout/2)
		defer cancel()
	}
	if !n.waitApplied(ctx, resp.Index) {
		return Response{}, NotAppliedError(resp.Index)
	}
	return resp, nil
}

// NotAppliedError is a write's reply when the leader committed it but
// this node did not apply it within ApplyTimeout (cut off from the
// leader's log, or far behind): replying OK would break
// read-your-writes here, so the caller is told where to read it.
func NotAppliedError(index uint64) *Error {
	return &Error{Code: "TRYAGAIN", Msg: "the write was committed at index " + strconv.FormatUint(index, 10) +
		" but this node has not applied it yet, so reads here would not show it; read it with CONSISTENT (served by the leader), or repeat the write: writes are safe to repeat"}
}

func (n *Node) propose(ctx context.Context, b []byte) (Response, error) {
	var last error = ErrNoLeader
	backoff := 10 * time.Millisecond
	for {
		changed := n.events.wait()
		if n.raft.State() == raft.Leader {
			resp, err := n.applyHere(ctx, b)
			if err == nil || !retryable(err) {
				return resp, err
			}
			last = err
		} else if id, addr, ok := n.Leader(); ok && addr != "" && id != n.opts.ID {
			resp, err := n.forwardOnce(ctx, addr, b)
			if err == nil || !retryable(err) {
				return resp, err
			}
			last = err
		}
		select {
		case <-ctx.Done():
			var e *Error
			_, _, known := n.Leader()
			switch {
			case errors.Is(last, ErrNoLeader), !known && n.raft.State() != raft.Leader:
				// An unreachable leader that has since been given up on
				// (this node's heartbeat timeout) is no leader at all.
				return Response{}, ErrNoLeader
			case errors.As(last, &e) && strings.HasPrefix(e.Msg, "leader "):
				return Response{}, &Error{Code: e.Code, Msg: e.Msg} // the leader stayed unreachable
			case errors.Is(last, ErrLost), errors.Is(last, ErrNotLeader):
				return Response{}, ErrNoLeader
			}
			return Response{}, ErrTimeout
		case <-n.stop:
			return Response{}, ErrShutdown
		case <-changed:
			backoff = 10 * time.Millisecond
		case <-time.After(backoff):
			backoff = min(2*backoff, 200*time.Millisecond)
		}
	}
}

// forwardOnce forwards to the leader at addr, giving up early when this
// node's view of the leader changes (a dead or deposed leader).
func (n *Node) forwardOnce(ctx context.Context, addr string, b []byte) (Response, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		for {
			changed := n.events.wait()
			if _, a, ok := n.Leader(); !ok || a != addr {
				cancel()
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-changed:
			}
		}
	}()
	resp, err := n.remote.Forward(ctx, addr, b)
	if err != nil && ctx.Err() != nil {
		return Response{}, &Error{Code: "TRYAGAIN", Msg: "leader " + addr + " did not answer", Retry: true}
	}
	return resp, err
}

// Apply applies an encoded entry on this node if it leads (else
// ErrNotLeader), waiting at most ApplyTimeout. A write forwarded by
// another node comes here: it is never forwarded again, so a stale view of
// the leader cannot bounce a write between followers.
func (n *Node) Apply(b []byte) (Response, error) {
	if n.raft.State() != raft.Leader {
		return Response{}, ErrNotLeader
	}
	ctx, cancel := context.WithTimeout(context.Background(), n.opts.ApplyTimeout)
	defer cancel()
	return n.applyHere(ctx, b)
}

// applyHere proposes b on this node, which believes it leads, and waits
// (until ctx ends) for its commit and apply.
func (n *Node) applyHere(ctx context.Context, b []byte) (Response, error) {
	start := time.Now()
	timeout := n.opts.ApplyTimeout
	if d, ok := ctx.Deadline(); ok {
		timeout = max(time.Until(d), time.Millisecond)
	}
	f := n.raft.Apply(b, timeout)
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		if n.opts.ObserveApply != nil {
			n.opts.ObserveApply(time.Since(start).Seconds())
		}
		switch {
		case err == nil:
			return ResponseError(f.Response())
		case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipTransferInProgress):
			return Response{}, ErrNotLeader
		case errors.Is(err, raft.ErrLeadershipLost):
			return Response{}, ErrLost
		case errors.Is(err, raft.ErrRaftShutdown):
			return Response{}, ErrShutdown
		case errors.Is(err, raft.ErrEnqueueTimeout):
			return Response{}, ErrTimeout
		}
		return Response{}, &Error{Code: "TRYAGAIN", Msg: err.Error()}
	case <-ctx.Done():
		return Response{}, ErrTimeout
	case <-n.stop:
		return Response{}, ErrShutdown
	}
}

// waitApplied waits, until ctx ends, for this node to apply index.
func (n *Node) waitApplied(ctx context.Context, index uint64) bool {
	for {
		ch := n.fsm.appliedChanged()
		if n.AppliedIndex() >= index {
			return true
		}
		// The timer: no-ops and barriers move Raft's index only.
		if n.pause(ctx, ch, 10*time.Millisecond) != nil {
			return false
		}
	}
}
