package server

import (
	"sort"
	"strconv"

	"github.com/sluice-rl/sluice/commands"
	"github.com/sluice-rl/sluice/httpapi"
)

// views answers the HTTP endpoints that look at the cluster: the merged
// top keys (asked of every member, as RL.TOP does) and the members.
func (s *Server) views() httpapi.Views {
	return httpapi.Views{
		Top: func(by string) httpapi.Top {
			r := s.env.Top(by, false)
			return httpapi.Top{Summary: r.Summary, Nodes: r.Nodes, Unreachable: r.Unreachable}
		},
		Cluster: s.clusterStatus,
	}
}

// clusterStatus is RL.CLUSTER INFO and NODES for GET /v1/cluster.
func (s *Server) clusterStatus() (httpapi.ClusterStatus, error) {
	cl := s.env.Cluster
	if cl == nil {
		return httpapi.ClusterStatus{}, nil
	}
	st := cl.Stats()
	leaderID, leaderAddr, _ := cl.Leader()
	role := cl.Role()
	if cl.Removed() {
		role = "removed"
	}
	u := func(k string) uint64 { v, _ := strconv.ParseUint(st[k], 10, 64); return v }
	out := httpapi.ClusterStatus{NodeID: cl.ID(), Role: role, LeaderID: leaderID, LeaderAddr: leaderAddr,
		Term: u("term"), CommitIndex: u("commit_index"), AppliedIndex: cl.AppliedIndex(), SyncLagMs: -1,
		Members: []httpapi.ClusterMember{}}
	if lag := s.svc.SyncLag(cl.ID(), s.env.Started); lag >= 0 {
		out.SyncLagMs = lag / 1e6
	}
	voters, err := cl.Voters()
	if err != nil {
		return out, err
	}
	members := cl.State().Members
	for _, v := range voters {
		m := httpapi.ClusterMember{ID: v.ID, RespAddr: members[v.ID].RespAddr, RaftAddr: v.RaftAddr, Suffrage: "voter",
			Role: commands.MemberRole(v, cl.ID(), leaderID, cl.Role())}
		if !v.Voter {
			m.Suffrage = "nonvoter"
		}
		out.Members = append(out.Members, m)
	}
	sort.Slice(out.Members, func(i, j int) bool { return out.Members[i].ID < out.Members[j].ID })
	return out, nil
}
