package e2e

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"
)

// clusterRoles returns GET /v1/cluster's members as id → role.
func clusterRoles(addr string) (map[string]string, error) {
	resp, err := http.Get("http://" + addr + "/v1/cluster")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var body struct {
		Members []struct{ ID, Role string }
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, m := range body.Members {
		out[m.ID] = m.Role
	}
	return out, nil
}

// TestDeadNodeShowsUnreachable kills the leader of three nodes: every
// survivor's RL.CLUSTER NODES and /v1/cluster call it unreachable (SPEC
// §5), each survivor probing on its own; restarted, it is a follower
// again everywhere. The time each took is logged (the promise: within
// 5 s of the kill).
func TestDeadNodeShowsUnreachable(t *testing.T) {
	ms, peers := threeNodes(t)
	dead := leader(t, ms)
	var alive []*member
	for _, m := range ms {
		if m != dead {
			alive = append(alive, m)
		}
	}
	roles := func(m *member) (nodes, api string) {
		rows, err := nodeRows(m)
		if err == nil && rows[dead.id] != nil {
			nodes = rows[dead.id][4]
		}
		if r, err := clusterRoles(m.p.HTTP); err == nil {
			api = r[dead.id]
		}
		return nodes, api
	}
	for _, m := range alive {
		if nodes, api := roles(m); nodes != "leader" || api != "leader" {
			t.Fatalf("%s sees the leader %s as %q (NODES) and %q (/v1/cluster)", m.id, dead.id, nodes, api)
		}
	}
	dead.p.cmd.Process.Kill()
	<-dead.p.exited
	killed := time.Now()
	for _, m := range alive {
		eventually(t, 30*time.Second, m.id+" to show "+dead.id+" unreachable", func() bool {
			nodes, api := roles(m)
			return nodes == "unreachable" && api == "unreachable"
		})
		t.Logf("%s shows %s unreachable in RL.CLUSTER NODES and /v1/cluster %v after the kill", m.id, dead.id, time.Since(killed).Round(time.Millisecond))
		rows, err := nodeRows(m)
		if err != nil {
			t.Fatal(err)
		}
		for id, r := range rows {
			if id != dead.id && r[4] == "unreachable" {
				t.Fatalf("%s shows the live %s unreachable: %v", m.id, id, rows)
			}
		}
	}
	dead.startWith(t, peers)
	restarted := time.Now()
	for _, m := range append(alive, dead) {
		eventually(t, 30*time.Second, m.id+" to show "+dead.id+" a follower again", func() bool {
			nodes, api := roles(m)
			return nodes == "follower" && api == "follower"
		})
	}
	t.Logf("%s a follower again everywhere %v after its restart", dead.id, time.Since(restarted).Round(time.Millisecond))
}
