package peer

import (
	"crypto/tls"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice/limiter"
	"github.com/sluice-rl/sluice/raftfsm"
)

// Members is what the send side needs of the Raft member: this node's id
// and the current members (*raftfsm.Node).
type Members interface {
	ID() string
	State() *raftfsm.State
}

// Node is what the send side depends on, named: the member, the service
// whose buckets and slots it speaks for, where its metrics go, its log,
// when it stops, and how it dials and logs in to the other members.
type Node struct {
	Raft     Members
	Service  *limiter.Service
	Registry prometheus.Registerer
	Log      *slog.Logger
	Stop     <-chan struct{}
	// TLS dials the other members when set; User and Password are this
	// node's peer login.
	TLS            *tls.Config
	User, Password string
	// ApplyTimeout bounds a relayed command that gives no bound of its own.
	ApplyTimeout time.Duration
	// DataTimeout bounds a relayed data command or script: it may wait
	// behind a script holding its key, so at least the script time limit.
	DataTimeout time.Duration
}

// client returns a RESP client of the node's login named name ("sluice-
// sync:<id>" and so on, as CLIENT LIST shows it), with a call timeout and,
// if dial > 0, a dial timeout.
func (n *Node) client(name string, timeout, dial time.Duration) *Client {
	return &Client{TLS: n.TLS, User: n.User, Password: n.Password, Name: name + n.Raft.ID(), Timeout: timeout, DialTimeout: dial}
}

// addr returns the RESP address of member id, if it is a member.
func (n *Node) addr(id string) (string, bool) {
	m, ok := n.Raft.State().Members[id]
	return m.RespAddr, ok && m.RespAddr != ""
}

// Start runs the send side: consumption to every member each interval,
// the leases, and the slots' messages; it gives the service its slots'
// peers (limiter.Service.Slots) and its relays (limiter.Service.Relays)
// before any of them runs. All of it ends when Stop is closed.
func (n *Node) Start(syncInterval time.Duration, started time.Time) {
	n.Service.Slots = newSlotPeers(n, n.client("sluice-slots:", 2*time.Second, 500*time.Millisecond))
	n.Service.Relays = newRelays(n, n.ApplyTimeout)
	y := newSyncer(n, n.client("sluice-sync:", 2*time.Second, 0))
	n.Registry.MustRegister(syncLagCollector{n: n, started: started})
	go y.run(syncInterval)
	go newLeaser(n, n.client("sluice-lease:", 2*time.Second, 500*time.Millisecond)).run()
}
