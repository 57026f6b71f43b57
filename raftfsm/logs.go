package raftfsm

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// Logs an operator reads. hashicorp/raft logs every failed RPC to a peer
// that is down — over a hundred ERROR lines a minute on a leader — and
// warns of an election at every normal start. Its lines pass through
// raftLogger, which
//
//   - folds the failures to reach one peer into peerLog: one WARN when the
//     peer goes down, then at most one per peerLogInterval with a count,
//     and one INFO when the leader hears from it again (or it leads);
//   - lowers to INFO (hidden unless --log-level debug, as raft's other
//     INFO lines are) the messages of a normal election, which the node's
//     own "became leader" and "following leader" lines (Node.watch) say
//     better.

// peerLogInterval is the least time between two lines about one peer that
// stays down.
const peerLogInterval = time.Minute

// startGrace is how long after this node opened Raft a peer that cannot
// be reached is taken for one still starting (the members of a cluster
// rarely start together): said at INFO, not WARN. If it stays down, the
// next line about it is a WARN.
const startGrace = 15 * time.Second

// peerFailures are raft's messages about an RPC to a peer that failed.
var peerFailures = map[string]bool{
	"failed to appendEntries to":              true,
	"failed to heartbeat to":                  true,
	"failed to start pipeline replication to": true,
	"failed to pipeline appendEntries":        true,
	"failed to make requestVote RPC":          true,
	"failed to send snapshot to":              true,
	"failed to contact":                       true,
}

// expected are raft's warnings that a normal start or election gives.
var expected = map[string]bool{
	"heartbeat timeout reached, starting election":  true,
	"Election timeout reached, restarting election": true,
	"no known peers, aborting election":             true,
	"rejecting vote request since we have a leader": true,
	// A leader that handed leadership over (a stop) meets the new term.
	"peer has newer term, stopping replication": true,
	// Two candidates at once (a split vote, common when nodes start
	// together on a busy machine), and a candidate that meets the winner.
	"rejecting vote request since our last term is greater":      true,
	"rejecting vote request since our last index is greater":     true,
	"rejecting pre-vote request since we have a leader":          true,
	"rejecting pre-vote request since our last term is greater":  true,
	"rejecting pre-vote request since our last index is greater": true,
	"duplicate requestVote from":                                 true,
	"new leader elected, stepping down":                          true,
	// A new or lagging follower's log is repaired by the leader.
	"failed to get previous log":  true,
	"previous log term mis-match": true,
}

// raftLogger routes hashicorp/raft's hclog lines into slog, so that every
// line the process writes has one format (text or JSON). Raft's info lines
// are chatty; unless level is "debug" only its warnings and errors pass.
func raftLogger(l *slog.Logger, level string) (hclog.Logger, *peerLog) {
	minLevel := hclog.Warn
	if strings.EqualFold(level, "debug") {
		minLevel = hclog.Debug
	}
	peers := &peerLog{l: l, interval: peerLogInterval, down: map[string]*peerDown{}, started: time.Now()}
	il := hclog.NewInterceptLogger(&hclog.LoggerOptions{Name: "raft", Level: minLevel, Output: io.Discard})
	il.RegisterSink(slogSink{l: l, min: minLevel, peers: peers})
	return il, peers
}

type slogSink struct {
	l     *slog.Logger
	min   hclog.Level
	peers *peerLog
}

func (s slogSink) Accept(name string, level hclog.Level, msg string, args ...any) {
	if peerFailures[msg] {
		peer, err := peerOf(args)
		if s.min <= hclog.Debug {
			s.l.Debug(msg, append([]any{"logger", name}, args...)...)
		}
		if peer != "" && msg != "failed to contact" {
			s.peers.failure(peer, err)
		}
		return
	}
	if (expected[msg] || msg == "failed to decode incoming command" && hasError(args, raft.ErrTransportShutdown)) && level > hclog.Info {
		level = hclog.Info // the transport closing as the node stops
	}
	if level < s.min || level == hclog.Off {
		return
	}
	lv := slog.LevelInfo
	switch {
	case level <= hclog.Debug:
		lv = slog.LevelDebug
	case level == hclog.Warn:
		lv = slog.LevelWarn
	case level >= hclog.Error:
		lv = slog.LevelError
	}
	for i, a := range args {
		if f, ok := a.(hclog.Format); ok && len(f) > 0 {
			if format, ok := f[0].(string); ok {
				args[i] = fmt.Sprintf(format, f[1:]...)
			}
		}
	}
	s.l.Log(context.Background(), lv, msg, append([]any{"logger", name}, args...)...)
}

// hasError reports whether a line's "error" argument is target.
func hasError(args []any, target error) bool {
	for i := 0; i+1 < len(args); i += 2 {
		if k, _ := args[i].(string); k == "error" {
			if e, ok := args[i+1].(error); ok && (e == target || e.Error() == target.Error()) {
				return true
			}
		}
	}
	return false
}

// peerOf finds the peer and the error in the arguments of a failure line.
// Raft names the peer by its Server, its ID or only its address.
func peerOf(args []any) (peer, err string) {
	for i := 0; i+1 < len(args); i += 2 {
		k, _ := args[i].(string)
		switch v := args[i+1].(type) {
		case raft.Server:
			if k == "peer" || k == "target" {
				peer = string(v.Address)
			}
		case raft.ServerAddress:
			if k == "peer" || k == "target" {
				peer = string(v)
			}
		case raft.ServerID:
			if k == "server-id" {
				peer = string(v)
			}
		case error:
			if k == "error" {
				err = v.Error()
			}
		}
	}
	return peer, err
}

// peerLog says when a peer goes down, how often it is still failing, and
// when it is back, keyed by the peer's Raft address.
type peerLog struct {
	l        *slog.Logger
	interval time.Duration
	started  time.Time
	mu       sync.Mutex
	down     map[string]*peerDown
	idOf     atomic.Pointer[func(addr string) string]
}

type peerDown struct {
	since, logged time.Time
	failures      int // since the last line
	total         int
}

// failure counts one failed RPC to peer.
func (p *peerLog) failure(peer, err string) {
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	d := p.down[peer]
	if d == nil {
		p.down[peer] = &peerDown{since: now, logged: now, total: 1}
		lv := slog.LevelWarn
		if now.Sub(p.started) < startGrace {
			lv = slog.LevelInfo
		}
		p.l.Log(context.Background(), lv, "peer unreachable", "peer", p.name(peer), "raft", peer, "err", err)
		return
	}
	d.failures++
	d.total++
	if now.Sub(d.logged) >= p.interval {
		p.l.Warn("peer still unreachable", "peer", p.name(peer), "raft", peer, "failures", d.failures,
			"down_for", now.Sub(d.since).Round(time.Second).String(), "err", err)
		d.failures, d.logged = 0, now
	}
}

// resumed notes that the leader hears from peer (by Raft address) again.
func (p *peerLog) resumed(peer string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	d := p.down[peer]
	if d == nil {
		return
	}
	delete(p.down, peer)
	p.l.Info("peer reachable again", "peer", p.name(peer), "raft", peer,
		"down_for", time.Since(d.since).Round(time.Second).String(), "failures", d.total)
}

// name is a peer's node id if it is known, else its address.
func (p *peerLog) name(addr string) string {
	if f := p.idOf.Load(); f != nil {
		if id := (*f)(addr); id != "" {
			return id
		}
	}
	return addr
}
