package e2e

// Replicas of the drop-in share their limits by forming one cluster, as
// envoyproxy/ratelimit's replicas share theirs through one Redis.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// Three processes run as `ratelimit` (argv[0]), the peer's variables for
// its ports and rules and SLUICE_* variables for the cluster, hold a rule
// of 100 a second together: ShouldRateLimit calls spread round robin over
// the three for 10 s, faster than the limit, are admitted within SPEC §5's
// bound of what one node would admit of the same calls at the same times
// (a fixed window of 100 a second, aligned to the second): admitted −
// ideal − burst ≤ 1 % of ideal, admitted − ideal ≥ −2 % of it, the burst
// being one window's 100.
func TestRatelimitThreeReplicas(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatal("bash is needed to run the binary under the name ratelimit")
	}
	root := t.TempDir()
	dir := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	rules := "domain: shared\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: second, requests_per_unit: 100}\n"
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), []byte(rules), 0o644); err != nil {
		t.Fatal(err)
	}

	var ms []*member
	var peers []string
	for i := 1; i <= 3; i++ {
		m := &member{id: fmt.Sprintf("rl%d", i), resp: "127.0.0.1:" + freePort(t), raft: "127.0.0.1:" + freePort(t), dir: t.TempDir()}
		ms = append(ms, m)
		peers = append(peers, m.id+"="+m.raft+"="+m.resp)
	}
	var cs []*rls
	for _, m := range ms {
		env := []string{"RUNTIME_ROOT=" + root, "RUNTIME_SUBDIRECTORY=ratelimit", "HOST=127.0.0.1", "PORT=0", "GRPC_HOST=127.0.0.1",
			"GRPC_PORT=0", "DEBUG_HOST=127.0.0.1", "DEBUG_PORT=0", "LOG_LEVEL=info", "REDIS_URL=redis:6379",
			"SLUICE_NODE_ID=" + m.id, "SLUICE_RESP_ADDR=" + m.resp, "SLUICE_RAFT_ADDR=" + m.raft, "SLUICE_DATA_DIR=" + m.dir,
			"SLUICE_BOOTSTRAP_PEERS=" + strings.Join(peers, ",")}
		m.p = startWith(t, []string{bash, "-c", `exec -a ratelimit "$0" "$@"`}, env)
		if m.p.GRPC == "" || m.p.Resp != m.resp {
			t.Fatalf("%s: gRPC %q, RESP %q (want %s)", m.id, m.p.GRPC, m.p.Resp, m.resp)
		}
		m.c = client(t, m.resp)
		cs = append(cs, dialRLS(t, m.p.GRPC))
	}
	leader(t, ms)
	eventually(t, 30*time.Second, "every replica to count three members", func() bool {
		for _, m := range ms {
			if m.info(t)["members"] != "3" {
				return false
			}
		}
		return true
	})

	const limit = 100
	req := &rlsv3.RateLimitRequest{Domain: "shared", Descriptors: []*rlcommon.RateLimitDescriptor{desc("tenant", "acme")}}
	admitted, ideal, calls := int64(0), int64(0), 0
	window, used := int64(-1), int64(0)
	var perWindow []string // per window, the replica (0, 1, 2) of each admitted call
	start := time.Now()
	tick := time.NewTicker(4 * time.Millisecond) // up to 250 calls a second
	defer tick.Stop()
	for ; time.Since(start) < 10*time.Second; calls++ {
		<-tick.C
		at := time.Now()
		resp, err := cs[calls%len(cs)].call(req)
		if err != nil {
			t.Fatalf("ShouldRateLimit on %s: %v", ms[calls%len(ms)].id, err)
		}
		if w := at.UnixNano() / int64(time.Second); w != window {
			window, used = w, 0
			perWindow = append(perWindow, "")
		}
		if resp.OverallCode == rlsv3.RateLimitResponse_OK {
			admitted++
			perWindow[len(perWindow)-1] += fmt.Sprint(calls % 3)
		}
		if used < limit {
			used++
			ideal++
		}
	}
	elapsed := time.Since(start)
	t.Logf("%d calls over %v on three replicas: admitted %d, one node's ideal %d (bound %d … %d)", calls,
		elapsed.Round(time.Millisecond), admitted, ideal, ideal-2*ideal/100, ideal+limit+ideal/100)
	if 100*(admitted-ideal-limit) > 1*ideal || 100*(admitted-ideal) < -2*ideal {
		t.Errorf("admitted %d of one node's %d over %v: outside −2 %% … +1 %% (plus one burst)", admitted, ideal, elapsed)
		// Which replica admitted each call, window by window, and how
		// the leases went.
		for i, w := range perWindow {
			t.Logf("window %d: %d admitted: %s", i, len(w), w)
		}
		for _, m := range ms {
			var counts []string
			for _, l := range strings.Split(grepLines(metricsText(t, m.p.HTTP), "sluice_lease_"), "\n") {
				if !strings.HasPrefix(l, "#") {
					counts = append(counts, l)
				}
			}
			t.Logf("%s: %s", m.id, strings.Join(counts, ", "))
		}
	}
}
