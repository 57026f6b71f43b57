package raftfsm

import (
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// The autopilot keeps a grown cluster's voters few: a node that joins a
// cluster with Options.Voters voters already is added as a non-voter
// (Join), and the leader, every autopilotTick, replaces a lost voter by
// promoting a non-voter. Its decision (planVoters) takes the configuration
// and what the leader knows of each peer's heartbeats, so that it is tested
// on fixed inputs; the loop (autopilot) only gathers them and acts.
//
// Its defaults, for Raft's default timing (a 1 s heartbeat timeout): a
// voter the leader has failed to reach for VoterGrace is lost; a
// non-voter may be promoted once the leader has reached it without a
// failure for VoterStabilization (Consul autopilot's server
// stabilization).
const (
	defaultVoters             = 3
	defaultVoterGrace         = 3 * time.Second
	defaultVoterStabilization = 3 * time.Second
	autopilotTick             = 250 * time.Millisecond
	// staleFailure: a peer with no failed heartbeat for this long is
	// taken as reachable again even if Raft's "resumed" observation was
	// dropped (observations are not blocking). Raft retries a failing
	// peer at least every half heartbeat timeout, but one attempt may
	// wait for the transport's 10 s dial timeout.
	staleFailure = 15 * time.Second
)

// peerState is one server of the configuration as planVoters sees it.
type peerState struct {
	ID    string
	Voter bool
	// Self: the leader itself, always reachable.
	Self bool
	// Member: its member record is written and it was not removed (a
	// node the leader is adding has no record yet).
	Member bool
	// Since: since when the leader has reached it without a failure
	// (first seen in this leadership, or last resumed).
	Since time.Time
	// DownSince: since when the leader fails to reach it (zero: it
	// does not).
	DownSince time.Time
}

// voterPolicy is what planVoters enforces.
type voterPolicy struct {
	Voters    int
	Grace     time.Duration
	Stabilize time.Duration
}

// planVoters decides one step: the non-voter to promote, or the voter to
// demote, or neither. While fewer than Voters voters are live (reachable,
// or unreachable for less than Grace), it promotes the non-voter the
// leader has reached without a failure the longest, if that is at least
// Stabilize. Once Voters voters are live, a voter lost for longer than
// Grace beyond them is demoted to a non-voter: it stays a member (an
// owner, a lease holder) and serves as a non-voter when it is back. It
// never demotes a live voter, nor removes anyone.
func planVoters(now time.Time, peers []peerState, p voterPolicy) (promote, demote string) {
	live, voters := 0, 0
	var lost []peerState
	var best *peerState
	for i, s := range peers {
		down := !s.Self && !s.DownSince.IsZero()
		switch {
		case s.Voter:
			voters++
			if down && now.Sub(s.DownSince) >= p.Grace {
				lost = append(lost, s)
			} else {
				live++
			}
		case s.Member && !down && now.Sub(s.Since) >= p.Stabilize:
			if best == nil || s.Since.Before(best.Since) || (s.Since.Equal(best.Since) && s.ID < best.ID) {
				best = &peers[i]
			}
		}
	}
	if live < p.Voters {
		if best != nil {
			return best.ID, ""
		}
		return "", ""
	}
	if len(lost) > 0 && voters > p.Voters {
		slices.SortFunc(lost, func(a, b peerState) int { return a.DownSince.Compare(b.DownSince) })
		return "", lost[0].ID
	}
	return "", ""
}

// heartbeats is what the leader learned from Raft's heartbeat
// observations: since when each peer (by id) fails, and when it last did.
type heartbeats struct {
	mu   sync.Mutex
	down map[string]*failing
	up   map[string]time.Time // resumed at
}

type failing struct{ since, last time.Time }

func (h *heartbeats) failed(id string, lastContact, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.down == nil {
		h.down, h.up = map[string]*failing{}, map[string]time.Time{}
	}
	f := h.down[id]
	if f == nil || now.Sub(f.last) > staleFailure {
		since := now
		if !lastContact.IsZero() && lastContact.Before(now) {
			since = lastContact
		}
		f = &failing{since: since}
		h.down[id] = f
	}
	f.last = now
}

func (h *heartbeats) reset() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.down, h.up = nil, nil
}

func (h *heartbeats) resumed(id string, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.down[id] != nil {
		delete(h.down, id)
		h.up[id] = now
	}
}

// state returns since when id fails (zero: it does not) and when it last
// resumed (zero: never seen failing).
func (h *heartbeats) state(id string, now time.Time) (downSince, resumedAt time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if f := h.down[id]; f != nil {
		if now.Sub(f.last) <= staleFailure {
			return f.since, time.Time{}
		}
		delete(h.down, id)
		h.up[id] = f.last
	}
	return time.Time{}, h.up[id]
}

// autopilot runs the voter policy while this node leads.
func (n *Node) autopilot() {
	defer n.wg.Done()
	t := time.NewTicker(autopilotTick)
	defer t.Stop()
	var term uint64
	seen := map[string]time.Time{} // first seen in this leadership
	for {
		select {
		case <-n.stop:
			return
		case <-t.C:
		}
		if !n.IsLeader() || n.removed.Load() {
			term = 0
			continue
		}
		if cur := n.raft.CurrentTerm(); cur != term {
			term = cur
			clear(seen)
			n.beats.reset()
		}
		n.autopilotOnce(time.Now(), seen)
	}
}

// autopilotOnce gathers the leader's view of its peers and takes one step.
func (n *Node) autopilotOnce(now time.Time, seen map[string]time.Time) {
	n.suffrageMu.Lock()
	defer n.suffrageMu.Unlock()
	servers, err := n.Servers()
	if err != nil {
		return
	}
	st := n.fsm.State()
	peers := make([]peerState, 0, len(servers))
	for _, s := range servers {
		id := string(s.ID)
		if _, ok := seen[id]; !ok {
			seen[id] = now
		}
		down, up := n.beats.state(id, now)
		_, member := st.Members[id]
		peers = append(peers, peerState{ID: id, Voter: s.Suffrage == raft.Voter, Self: id == n.opts.ID,
			Member: member && !st.Removed[id], Since: laterOf(seen[id], up), DownSince: down})
	}
	promote, demote := planVoters(now, peers, voterPolicy{Voters: n.opts.Voters, Grace: n.opts.VoterGrace, Stabilize: n.opts.VoterStabilization})
	switch {
	case promote != "":
		addr := n.addrOf(promote)
		if err := n.raft.AddVoter(raft.ServerID(promote), raft.ServerAddress(addr), 0, n.opts.ApplyTimeout).Error(); err != nil {
			n.log.Warn("autopilot: promoting a non-voter", "id", promote, "err", err)
			return
		}
		n.log.Info("autopilot: promoted a non-voter to voter, fewer voters than --voters were live", "id", promote, "voters", n.opts.Voters)
	case demote != "":
		if err := n.raft.DemoteVoter(raft.ServerID(demote), 0, n.opts.ApplyTimeout).Error(); err != nil {
			n.log.Warn("autopilot: demoting a lost voter", "id", demote, "err", err)
			return
		}
		n.log.Info("autopilot: demoted a voter unreachable past the grace to non-voter; it stays a member", "id", demote,
			"grace", n.opts.VoterGrace.String())
	}
}

func laterOf(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// joinSuffrage is how Join adds a node: a voter while the configuration
// (less any server the join replaces) has fewer than Options.Voters, else
// a non-voter.
func (n *Node) joinSuffrage(servers []raft.Server, id, raftAddr string) raft.ServerSuffrage {
	voters := 0
	for _, s := range servers {
		if s.Suffrage == raft.Voter && string(s.ID) != id && string(s.Address) != raftAddr {
			voters++
		}
	}
	if voters >= n.opts.Voters {
		return raft.Nonvoter
	}
	return raft.Voter
}
