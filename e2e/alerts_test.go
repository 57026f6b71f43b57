package e2e

// The shipped Prometheus files, checked with Prometheus itself: promtool
// accepts them, and every alert of deploy/prometheus-alerts.yml becomes
// true (pending or firing) in a real Prometheus that scrapes real nodes,
// the first time its condition happens after a fresh start. An alert on
// increase() of a series that appears only at its first event would never
// see that first event: these tests catch it.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	alertRulesFile = "../deploy/prometheus-alerts.yml"
	// alertRulesTestFile holds promtool unit tests of alertRulesFile.
	alertRulesTestFile = "../deploy/prometheus-alerts.test.yml"
	promConfigFile     = "../deploy/prometheus.yml"
	composeFile        = "../docker-compose.yml"
)

// requireProm returns the path of a Prometheus program (prometheus,
// promtool). Missing, it fails the test when SLUICE_REQUIRE_TOOLS is set
// (as in CI, which installs Debian's prometheus package) and skips it,
// saying why, otherwise.
func requireProm(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	if os.Getenv("SLUICE_REQUIRE_TOOLS") != "" {
		t.Fatalf("%s is not installed (apt-get install prometheus); SLUICE_REQUIRE_TOOLS is set", name)
	}
	t.Skipf("%s is not installed: apt-get install prometheus to run this test (CI does)", name)
	return ""
}

// composeMounts returns the prometheus service's bind mounts in
// docker-compose.yml as container path → repository path.
func composeMounts(t *testing.T) map[string]string {
	t.Helper()
	src, err := os.ReadFile(composeFile)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	re := regexp.MustCompile(`^\s*-\s*\./(\S+?):(/etc/prometheus/\S+?)(?::ro)?\s*$`)
	for _, line := range strings.Split(string(src), "\n") {
		if m := re.FindStringSubmatch(line); m != nil {
			out[m[2]] = filepath.Join("..", m[1])
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s: no bind mounts under /etc/prometheus", composeFile)
	}
	return out
}

// TestPromtoolAcceptsShippedFiles runs promtool on the shipped rules, and
// on the shipped configuration as the compose file mounts it: its rule
// file path is the container's, so promtool checks a copy with the rule
// paths mapped back through the compose mounts.
func TestPromtoolAcceptsShippedFiles(t *testing.T) {
	promtool := requireProm(t, "promtool")
	run := func(args ...string) {
		t.Helper()
		out, err := exec.Command(promtool, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	run("check", "rules", alertRulesFile)
	// The rules' unit tests (the usage alerts fire when they should).
	run("test", "rules", alertRulesTestFile)

	src, err := os.ReadFile(promConfigFile)
	if err != nil {
		t.Fatal(err)
	}
	cfg := string(src)
	mapped := 0
	for container, repo := range composeMounts(t) {
		abs, err := filepath.Abs(repo)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(cfg, container) {
			cfg = strings.ReplaceAll(cfg, container, abs)
			mapped++
		}
	}
	if !strings.Contains(cfg, "rule_files:") || mapped == 0 {
		t.Fatalf("%s: no rule file that docker-compose.yml mounts", promConfigFile)
	}
	copyPath := filepath.Join(t.TempDir(), "prometheus.yml")
	if err := os.WriteFile(copyPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	run("check", "config", copyPath)
}

// prom is a Prometheus server of one test: it scrapes targets every
// second under the job name of deploy/prometheus.yml and evaluates the
// shipped alert rules every second.
type prom struct {
	t    *testing.T
	addr string
	cmd  *exec.Cmd
	done chan error
	log  *strings.Builder
}

func scrapeJob(t *testing.T) string {
	t.Helper()
	src, err := os.ReadFile(promConfigFile)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*-\s*job_name:\s*(\S+)\s*$`).FindStringSubmatch(string(src))
	if m == nil {
		t.Fatalf("%s: no job_name", promConfigFile)
	}
	return m[1]
}

func startProm(t *testing.T, targets ...string) *prom {
	t.Helper()
	bin := requireProm(t, "prometheus")
	rules, err := filepath.Abs(alertRulesFile)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	quoted := make([]string, len(targets))
	for i, a := range targets {
		quoted[i] = fmt.Sprintf("%q", a)
	}
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 900ms
  evaluation_interval: 1s
rule_files:
  - %q
scrape_configs:
  - job_name: %s
    static_configs:
      - targets: [%s]
`, rules, scrapeJob(t), strings.Join(quoted, ", "))
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	p := &prom{t: t, addr: "127.0.0.1:" + freePort(t), done: make(chan error, 1), log: &strings.Builder{}}
	p.cmd = exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+p.addr, "--log.level=warn")
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("prometheus log:\n%s", p.log.String())
		}
	})
	eventually(t, 30*time.Second, "prometheus to be ready", func() bool {
		resp, err := http.Get("http://" + p.addr + "/-/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return p
}

// api GETs a Prometheus API path and decodes its data into v.
func (p *prom) api(path string, v any) error {
	resp, err := http.Get("http://" + p.addr + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var body struct {
		Status string          `json:"status"`
		Data   json.RawMessage `json:"data"`
		Error  string          `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return err
	}
	if body.Status != "success" {
		return fmt.Errorf("%s: %s", path, body.Error)
	}
	return json.Unmarshal(body.Data, v)
}

// query evaluates an instant PromQL query: one value per series, keyed by
// its labels.
func (p *prom) query(q string) (map[string]string, error) {
	var data struct {
		Result []struct {
			Metric map[string]string `json:"metric"`
			Value  []any             `json:"value"`  // an instant vector's
			Values [][]any           `json:"values"` // a range vector's
		} `json:"result"`
	}
	if err := p.api("/api/v1/query?query="+url.QueryEscape(q), &data); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, r := range data.Result {
		delete(r.Metric, "__name__")
		if len(r.Value) == 2 {
			out[fmt.Sprint(r.Metric)] = fmt.Sprint(r.Value[1])
			continue
		}
		var vals []string
		for _, v := range r.Values {
			vals = append(vals, fmt.Sprint(v[1]))
		}
		out[fmt.Sprint(r.Metric)] = strings.Join(vals, " ")
	}
	return out, nil
}

// alerts returns the alerting rules Prometheus loaded: name → expression.
func (p *prom) alerts(t *testing.T) map[string]string {
	t.Helper()
	var data struct {
		Groups []struct {
			Rules []struct{ Name, Query, Type string } `json:"rules"`
		} `json:"groups"`
	}
	if err := p.api("/api/v1/rules", &data); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, g := range data.Groups {
		for _, r := range g.Rules {
			if r.Type == "alerting" {
				out[r.Name] = r.Query
			}
		}
	}
	return out
}

// active returns the alerts that are pending or firing: their expression
// is true (pending waits out the rule's "for").
func (p *prom) active() (map[string]string, error) {
	var data struct {
		Alerts []struct {
			Labels map[string]string `json:"labels"`
			State  string            `json:"state"`
		} `json:"alerts"`
	}
	if err := p.api("/api/v1/alerts", &data); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, a := range data.Alerts {
		out[a.Labels["alertname"]] = a.State
	}
	return out, nil
}

// scraped waits until every target has been scraped at least twice, so
// that a counter's value before the incident is in the database, as it is
// for a node that has run a while.
func (p *prom) scraped(t *testing.T, targets int) {
	t.Helper()
	eventually(t, 30*time.Second, "two scrapes of every target", func() bool {
		r, err := p.query("count_over_time(up[1m]) >= 2")
		return err == nil && len(r) == targets
	})
}

// quiet checks that none of the alerts is pending or firing yet.
func (p *prom) quiet(t *testing.T, names ...string) {
	t.Helper()
	act, err := p.active()
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if act[n] != "" {
			t.Fatalf("%s is %s before its condition was provoked", n, act[n])
		}
	}
}

// becomes waits until the alert is pending or firing; on a timeout it
// shows what the alert's expression's series held.
func (p *prom) becomes(t *testing.T, name, expr string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		act, err := p.active()
		if err == nil && act[name] != "" {
			return
		}
		if time.Now().After(deadline) {
			var detail strings.Builder
			for _, m := range regexp.MustCompile(`\b(?:sluice|process|up)[A-Za-z0-9_]*(?:\{[^}]*\})?`).FindAllString(expr, -1) {
				r, err := p.query(m + "[2m]")
				fmt.Fprintf(&detail, "\n  %s: %v %v", m, r, err)
			}
			t.Fatalf("%s did not become true within 60s after its condition: %s%s", name, expr, detail.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// alertCluster starts three nodes with an HTTP listener each; extra is
// added to every node's flags, with %d in a value replaced by the node's
// number (1–3). It returns the nodes and a client of each, authenticated
// when extra sets --requirepass.
func alertCluster(t *testing.T, extra ...string) ([]*proc, []*redis.Client) {
	t.Helper()
	raft, resp := make([]string, 3), make([]string, 3)
	var peers []string
	for i := range raft {
		raft[i], resp[i] = "127.0.0.1:"+freePort(t), "127.0.0.1:"+freePort(t)
		peers = append(peers, fmt.Sprintf("n%d=%s=%s", i+1, raft[i], resp[i]))
	}
	nodes := make([]*proc, 3)
	clients := make([]*redis.Client, 3)
	for i := range nodes {
		args := []string{"--node-id", fmt.Sprintf("n%d", i+1), "--resp-addr", resp[i], "--raft-addr", raft[i],
			"--http-addr", "127.0.0.1:0", "--data-dir", t.TempDir(), "--bootstrap-peers", strings.Join(peers, ",")}
		pass := ""
		for j := 0; j+1 < len(extra); j += 2 {
			v := extra[j+1]
			if strings.Contains(v, "%d") {
				v = fmt.Sprintf(v, i+1)
			}
			args = append(args, extra[j], v)
			if extra[j] == "--requirepass" {
				pass = v
			}
		}
		nodes[i] = start(t, args...)
		clients[i] = redis.NewClient(&redis.Options{Addr: resp[i], Password: pass, MaxRetries: -1, ReadTimeout: 10 * time.Second})
		t.Cleanup(func() { clients[i].Close() })
	}
	return nodes, clients
}

// TestAlertRulesFireOnFirstIncident provokes the condition of every alert
// in deploy/prometheus-alerts.yml once, on nodes started for it, and waits
// for the alert to become pending or firing in Prometheus.
func TestAlertRulesFireOnFirstIncident(t *testing.T) {
	requireProm(t, "prometheus")
	// Each alert is provoked by one scenario; an alert with no scenario
	// fails the test, so a new rule needs one.
	provoked := map[string]bool{}
	var rules map[string]string
	scenarios := 0 // run; fewer than all when -run picks some
	mark := func(p *prom, names ...string) {
		scenarios++
		if rules == nil {
			rules = p.alerts(t)
		}
		for _, n := range names {
			if _, ok := rules[n]; !ok {
				t.Errorf("%s is not an alert of %s", n, alertRulesFile)
			}
			provoked[n] = true
		}
	}

	// A node allowed 48 descriptors and 30 clients: 30 clients take it over
	// 80% of its descriptors, and a 31st is refused.
	t.Run("connections", func(t *testing.T) {
		n := startVia(t, []string{"sh", "-c", `ulimit -n 48 && exec "$0" "$@"`}, "--resp-addr", "127.0.0.1:0",
			"--http-addr", "127.0.0.1:0", "--raft-addr", "127.0.0.1:0", "--data-dir", t.TempDir(), "--maxclients", "30")
		p := startProm(t, n.HTTP)
		mark(p, "SluiceFileDescriptors", "SluiceMaxClients")
		p.scraped(t, 1)
		p.quiet(t, "SluiceFileDescriptors", "SluiceMaxClients")
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for i := 0; i < 30; i++ {
			c, err := net.Dial("tcp", n.Resp)
			if err != nil {
				t.Fatal(err)
			}
			conns = append(conns, c)
			if _, err := c.Write([]byte("PING\r\n")); err != nil {
				t.Fatal(err)
			}
			if line, err := bufio.NewReader(c).ReadString('\n'); err != nil || line != "+PONG\r\n" {
				t.Fatalf("client %d: %q %v", i+1, line, err)
			}
		}
		extra, err := net.Dial("tcp", n.Resp)
		if err != nil {
			t.Fatal(err)
		}
		extra.SetReadDeadline(time.Now().Add(10 * time.Second))
		if line, err := bufio.NewReader(extra).ReadString('\n'); err != nil || !strings.Contains(line, "max number of clients") {
			t.Fatalf("client 31: %q %v", line, err)
		}
		extra.Close()
		p.becomes(t, "SluiceMaxClients", rules["SluiceMaxClients"])
		p.becomes(t, "SluiceFileDescriptors", rules["SluiceFileDescriptors"])
	})

	// A node at the smallest --max-buckets given more buckets that are not
	// full than it may keep: it drops some that still hold consumption.
	t.Run("buckets", func(t *testing.T) {
		n := single(t, "--max-buckets", "1000")
		p := startProm(t, n.HTTP)
		mark(p, "SluiceBucketsUnderPressure")
		p.scraped(t, 1)
		p.quiet(t, "SluiceBucketsUnderPressure")
		c := client(t, n.Resp)
		ctx := context.Background()
		pipe := c.Pipeline()
		for i := 0; i < 3000; i++ {
			pipe.Do(ctx, "RL.ACQUIRE", fmt.Sprintf("pressure:%d", i), "RATE", "10", "PER", "day")
		}
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatal(err)
		}
		p.becomes(t, "SluiceBucketsUnderPressure", rules["SluiceBucketsUnderPressure"])
	})

	// Three nodes, two stopped: the survivor knows no leader, and the
	// stopped nodes do not answer /metrics.
	t.Run("quorum lost", func(t *testing.T) {
		nodes, clients := alertCluster(t)
		p := startProm(t, nodes[0].HTTP, nodes[1].HTTP, nodes[2].HTTP)
		mark(p, "SluiceDown", "SluiceNoLeader")
		p.scraped(t, 3)
		p.quiet(t, "SluiceDown", "SluiceNoLeader")
		waitReady(t, clients[2])
		for _, n := range nodes[:2] {
			if err := n.stop(); err != nil {
				t.Fatal(err)
			}
		}
		p.becomes(t, "SluiceDown", rules["SluiceDown"])
		p.becomes(t, "SluiceNoLeader", rules["SluiceNoLeader"])
	})

	// Three nodes whose passwords differ: Raft works (it does not use the
	// password), but what a follower forwards to the leader with its own
	// password is refused: its quota reservations (and counts). It keeps
	// answering calls with a quota, refusing those it holds no units for.
	t.Run("quota counts refused", func(t *testing.T) {
		nodes, clients := alertCluster(t, "--requirepass", "pw-%d")
		p := startProm(t, nodes[0].HTTP, nodes[1].HTTP, nodes[2].HTTP)
		mark(p, "SluiceQuotaCountsNotCommitted")
		p.scraped(t, 3)
		p.quiet(t, "SluiceQuotaCountsNotCommitted")
		ctx := context.Background()
		var follower *redis.Client
		eventually(t, 30*time.Second, "a follower that knows its leader", func() bool {
			for _, c := range clients {
				if inf, err := clusterInfo(c); err == nil && inf["role"] == "follower" && inf["leader_id"] != "" {
					follower = c
					return true
				}
			}
			return false
		})
		// The follower cannot ask the leader for its commit index (the
		// leader refuses its login): it answers LOADING until Raft's own
		// view has said it is caught up for a while (docs/cluster.md).
		var err error
		eventually(t, 30*time.Second, "the follower to decide", func() bool {
			err = follower.Do(ctx, "RL.ACQUIRE", "quota-alert", "RATE", "1000", "QUOTA", "1000000", "PER", "day").Err()
			return err == nil || !strings.HasPrefix(err.Error(), "LOADING ")
		})
		if err != nil {
			t.Fatal(err)
		}
		p.becomes(t, "SluiceQuotaCountsNotCommitted", rules["SluiceQuotaCountsNotCommitted"])
	})

	// A first-level budget at 95% of its quota after RL.QUOTA SET.
	t.Run("quota nearly used", func(t *testing.T) {
		n := single(t)
		p := startProm(t, n.HTTP)
		mark(p, "SluiceQuotaNearlyUsed")
		c := client(t, n.Resp)
		do(t, c, "RL.BUDGET", "SET", "acme", "RATE", "1000", "QUOTA", "100", "PER", "day")
		p.scraped(t, 1)
		p.quiet(t, "SluiceQuotaNearlyUsed")
		if got := do(t, c, "RL.QUOTA", "SET", "acme", "USED", "95"); got != int64(1) {
			t.Fatalf("RL.QUOTA SET: %v", got)
		}
		p.becomes(t, "SluiceQuotaNearlyUsed", rules["SluiceQuotaNearlyUsed"])
	})

	// Not provoked: a node more than 100 entries behind its own commit
	// index while it still serves /metrics needs a stalled state machine,
	// which a healthy binary does not have. Its series are checked: both
	// sides of the subtraction exist from the start on every node, so the
	// expression has a value (0) for each, not an empty result.
	t.Run("apply lag", func(t *testing.T) {
		n := single(t)
		p := startProm(t, n.HTTP)
		mark(p, "SluiceApplyLag")
		p.scraped(t, 1)
		expr := rules["SluiceApplyLag"]
		lhs, _, ok := strings.Cut(expr, ">")
		if !ok {
			t.Fatalf("SluiceApplyLag: %q has no threshold", expr)
		}
		r, err := p.query(lhs)
		if err != nil || len(r) != 1 {
			t.Fatalf("%s: %v %v; want one series", lhs, r, err)
		}
		for _, v := range r {
			if v != "0" {
				t.Errorf("%s on a fresh idle node: %s, want 0", lhs, v)
			}
		}
	})

	if t.Failed() {
		return
	}
	if scenarios < 6 {
		t.Logf("%d of 6 scenarios ran (-run): whether every alert has one is checked when all run", scenarios)
		return
	}
	var missing []string
	for name := range rules {
		if !provoked[name] {
			missing = append(missing, name)
		}
	}
	slices.Sort(missing)
	if len(missing) > 0 {
		t.Errorf("no scenario provokes %v: add one to this test", missing)
	}
}
