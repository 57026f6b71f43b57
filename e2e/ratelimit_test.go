package e2e

// The drop-in (SPEC §11): the binary run as `ratelimit` with
// envoyproxy/ratelimit's environment and files answers as the peer does.
// Each expectation names the test of the peer's it comes from.

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	reflectpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
)

// peerRuntime is the peer's integration test runtime, as its tests set
// RUNTIME_ROOT and RUNTIME_SUBDIRECTORY (defaultSettings in
// test/integration/integration_test.go).
func peerRuntime(t *testing.T) []string {
	t.Helper()
	root, err := filepath.Abs("testdata/ratelimit/runtime/current")
	if err != nil {
		t.Fatal(err)
	}
	return []string{"RUNTIME_ROOT=" + root, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_APPDIRECTORY=config"}
}

// startRatelimit runs the binary as `sluice ratelimit` (via, if given, is
// the launcher) with the peer's variables env, its ports on loopback
// chosen by the OS.
func startRatelimit(t *testing.T, via []string, env ...string) (*proc, *rls) {
	t.Helper()
	base := []string{"HOST=127.0.0.1", "PORT=0", "GRPC_HOST=127.0.0.1", "GRPC_PORT=0", "DEBUG_HOST=127.0.0.1",
		"DEBUG_PORT=0", "LOG_LEVEL=info"}
	args := []string{"--resp-addr", "127.0.0.1:0", "--raft-addr", "127.0.0.1:0", "--data-dir", t.TempDir()}
	if via == nil {
		args = append([]string{"ratelimit"}, args...)
	}
	p := startWith(t, via, append(base, env...), args...).ready()
	if p.GRPC == "" {
		t.Fatal("no gRPC address logged")
	}
	return p, dialRLS(t, p.GRPC)
}

// peerStatus renders a response as the peer's tests compare it: the
// overall code, then each status's code, limit, unit and remaining.
func peerStatus(resp *rlsv3.RateLimitResponse) string {
	var b strings.Builder
	b.WriteString(resp.OverallCode.String())
	for _, st := range resp.Statuses {
		b.WriteString(" | " + st.Code.String())
		if l := st.CurrentLimit; l != nil {
			b.WriteString(" " + itoa(int64(l.RequestsPerUnit)) + "/" + l.Unit.String() + " left " + itoa(int64(st.LimitRemaining)))
		}
	}
	return b.String()
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// wholeSeconds checks that every status's duration_until_reset is whole
// seconds, unit − now % unit at a moment between before and after.
func wholeSeconds(t *testing.T, resp *rlsv3.RateLimitResponse, before, after time.Time) {
	t.Helper()
	for i, st := range resp.Statuses {
		if st.CurrentLimit == nil {
			continue
		}
		unit := int64(map[rlsv3.RateLimitResponse_RateLimit_Unit]int64{rlsv3.RateLimitResponse_RateLimit_SECOND: 1,
			rlsv3.RateLimitResponse_RateLimit_MINUTE: 60, rlsv3.RateLimitResponse_RateLimit_HOUR: 3600,
			rlsv3.RateLimitResponse_RateLimit_DAY: 86400}[st.CurrentLimit.Unit])
		d := st.DurationUntilReset
		lo, hi := unit-after.Unix()%unit, unit-before.Unix()%unit
		if d.GetNanos() != 0 || (d.GetSeconds() != lo && d.GetSeconds() != hi) {
			t.Fatalf("status %d: duration_until_reset %v, want whole seconds %d or %d (src/utils CalculateReset)", i, d, lo, hi)
		}
	}
}

// awayFromMinuteEndAt is awayFromMinuteEnd on the servers' clock now.
func awayFromMinuteEndAt(now func() time.Time, need time.Duration) {
	for {
		left := time.Minute - time.Duration(now().UnixNano()%int64(time.Minute))
		if left > need {
			return
		}
		time.Sleep(left + 10*time.Millisecond)
	}
}

// TestRatelimitIntegrationBasic re-writes testBasicBaseConfig of the
// peer's test/integration/integration_test.go (TestBasicConfig, and its
// makeSimpleRedisSettingsWithStopCacheKeyIncrementWhenOverlimit variant)
// against the binary run as `ratelimit` with the peer's runtime files.
func TestRatelimitIntegrationBasic(t *testing.T) {
	for _, stop := range []bool{false, true} {
		t.Run("stop="+map[bool]string{false: "false", true: "true"}[stop], func(t *testing.T) {
			clock, now := testClockAt(time.Date(2027, 1, 5, 10, 20, 1, 0, time.UTC))
			env := append(peerRuntime(t), clock, "REDIS_URL=localhost:6379")
			if stop {
				env = append(env, "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true")
			}
			p, c := startRatelimit(t, nil, env...)
			if !strings.Contains(p.Log(), "settings ignored (sluice is its own store") || !strings.Contains(p.Log(), "REDIS_URL") {
				t.Fatalf("REDIS_URL not reported as ignored:\n%s", p.Log())
			}
			awayFromMinuteEndAt(now, 40*time.Second)
			peerBasicSequence(t, c, now, stop)
			// The peer's stats under its Prometheus names: every hit of
			// query counted, export's 4 hits over its 6 (2 near it, above
			// 0.8 of 6 rounded down).
			m := metricsText(t, p.HTTP)
			for _, want := range []string{
				`ratelimit_service_rate_limit_total_hits{domain="search",key1="query",key2=""} 30`,
				`ratelimit_service_rate_limit_over_limit{domain="search",key1="export",key2=""} 4`,
				`ratelimit_service_rate_limit_near_limit{domain="search",key1="export",key2=""} 2`,
				`ratelimit_service_rate_limit_within_limit{domain="checkout",key1="cart",key2=""} 1`,
				`ratelimit_service_config_load_success 1`,
			} {
				if !strings.Contains(m, want+"\n") {
					t.Errorf("/metrics lacks %s:\n%s", want, grepLines(m, "ratelimit_service"))
				}
			}
		})
	}
}

func peerBasicSequence(t *testing.T, c *rls, now func() time.Time, stop bool) {
	t.Helper()
	expect := func(domain, want string, ds ...*rlcommon.RateLimitDescriptor) {
		t.Helper()
		before := now()
		resp := c.must(domain, ds...)
		if got := peerStatus(resp); got != want {
			t.Fatalf("%s %v: %s\nwant %s", domain, ds, got, want)
		}
		wholeSeconds(t, resp, before, now())
	}
	expect("nowhere", "OK | OK", desc("colour", "teal"))
	expect("checkout", "OK | OK 40/SECOND left 39", desc("cart", "c-17"))
	// "go over limit for a minute limit": 20 calls against 15 per minute.
	for i := 0; i < 20; i++ {
		want := "OK | OK 15/MINUTE left " + itoa(int64(15-(i+1)))
		if i >= 15 {
			want = "OVER_LIMIT | OVER_LIMIT 15/MINUTE left 0"
		}
		expect("search", want, desc("query", "shoes"))
	}
	// "Limit now against 2 keys in the same domain": export (6 per hour)
	// goes over; query (another value, its own counter) is still charged
	// unless the stop setting is on, which leaves it at its 6 calls.
	for i := 0; i < 10; i++ {
		left1, code, left2 := int64(15-(i+1)), "OK", int64(6-(i+1))
		if i >= 6 {
			code, left2 = "OVER_LIMIT", 0
			if stop {
				left1 = 15 - 6
			}
		}
		want := code + " | OK 15/MINUTE left " + itoa(left1) + " | " + code + " 6/HOUR left " + itoa(left2)
		expect("search", want, desc("query", "boots"), desc("export", "boots"))
	}
}

// TestRatelimitAsArgv0 runs the binary under the name ratelimit (the
// image's /bin/ratelimit link) with no subcommand, with the peer's header
// settings (test/service/ratelimit_test.go
// TestServiceWithCustomRatelimitHeaders: the three headers of the
// descriptor over its limit).
func TestRatelimitAsArgv0(t *testing.T) {
	bash := requireTool(t, "bash")
	// One window for both calls: the servers' minute starts at :01.
	clock, now := testClockAt(time.Date(2027, 1, 5, 10, 20, 1, 0, time.UTC))
	env := append(peerRuntime(t), clock, "LIMIT_RESPONSE_HEADERS_ENABLED=true", "LIMIT_LIMIT_HEADER=A-Ratelimit-Limit",
		"LIMIT_REMAINING_HEADER=A-Ratelimit-Remaining", "LIMIT_RESET_HEADER=A-Ratelimit-Reset")
	_, c := startRatelimit(t, []string{bash, "-c", `exec -a ratelimit "$0" "$@"`}, env...)
	awayFromMinuteEndAt(now, 15*time.Second)
	resp := c.must("checkout", desc("single_use", "coupon"), desc("colour", "teal"))
	if got := strings.Join(headers(resp), " "); !strings.HasPrefix(got, "A-Ratelimit-Limit: 1 A-Ratelimit-Remaining: 0 A-Ratelimit-Reset: ") {
		t.Fatalf("headers %q", got)
	}
	resp = c.must("checkout", desc("single_use", "coupon"), desc("colour", "teal"))
	if got := peerStatus(resp); got != "OVER_LIMIT | OVER_LIMIT 1/MINUTE left 0 | OK" {
		t.Fatalf("second call: %s", got)
	}
	if got := strings.Join(headers(resp), " "); !strings.HasPrefix(got, "A-Ratelimit-Limit: 1 A-Ratelimit-Remaining: 0 A-Ratelimit-Reset: ") {
		t.Fatalf("headers when over: %q", got)
	}
}

// TestRatelimitRejectedRules: rules the peer rejects at start leave the
// node up, answering as the peer without configuration
// (test/service/ratelimit_test.go TestInitialLoadError: "no rate limit
// configuration loaded"); mended files are put in force.
func TestRatelimitRejectedRules(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "config")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bad := "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1.5}\n"
	if err := writeFile(filepath.Join(dir, "d.yaml"), bad); err != nil {
		t.Fatal(err)
	}
	p, c := startRatelimit(t, nil, "RUNTIME_ROOT="+root)
	_, err := c.call(&rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*rlcommon.RateLimitDescriptor{desc("k", "v")}})
	if status.Code(err) != codes.Unknown || status.Convert(err).Message() != "no rate limit configuration loaded" {
		t.Fatalf("with rejected rules: %v", err)
	}
	if !strings.Contains(p.Log(), "requests_per_unit must be an integer") {
		t.Fatalf("the reason is not logged:\n%s", p.Log())
	}
	good := strings.Replace(bad, "1.5", "1", 1)
	if err := writeFile(filepath.Join(dir, "d.yaml"), good); err != nil {
		t.Fatal(err)
	}
	waitAnswer(t, c, "d", "OK | OK 1/MINUTE left 0", desc("k", "v"))
}

// waitAnswer asks until the answer is want (rules put in force by a
// reload), failing after a deadline.
func waitAnswer(t *testing.T, c *rls, domain, want string, ds ...*rlcommon.RateLimitDescriptor) {
	t.Helper()
	eventually(t, 10*time.Second, "the answer "+want, func() bool {
		resp, err := c.call(&rlsv3.RateLimitRequest{Domain: domain, Descriptors: ds})
		return err == nil && peerStatus(resp) == want
	})
}

var debugListening = regexp.MustCompile(`msg="ratelimit debug listening" addr=(\S+)`)

// TestRatelimitHTTPEndpoints: the peer's POST /json (its
// test/server/server_impl_test.go TestJsonHandler: 400 "Bad Request" for
// what does not parse or is refused, 200 or 429 with the response in
// protobuf JSON), /healthcheck ("OK") and the debug port's /rlconfig.
func TestRatelimitHTTPEndpoints(t *testing.T) {
	clock, now := testClockAt(time.Date(2027, 1, 5, 10, 20, 1, 0, time.UTC))
	p, _ := startRatelimit(t, nil, append(peerRuntime(t), clock)...)
	awayFromMinuteEndAt(now, 15*time.Second) // both /json calls in one window
	post := func(body string) (int, string, string) {
		t.Helper()
		resp, err := http.Post("http://"+p.HTTP+"/json", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("Content-Type"), string(b)
	}
	for _, bad := range []string{"", "}", `{"domain": "nowhere"}`} {
		if code, ct, body := post(bad); code != 400 || ct != "text/plain; charset=utf-8" || body != "Bad Request\n" {
			t.Fatalf("POST /json %q: %d %q %q", bad, code, ct, body)
		}
	}
	req := `{"domain": "checkout", "descriptors": [{"entries": [{"key": "single_use", "value": "via-json"}]}]}`
	for i, want := range []struct {
		code    int
		overall string
	}{{200, "OK"}, {429, "OVER_LIMIT"}} {
		code, ct, body := post(req)
		var resp rlsv3.RateLimitResponse
		if err := protojson.Unmarshal([]byte(body), &resp); err != nil || code != want.code || ct != "application/json" ||
			resp.OverallCode.String() != want.overall || resp.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 1 {
			t.Fatalf("call %d: %d %s %s (%v)", i, code, ct, body, err)
		}
	}
	// Healthy once the node has elected itself (as its /readyz).
	eventually(t, 30*time.Second, "/healthcheck 200 OK", func() bool {
		code, body := httpGet(t, "http://"+p.HTTP+"/healthcheck")
		return code == 200 && body == "OK"
	})
	m := debugListening.FindStringSubmatch(p.Log())
	if m == nil {
		t.Fatalf("no debug listener logged:\n%s", p.Log())
	}
	code, body := httpGet(t, "http://"+m[1]+"/rlconfig")
	if want := "checkout.single_use: unit=MINUTE requests_per_unit=1, shadow_mode: false, quota_mode: false\n"; code != 200 || !strings.Contains(body, want) ||
		!strings.Contains(body, "search.archive: unit=DAY requests_per_unit=30") {
		t.Fatalf("/rlconfig: %d\n%s", code, body)
	}
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestRatelimitReflection: `grpcurl -plaintext host:port list` works, with
// no files: the reflection service lists the rate limit service and
// describes it (what grpcurl's list and describe ask).
func TestRatelimitReflection(t *testing.T) {
	p, _ := startRatelimit(t, nil, peerRuntime(t)...)
	conn, err := grpc.NewClient(p.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := reflectpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ask := func(req *reflectpb.ServerReflectionRequest) *reflectpb.ServerReflectionResponse {
		t.Helper()
		if err := stream.Send(req); err != nil {
			t.Fatal(err)
		}
		resp, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	var names []string
	for _, s := range ask(&reflectpb.ServerReflectionRequest{MessageRequest: &reflectpb.ServerReflectionRequest_ListServices{}}).GetListServicesResponse().GetService() {
		names = append(names, s.Name)
	}
	got := strings.Join(names, " ")
	for _, want := range []string{"envoy.service.ratelimit.v3.RateLimitService", "grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection"} {
		if !strings.Contains(got, want) {
			t.Fatalf("services %q lack %s", got, want)
		}
	}
	fd := ask(&reflectpb.ServerReflectionRequest{MessageRequest: &reflectpb.ServerReflectionRequest_FileContainingSymbol{
		FileContainingSymbol: "envoy.service.ratelimit.v3.RateLimitService"}}).GetFileDescriptorResponse()
	if fd == nil || len(fd.FileDescriptorProto) == 0 {
		t.Fatal("no file descriptor for the rate limit service")
	}
}

// configMap lays out a Kubernetes ConfigMap volume in dir: the files in a
// timestamped directory, ..data a link to it, and each file a link
// through ..data; swap replaces them as the kubelet does (the new
// directory, then ..data renamed over in one step, then the old removed).
type configMap struct {
	t       *testing.T
	dir     string
	version int
	current string
}

func (c *configMap) swap(files map[string]string) {
	c.t.Helper()
	c.version++
	ts := filepath.Join(c.dir, "..2027_01_05_10_00_0"+strconv.Itoa(c.version))
	if err := os.MkdirAll(ts, 0o755); err != nil {
		c.t.Fatal(err)
	}
	for name, body := range files {
		if err := writeFile(filepath.Join(ts, name), body); err != nil {
			c.t.Fatal(err)
		}
		if _, err := os.Lstat(filepath.Join(c.dir, name)); os.IsNotExist(err) {
			if err := os.Symlink(filepath.Join("..data", name), filepath.Join(c.dir, name)); err != nil {
				c.t.Fatal(err)
			}
		}
	}
	tmp := filepath.Join(c.dir, "..data_tmp")
	if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
		c.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(c.dir, "..data")); err != nil {
		c.t.Fatal(err)
	}
	if c.current != "" {
		os.RemoveAll(c.current)
	}
	c.current = ts
}

// TestRatelimitConfigMapSwap: rules mounted from a ConfigMap follow its
// updates (the ..data link swapped) within 2 s; an update that does not
// load keeps the rules in force, is logged and sets the metric.
func TestRatelimitConfigMapSwap(t *testing.T) {
	root := t.TempDir()
	cm := &configMap{t: t, dir: filepath.Join(root, "config")}
	if err := os.MkdirAll(cm.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	rules := func(n int) string {
		return "domain: cm\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: " + strconv.Itoa(n) + "}\n"
	}
	cm.swap(map[string]string{"rules.yaml": rules(5)})
	p, c := startRatelimit(t, nil, "RUNTIME_ROOT="+root, "RUNTIME_IGNOREDOTFILES=true", "RUNTIME_WATCH_ROOT=false")
	if got := peerStatus(c.must("cm", desc("k", "a"))); got != "OK | OK 5/HOUR left 4" {
		t.Fatalf("before the swap: %s", got)
	}
	cm.swap(map[string]string{"rules.yaml": rules(7)})
	eventually(t, 2*time.Second, "the swapped rules in force", func() bool {
		return strings.Contains(peerStatus(c.must("cm", desc("k", "probe"))), " 7/HOUR ")
	})
	cm.swap(map[string]string{"rules.yaml": rules(7) + "    unknown_key: 1\n"})
	eventually(t, 10*time.Second, "the broken update counted", func() bool {
		m := metricsText(t, p.HTTP)
		return strings.Contains(m, "sluice_envoy_config_last_load_ok 0") && strings.Contains(m, `sluice_envoy_config_loads_total{result="error"} 1`)
	})
	if got := peerStatus(c.must("cm", desc("k", "b"))); got != "OK | OK 7/HOUR left 6" {
		t.Fatalf("after a broken update: %s, want the rules in force", got)
	}
	if !strings.Contains(p.Log(), "envoy configuration not reloaded: the rules in force stay") || !strings.Contains(p.Log(), "unknown key 'unknown_key'") {
		t.Fatalf("the broken update is not logged with its reason:\n%s", p.Log())
	}
}

// TestRatelimitReloadConfig re-writes testConfigReload of the peer's
// test/integration/integration_test.go (TestBasicReloadConfig): a rule
// file copied into the config directory is put in force, and taken out
// of force when removed.
func TestRatelimitReloadConfig(t *testing.T) {
	root := t.TempDir()
	if err := os.CopyFS(root, os.DirFS("testdata/ratelimit/runtime/current")); err != nil {
		t.Fatal(err)
	}
	_, c := startRatelimit(t, nil, "RUNTIME_ROOT="+root, "RUNTIME_SUBDIRECTORY=ratelimit")
	if got := peerStatus(c.must("late", desc("closed", "door"))); got != "OK | OK" {
		t.Fatalf("before the reload: %s", got)
	}
	b, err := os.ReadFile(filepath.Join(root, "ratelimit/reload_rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "ratelimit/config/reload_rules.yaml"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	waitAnswer(t, c, "late", "OVER_LIMIT | OVER_LIMIT 0/SECOND left 0", desc("closed", "door"))
	if got := peerStatus(c.must("late", desc("probe", "p1"))); got != "OK | OK 25/SECOND left 24" {
		t.Fatalf("after the reload: %s", got)
	}
	if err := os.Remove(filepath.Join(root, "ratelimit/config/reload_rules.yaml")); err != nil {
		t.Fatal(err)
	}
	waitAnswer(t, c, "late", "OK | OK", desc("closed", "door"))
}

// TestRatelimitShareThreshold re-writes testShareThreshold of the peer's
// test/integration/integration_test.go: values matched by a
// share_threshold pattern share one counter; without it each value has
// its own.
func TestRatelimitShareThreshold(t *testing.T) {
	clock, _ := testClockAt(time.Date(2027, 1, 5, 10, 1, 0, 0, time.UTC)) // far from the hour's end
	_, c := startRatelimit(t, nil, append(peerRuntime(t), clock)...)
	for i, v := range []string{"uploads/a.png", "uploads/b.png", "uploads/c/d.gif", "uploads/e"} {
		if got, want := peerStatus(c.must("shared-paths", desc("bucket", v))), "OK | OK 4/HOUR left "+itoa(int64(3-i)); got != want {
			t.Fatalf("%s: %s, want %s", v, got, want)
		}
	}
	if got := peerStatus(c.must("shared-paths", desc("bucket", "uploads/f.txt"))); got != "OVER_LIMIT | OVER_LIMIT 4/HOUR left 0" {
		t.Fatalf("uploads/f.txt after 4 other uploads/ values: %s", got)
	}
	for i := 0; i < 6; i++ {
		v := "own/" + strconv.Itoa(i)
		if got := peerStatus(c.must("shared-paths", desc("own", v))); got != "OK | OK 4/HOUR left 3" {
			t.Fatalf("%s: %s", v, got)
		}
	}
}

// TestRatelimitHealthyWithAtLeastOneConfig re-writes
// TestServiceHealthStatus and TestServiceHealthStatusAtLeastOneConfigLoaded
// of the peer's test/service/ratelimit_test.go: with no rules, healthy
// unless HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED, which waits for rules of
// some domain.
func TestRatelimitHealthyWithAtLeastOneConfig(t *testing.T) {
	for _, atLeastOne := range []bool{false, true} {
		root := t.TempDir()
		dir := filepath.Join(root, "config")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		p, _ := startRatelimit(t, nil, "RUNTIME_ROOT="+root, "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED="+strconv.FormatBool(atLeastOne))
		// The node first elects itself (its /readyz): health includes it.
		eventually(t, 30*time.Second, "the node ready", func() bool {
			code, _ := httpGet(t, "http://"+p.HTTP+"/readyz")
			return code == 200
		})
		code, _ := httpGet(t, "http://"+p.HTTP+"/healthcheck")
		if want := map[bool]int{false: 200, true: 500}[atLeastOne]; code != want {
			t.Fatalf("at least one %v, no rules: /healthcheck %d, want %d", atLeastOne, code, want)
		}
		if err := writeFile(filepath.Join(dir, "a.yaml"), "domain: a\n"); err != nil {
			t.Fatal(err)
		}
		eventually(t, 10*time.Second, "healthy once rules load", func() bool {
			code, body := httpGet(t, "http://"+p.HTTP+"/healthcheck")
			return code == 200 && body == "OK"
		})
	}
}
