package raftfsm

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"github.com/sluice-rl/sluice/fault"
)

// Options configures a Node.
type Options struct {
	ID       string
	RaftAddr string // bound and advertised; never 0.0.0.0
	RespAddr string // this node's advertised RESP address
	DataDir  string
	// Peers is --bootstrap-peers: every node of a static cluster is started
	// with the identical list. Empty with Join empty: a one-node cluster.
	Peers []Member
	// Join is any member's RESP address, for a node joining a cluster.
	Join string
	// Discover, when set (--join dns:NAME), returns the RESP addresses of
	// the cluster's nodes. A node with no Raft state then neither
	// bootstraps nor joins at once: it joins a node that is in a cluster,
	// or, once BootstrapExpect nodes (itself included) answer and none is,
	// the one with the lowest id bootstraps the cluster (discover.go).
	Discover        func(ctx context.Context) ([]string, error)
	BootstrapExpect int
	// TLS is the server side of Raft's TLS (with client certificates
	// required when it has ClientCAs); ClientTLS dials peers. Both nil:
	// plain TCP.
	TLS, ClientTLS *tls.Config
	// Remote carries what a node asks of other nodes outside Raft (forwarded
	// writes, joins); the server implements it over its client protocol.
	Remote Remote
	Logger *slog.Logger
	// LogLevel filters hashicorp/raft's own lines, which go to Logger:
	// warnings and errors always, info and debug with "debug".
	LogLevel string

	ApplyTimeout      time.Duration // bound on waiting for a commit; default 5s
	SnapshotThreshold uint64        // default 8192
	SnapshotInterval  time.Duration // default 2m
	TrailingLogs      uint64        // default 10240
	// Raft timing; zero values take hashicorp/raft's defaults.
	HeartbeatTimeout, ElectionTimeout, LeaderLeaseTimeout time.Duration
	// Voters is how many voters the leader keeps (--voters; default 3):
	// a node joining a cluster that has as many is added as a non-voter,
	// and a voter lost for VoterGrace is replaced by promoting a
	// non-voter reached without a failure for VoterStabilization
	// (autopilot.go). Zero values take the defaults.
	Voters                         int
	VoterGrace, VoterStabilization time.Duration
	// ObserveApply, if set, receives the duration of every Apply.
	ObserveApply func(seconds float64)
	// ProbeInterval is how often this node PINGs every other member
	// (default 1s); a member that has not answered for UnreachableAfter
	// (default 2s) is unreachable (reach.go).
	ProbeInterval, UnreachableAfter time.Duration
}

// Remote is how a node reaches other nodes outside Raft. Calls end when
// ctx does.
type Remote interface {
	// Forward proposes an encoded entry on the leader at addr and returns
	// its outcome; errors are *Error (Retry set when another attempt, at
	// the same or a new leader, may succeed).
	Forward(ctx context.Context, addr string, entry []byte) (Response, error)
	// Relay sends a client command to the node at addr and returns its raw
	// reply (membership changes and consistent reads run on the leader).
	Relay(ctx context.Context, addr string, args [][]byte) ([]byte, error)
	// Ping asks the node at addr for PONG (any reply counts): whether it
	// answers (reach.go).
	Ping(ctx context.Context, addr string) error
	// Join asks the member at addr to add m, this node (a voter, or a
	// non-voter once the cluster has Options.Voters voters): JoinAfresh
	// when fresh (this node has no Raft state), else JoinBySelf.
	Join(ctx context.Context, addr string, m Member, fresh bool) error
	// Status asks the node at addr for its id and whether it is in a
	// cluster (for Options.Discover).
	Status(ctx context.Context, addr string) (PeerStatus, error)
	Close()
}

// noRemote is the Remote of a node that cannot reach others (tests of a
// lone node).
type noRemote struct{}

var errNoRemote = &Error{Code: "TRYAGAIN", Msg: "no way to reach other nodes", Retry: true}

func (noRemote) Forward(context.Context, string, []byte) (Response, error) {
	return Response{}, errNoRemote
}
func (noRemote) Relay(context.Context, string, [][]byte) ([]byte, error) { return nil, errNoRemote }
func (noRemote) Join(context.Context, string, Member, bool) error        { return errNoRemote }
func (noRemote) Ping(context.Context, string) error                      { return errNoRemote }
func (noRemote) Status(context.Context, string) (PeerStatus, error) {
	return PeerStatus{}, errNoRemote
}
func (noRemote) Close() {}

// Node is this process's Raft member.
type Node struct {
	opts    Options
	log     *slog.Logger
	raft    *raft.Raft
	fsm     *FSM
	bolt    *raftboltdb.BoltStore
	stable  *stableStore
	logs    raft.LogStore
	trans   *transport
	remote  Remote
	notify  chan bool
	changed chan struct{}
	events  signal // leader or role changed
	seq     atomic.Uint64
	// readTerm is the term in which this node, as leader, has applied an
	// entry of its own: reads it serves as leader wait for it.
	readTerm  atomic.Uint64
	removed   atomic.Bool
	wasMember atomic.Bool
	reach     reach
	// fresh: this node started with no Raft state and has not been in a
	// configuration since; its own join request says so (JoinAfresh).
	fresh atomic.Bool
	// peers folds raft's lines about unreachable peers (logs.go); seen is
	// the leader and term last logged.
	peers *peerLog
	seen  string
	// beats: the leader's failed and resumed heartbeats, by peer id.
	beats heartbeats
	// suffrageMu serializes the leader's configuration changes that count
	// voters (Join, the autopilot): two joins at once would each see
	// room for one more voter.
	suffrageMu sync.Mutex

	stop     chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup
}

// Errors a write can meet, worded as replies.
var (
	// ErrNotLeader: this node is not the leader; forward the write.
	ErrNotLeader = &Error{Code: "TRYAGAIN", Msg: "not the leader", Retry: true}
	ErrNoLeader  = &Error{Code: "TRYAGAIN", Msg: "no leader"}
	ErrTimeout   = &Error{Code: "TRYAGAIN", Msg: "no quorum: the write was not committed in time; it may still be applied, and writes are safe to repeat"}
	ErrLost      = &Error{Code: "TRYAGAIN", Msg: "leadership lost while applying", Retry: true}
	ErrShutdown  = &Error{Code: "CLUSTERDOWN", Msg: "this node is shutting down"}
	ErrRemoved   = &Error{Code: "CLUSTERDOWN", Msg: "this node was removed from the cluster (RL.CLUSTER LEAVE); an operator re-admits it with RL.CLUSTER JOIN"}
	ErrNotCaught = &Error{Code: "TRYAGAIN", Msg: "the new leader has not applied the log yet"}
	// ErrLeaderHere: a command being relayed to the leader found that this
	// node leads now; it serves the command itself.
	ErrLeaderHere = &Error{Code: "TRYAGAIN", Msg: "this node became the leader", Retry: true}
)

// Error is a cluster error with its reply code. Retry marks an error after
// which the same write may be tried again, here or at a new leader.
type Error = fault.Error

func retryable(err error) bool { return fault.Retryable(err) }

// signal is a broadcast: wait returns a channel that fire closes.
type signal struct {
	mu sync.Mutex
	ch chan struct{}
}

func (s *signal) wait() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch == nil {
		s.ch = make(chan struct{})
	}
	return s.ch
}

func (s *signal) fire() {
	s.mu.Lock()
	if s.ch != nil {
		close(s.ch)
		s.ch = nil
	}
	s.mu.Unlock()
}

// FSM returns the state machine.
func (n *Node) FSM() *FSM { return n.fsm }

// State returns the current replicated state.
func (n *Node) State() *State { return n.fsm.State() }

// ID returns this node's id.
func (n *Node) ID() string { return n.opts.ID }

// IsLeader reports whether this node believes it leads.
func (n *Node) IsLeader() bool { return n.raft.State() == raft.Leader }

// Leader returns the leader's id and RESP address, if known.
func (n *Node) Leader() (id, respAddr string, ok bool) {
	_, lid := n.raft.LeaderWithID()
	if lid == "" {
		return "", "", false
	}
	m, known := n.fsm.State().Members[string(lid)]
	if string(lid) == n.opts.ID {
		return n.opts.ID, n.opts.RespAddr, true
	}
	return string(lid), m.RespAddr, known
}

// addrOf returns the Raft address of member id ("" if unknown).
func (n *Node) addrOf(id string) string {
	servers, _ := n.Servers()
	for _, s := range servers {
		if string(s.ID) == id {
			return string(s.Address)
		}
	}
	return ""
}

// idOf returns the id of the member at Raft address addr ("" if unknown).
func (n *Node) idOf(addr string) string {
	servers, _ := n.Servers()
	for _, s := range servers {
		if string(s.Address) == addr {
			return string(s.ID)
		}
	}
	return ""
}

// Stats returns hashicorp/raft's figures.
func (n *Node) Stats() map[string]string { return n.raft.Stats() }

// Role returns leader, follower, candidate or shutdown.
func (n *Node) Role() string { return strings.ToLower(n.raft.State().String()) }

// Servers returns the Raft configuration's servers.
func (n *Node) Servers() ([]raft.Server, error) {
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, err
	}
	return f.Configuration().Servers, nil
}

// Voter is one server of the Raft configuration, as RL.CLUSTER NODES
// lists it.
type Voter struct {
	ID, RaftAddr string
	Voter        bool // false: a non-voter
	// Unreachable: another member that has not answered this node's
	// probes for Options.UnreachableAfter (reach.go).
	Unreachable bool
}

// Voters returns the servers of the current Raft configuration.
func (n *Node) Voters() ([]Voter, error) {
	servers, err := n.Servers()
	out := make([]Voter, len(servers))
	now := time.Now()
	for i, s := range servers {
		id := string(s.ID)
		out[i] = Voter{ID: id, RaftAddr: string(s.Address), Voter: s.Suffrage == raft.Voter,
			Unreachable: id != n.opts.ID && n.reach.unreachable(id, now, n.opts.UnreachableAfter)}
	}
	return out, err
}

// Barrier waits until every entry committed before it has been applied.
func (n *Node) Barrier(timeout time.Duration) error { return n.raft.Barrier(timeout).Error() }

// Snapshot asks Raft to take a snapshot now.
func (n *Node) Snapshot() error { return n.raft.Snapshot().Error() }

// transferWait bounds how long Shutdown waits for a leadership transfer:
// Raft gives one up after an election timeout.
const transferWait = 5 * time.Second

// Shutdown stops the node: a leader first hands leadership to another
// voter, then Raft stops, then its stores close.
func (n *Node) Shutdown() error {
	n.stopOnce.Do(func() { close(n.stop) })
	n.wg.Wait()
	if n.raft.State() == raft.Leader {
		if servers, err := n.Servers(); err == nil && len(servers) > 1 {
			// The future is answered by Raft's loop; one that reaches
			// Raft's queue as Raft stops (it stepped down and shut down
			// meanwhile) is never answered, so it is not waited for
			// past transferWait.
			f := n.raft.LeadershipTransfer()
			done := make(chan error, 1)
			go func() { done <- f.Error() }()
			select {
			case err := <-done:
				if err != nil {
					n.log.Warn("leadership transfer", "err", err)
				} else {
					n.log.Info("leadership transferred")
				}
			case <-time.After(transferWait):
				n.log.Warn("leadership transfer: no answer, stopping anyway", "after", transferWait)
			}
		}
	}
	err := n.raft.Shutdown().Error()
	n.remote.Close()
	n.trans.Close()
	n.stable.close()
	if cerr := n.bolt.Close(); err == nil {
		err = cerr
	}
	return err
}

// Entry returns the log entry at index as this node's log holds it (from
// its log cache when there), or an error for an index it does not hold or
// that is not a command.
func (n *Node) Entry(index uint64) (*Entry, error) {
	var l raft.Log
	if err := n.logs.GetLog(index, &l); err != nil {
		return nil, err
	}
	if l.Type != raft.LogCommand {
		return nil, fmt.Errorf("raftfsm: entry %d is not a command", index)
	}
	return Decode(l.Data)
}
