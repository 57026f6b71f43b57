package deploy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"net/http"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluice-rl/sluice/server"
	"github.com/sluice-rl/sluice/testsupport/resptest"
	"github.com/sluice-rl/sluice/testsupport/testkit"
	"github.com/sluice-rl/sluice/testsupport/testnode"
)

// startNode runs an in-process node on loopback ports chosen by the OS.
// maxclients is 1 so that a second client is refused and the rejection
// series exists.
func startNode(t *testing.T) *server.Node {
	t.Helper()
	n := testnode.Start(t, testnode.Options{Config: func(c *server.Config) { c.MaxClients = 1; c.GRPCAddr = "127.0.0.1:0" }})
	// Ready once it has also recorded itself as a member: that write
	// would otherwise move the commit index under /readyz.
	testkit.WaitFor(t, 10*time.Second, "the node to be ready", func() bool {
		return len(n.Raft.State().Members) > 0 && n.Raft.Ready()
	})
	return n
}

// exposition is a parsed /metrics page.
type exposition struct {
	types  map[string]string                     // family → type (lower case)
	help   map[string]string                     // family → help
	series map[string]map[string]map[string]bool // sample name → label → values
}

// parseExposition reads a /metrics page with Prometheus' own parser (which
// also insists on names PromQL takes unquoted), and lists the samples as a
// query sees them: a histogram as name_bucket (with le), name_sum and
// name_count, a summary as name (with quantile), name_sum and name_count.
func parseExposition(t *testing.T, body string) exposition {
	t.Helper()
	p := expfmt.NewTextParser(model.LegacyValidation)
	families, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("/metrics: %v", err)
	}
	e := exposition{types: map[string]string{}, help: map[string]string{}, series: map[string]map[string]map[string]bool{}}
	add := func(sample string, m *dto.Metric, extra string, values ...string) {
		labels := e.series[sample]
		if labels == nil {
			labels = map[string]map[string]bool{}
			e.series[sample] = labels
		}
		set := func(k, v string) {
			if labels[k] == nil {
				labels[k] = map[string]bool{}
			}
			labels[k][v] = true
		}
		for _, lp := range m.GetLabel() {
			set(lp.GetName(), lp.GetValue())
		}
		for _, v := range values {
			set(extra, v)
		}
	}
	bound := func(f float64) string {
		if math.IsInf(f, +1) {
			return "+Inf"
		}
		return strconv.FormatFloat(f, 'g', -1, 64)
	}
	for name, mf := range families {
		e.types[name] = strings.ToLower(mf.GetType().String())
		e.help[name] = mf.GetHelp()
		for _, m := range mf.GetMetric() {
			switch mf.GetType() {
			case dto.MetricType_HISTOGRAM:
				les := []string{"+Inf"}
				for _, b := range m.GetHistogram().GetBucket() {
					les = append(les, bound(b.GetUpperBound()))
				}
				add(name+"_bucket", m, "le", les...)
				add(name+"_sum", m, "")
				add(name+"_count", m, "")
			case dto.MetricType_SUMMARY:
				var qs []string
				for _, q := range m.GetSummary().GetQuantile() {
					qs = append(qs, bound(q.GetQuantile()))
				}
				add(name, m, "quantile", qs...)
				add(name+"_sum", m, "")
				add(name+"_count", m, "")
			default:
				add(name, m, "")
			}
		}
	}
	return e
}

var (
	metricRE  = regexp.MustCompile(`\b((?:sluice|go|process)_[A-Za-z0-9_]+)\b\s*(\{[^}]*\})?`)
	matcherRE = regexp.MustCompile(`([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"`)
	groupRE   = regexp.MustCompile(`\b(?:by|without)\s*\(([^)]*)\)`)
	legendRE  = regexp.MustCompile(`\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}`)
	lvRE      = regexp.MustCompile(`label_values\(\s*([A-Za-z_:][A-Za-z0-9_:]*)\s*,\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)`)
	quantRE   = regexp.MustCompile(`histogram_quantile\(.*?\b([A-Za-z_:][A-Za-z0-9_:]*_bucket)\b`)
)

// targetLabels are added by Prometheus at scrape time, not by sluice.
var targetLabels = map[string]bool{"instance": true, "job": true}

// checkExpr checks the sluice, Go and process metrics of one PromQL
// expression against a node's exposition: names, label names, and the
// values of equality matchers. It returns the labels the result may carry.
func checkExpr(t *testing.T, e exposition, where, expr string) map[string]bool {
	t.Helper()
	labels := maps.Clone(targetLabels)
	for _, m := range metricRE.FindAllStringSubmatch(expr, -1) {
		name, sel := m[1], m[2]
		series, ok := e.series[name]
		if !ok {
			t.Errorf("%s: %s is not exposed by a running node (histograms are name_bucket, _sum, _count)", where, name)
			continue
		}
		for l := range series {
			labels[l] = true
		}
		for _, mm := range matcherRE.FindAllStringSubmatch(sel, -1) {
			l, op, v := mm[1], mm[2], mm[3]
			if targetLabels[l] {
				continue
			}
			vals, ok := series[l]
			if !ok {
				t.Errorf("%s: %s has no label %q", where, name, l)
			} else if op == "=" && !strings.Contains(v, "$") && !vals[v] {
				t.Errorf("%s: %s{%s=%q}: the node exposes %s values %v", where, name, l, v, l, slices.Sorted(maps.Keys(vals)))
			}
		}
	}
	for _, g := range groupRE.FindAllStringSubmatch(expr, -1) {
		for _, l := range strings.Split(g[1], ",") {
			if l = strings.TrimSpace(l); l != "" && !labels[l] {
				t.Errorf("%s: groups by %q, a label none of its metrics has", where, l)
			}
		}
	}
	for _, m := range lvRE.FindAllStringSubmatch(expr, -1) {
		if !labels[m[2]] {
			t.Errorf("%s: label_values of %q, a label %s does not have", where, m[2], m[1])
		}
	}
	for _, m := range quantRE.FindAllStringSubmatch(expr, -1) {
		if family := strings.TrimSuffix(m[1], "_bucket"); e.types[family] != "histogram" {
			t.Errorf("%s: histogram_quantile over %s, but %s is a %s", where, m[1], family, e.types[family])
		}
	}
	return labels
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func TestObservability(t *testing.T) {
	cf := loadCompose(t)
	dashboards := dashboardFiles(t, cf)
	_, _, ruleFiles := promSetup(t, cf)
	df := loadDockerfile(t)
	bin := sluiceBinary(t)

	n := startNode(t)
	// One admitted acquire, and one client over maxclients, so that the
	// labelled series the dashboards read exist.
	c := resptest.Dial(t, n.Server.RespAddr())
	if got := c.Do("RL.ACQUIRE", "deploy-test", "RATE", "10", "PER", "second"); !strings.HasPrefix(got, "[1 ") {
		t.Fatalf("RL.ACQUIRE: %s", got)
	}
	// A first-level budget with a quota, a reservation in flight and an
	// Envoy request: the quota, reservation and Envoy panels' series.
	for _, call := range [][]string{
		{"RL.BUDGET", "SET", "deploy", "RATE", "10", "QUOTA", "100", "PER", "day"},
		{"RL.RESERVE", "deploy", "COST", "1"},
	} {
		if got := c.Do(call...); strings.HasPrefix(got, "-") {
			t.Fatalf("%v: %s", call, got)
		}
	}
	envoyRequest(t, n.Server.GRPCAddr())
	extra := resptest.Dial(t, n.Server.RespAddr())
	if got, err := extra.TryRead(5 * time.Second); err != nil || !strings.Contains(got, "max number of clients") {
		t.Fatalf("a client over maxclients 1: %q, %v", got, err)
	}

	for _, p := range []string{"/healthz", "/readyz"} {
		if code, body := httpGet(t, "http://"+n.Server.HTTPAddr()+p); code != http.StatusOK {
			t.Errorf("GET %s: %d %s", p, code, body)
		}
	}
	code, body := httpGet(t, "http://"+n.Server.HTTPAddr()+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("GET /metrics: %d\n%s", code, body)
	}
	e := parseExposition(t, body)

	t.Run("dashboards", func(t *testing.T) {
		used := map[string]bool{}
		for _, file := range dashboards {
			for _, q := range dashboardQueries(t, file) {
				labels := checkExpr(t, e, q.where, q.expr)
				for _, m := range legendRE.FindAllStringSubmatch(q.legend, -1) {
					if !labels[m[1]] {
						t.Errorf("%s: legend {{%s}} is not a label of its result", q.where, m[1])
					}
				}
				for _, m := range metricRE.FindAllStringSubmatch(q.expr, -1) {
					used[m[1]] = true
				}
			}
			checkRaftStateMappings(t, e, file)
		}
		for _, want := range []string{"sluice_acquire_total", "sluice_command_duration_seconds_bucket", "sluice_raft_state", "go_memstats_heap_alloc_bytes", "process_cpu_seconds_total",
			"sluice_quota_used", "sluice_quota_limit", "sluice_reservations_in_flight", "sluice_lease_requests_total", "sluice_envoy_descriptors_total", "sluice_top_keys"} {
			if !used[want] {
				t.Errorf("no dashboard shows %s", want)
			}
		}
	})

	t.Run("alert rules", func(t *testing.T) {
		for _, r := range alertRules(t, ruleFiles) {
			checkExpr(t, e, r.where, r.expr)
		}
	})

	// The image's HEALTHCHECK, run as the image runs it: the HTTP address
	// comes from the image's SLUICE_HTTP_ADDR (all interfaces).
	t.Run("healthcheck", func(t *testing.T) {
		hc := dockerHealthcheck(t, df)
		httpVar := server.EnvName("http-addr")
		run := func(httpAddr string, extra ...string) error {
			cmd := exec.Command(bin, append(slices.Clone(hc[1:]), extra...)...)
			for k, v := range df.env {
				cmd.Env = append(cmd.Env, k+"="+v)
			}
			cmd.Env = append(cmd.Env, httpVar+"="+httpAddr)
			out, err := cmd.CombinedOutput()
			if err != nil {
				return fmt.Errorf("%v: %s", err, out)
			}
			return nil
		}
		host := hostOf(df.env[httpVar])
		port := portOf(t, "http-addr", n.Server.HTTPAddr())
		if err := run(net.JoinHostPort(host, port)); err != nil {
			t.Errorf("HEALTHCHECK %q with %s=%s: %v", hc, httpVar, net.JoinHostPort(host, port), err)
		}
		if err := run(net.JoinHostPort(host, port), "--ready"); err != nil {
			t.Errorf("HEALTHCHECK %q --ready: %v", hc, err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		closed := ln.Addr().String()
		ln.Close()
		if err := run(net.JoinHostPort(host, portOf(t, "closed", closed))); err == nil {
			t.Errorf("HEALTHCHECK passes with no node listening")
		}
	})
}

// checkRaftStateMappings checks that the value mappings of panels showing
// sluice_raft_state, and comparisons such as sluice_raft_state == 2, agree
// with the metric's help text ("0 follower, 1 candidate, …").
func checkRaftStateMappings(t *testing.T, e exposition, file string) {
	t.Helper()
	roles := map[string]string{}
	for _, m := range regexp.MustCompile(`(\d+) ([a-z]+)`).FindAllStringSubmatch(e.help["sluice_raft_state"], -1) {
		roles[m[1]] = m[2]
	}
	if roles["2"] != "leader" {
		t.Fatalf("sluice_raft_state help %q does not say which value is leader", e.help["sluice_raft_state"])
	}
	cmpRE := regexp.MustCompile(`sluice_raft_state\b(?:\{[^}]*\})?\s*==\s*(\d+)`)
	d := loadDashboard(t, file)
	for _, p := range allPanels(d) {
		where := fmt.Sprintf("%s panel %q", file, p["title"])
		raw, _ := json.Marshal(p["targets"])
		exprs := string(raw)
		if !strings.Contains(exprs, "sluice_raft_state") {
			continue
		}
		for _, m := range cmpRE.FindAllStringSubmatch(exprs, -1) {
			if roles[m[1]] != "leader" {
				t.Errorf("%s: compares sluice_raft_state with %s, which is %q", where, m[1], roles[m[1]])
			}
		}
		fc, _ := p["fieldConfig"].(map[string]any)
		defs, _ := fc["defaults"].(map[string]any)
		mappings, _ := defs["mappings"].([]any)
		for _, mp := range mappings {
			opts, _ := object(t, where, mp)["options"].(map[string]any)
			for value, o := range opts {
				text, _ := object(t, where, o)["text"].(string)
				if roles[value] != strings.ToLower(text) {
					t.Errorf("%s: maps %s to %q; the node says %s is %q", where, value, text, value, roles[value])
				}
			}
		}
	}
}

// envoyRequest sends one ShouldRateLimit to the node's gRPC address.
func envoyRequest(t *testing.T, addr string) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	d := &rlcommon.RateLimitDescriptor{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "tenant", Value: "a"}}}
	if _, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "deploy", Descriptors: []*rlcommon.RateLimitDescriptor{d}}); err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
}
