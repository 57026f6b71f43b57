package e2e

// The drop-in's xDS configuration source (CONFIG_TYPE=GRPC_XDS_SOTW): a
// go-control-plane management server in the test process pushes
// RateLimitConfig resources to the binary run as `ratelimit`, as
// envoyproxy/ratelimit's xDS integration test does
// (test/integration/xds_sotw_integration_test.go).

import (
	"context"
	"net"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// xdsServer is a go-control-plane management server: snapshots pushed by
// the test, and what the clients sent back.
type xdsServer struct {
	cache cachev3.SnapshotCache
	addr  string

	mu     sync.Mutex
	auth   []string // the authorization header of each stream
	nodes  []string // node id and zone metadata of each request
	acks   []string // version_info of each ACK
	nacks  []string // version_info and error_detail of each NACK
	opened int
}

// startXDSServer serves ADS on addr ("127.0.0.1:0" for any port).
func startXDSServer(t *testing.T, addr string) *xdsServer {
	t.Helper()
	x := &xdsServer{cache: cachev3.NewSnapshotCache(false, cachev3.IDHash{}, nil)}
	cb := serverv3.CallbackFuncs{
		StreamOpenFunc: func(ctx context.Context, id int64, typ string) error {
			md, _ := metadata.FromIncomingContext(ctx)
			x.mu.Lock()
			defer x.mu.Unlock()
			x.opened++
			x.auth = append(x.auth, strings.Join(md.Get("authorization"), ","))
			return nil
		},
		StreamRequestFunc: func(id int64, req *discoverygrpc.DiscoveryRequest) error {
			x.mu.Lock()
			defer x.mu.Unlock()
			x.nodes = append(x.nodes, req.GetNode().GetId()+" zone="+req.GetNode().GetMetadata().GetFields()["zone"].GetStringValue())
			switch {
			case req.GetErrorDetail() != nil:
				x.nacks = append(x.nacks, req.GetVersionInfo()+": "+req.GetErrorDetail().GetMessage())
			case req.GetResponseNonce() != "":
				x.acks = append(x.acks, req.GetVersionInfo())
			}
			return nil
		},
	}
	ctx, cancel := context.WithCancel(context.Background())
	g := grpc.NewServer()
	discoverygrpc.RegisterAggregatedDiscoveryServiceServer(g, serverv3.NewServer(ctx, x.cache, cb))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	x.addr = ln.Addr().String()
	go g.Serve(ln)
	t.Cleanup(func() { g.Stop(); cancel() })
	return x
}

// push sets the rules node gets: a new state of the world.
func (x *xdsServer) push(t *testing.T, node, version string, cfgs ...*rlsconfv3.RateLimitConfig) {
	t.Helper()
	res := make([]types.Resource, len(cfgs))
	for i, c := range cfgs {
		res[i] = c
	}
	snap, err := cachev3.NewSnapshot(version, map[resource.Type][]types.Resource{resource.RateLimitConfigType: res})
	if err != nil {
		t.Fatal(err)
	}
	if err := x.cache.SetSnapshot(context.Background(), node, snap); err != nil {
		t.Fatal(err)
	}
}

func (x *xdsServer) seen() (auth, nodes, acks, nacks []string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	return append([]string(nil), x.auth...), append([]string(nil), x.nodes...), append([]string(nil), x.acks...), append([]string(nil), x.nacks...)
}

// rlConfig is one domain's rules: key → requests per hour, each key with
// no value (a counter per value).
func rlConfig(domain string, perHour map[string]uint32) *rlsconfv3.RateLimitConfig {
	c := &rlsconfv3.RateLimitConfig{Name: domain, Domain: domain}
	for k, n := range perHour {
		c.Descriptors = append(c.Descriptors, &rlsconfv3.RateLimitDescriptor{Key: k,
			RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_HOUR, RequestsPerUnit: n}})
	}
	return c
}

var xdsServing = regexp.MustCompile(`msg="ratelimit: serving after the first xDS configuration" http=(\S*) grpc=(\S+)`)

// xdsEnv is the drop-in's environment for an xDS server at addr, with
// quick reconnection.
func xdsEnv(addr, node string, extra ...string) []string {
	return append([]string{"CONFIG_TYPE=GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL=" + addr, "CONFIG_GRPC_XDS_NODE_ID=" + node,
		"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL=200ms", "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL=200ms"}, extra...)
}

// startXDSRatelimit runs the binary as `ratelimit` with env; unless
// FORCE_START_WITHOUT_INITIAL_CONFIG, it waits for the ports opened after
// the first xDS configuration.
func startXDSRatelimit(t *testing.T, env ...string) *proc {
	t.Helper()
	base := []string{"HOST=127.0.0.1", "PORT=0", "GRPC_HOST=127.0.0.1", "GRPC_PORT=0", "DEBUG_HOST=127.0.0.1", "DEBUG_PORT=0", "LOG_LEVEL=info"}
	p := startWith(t, nil, append(base, env...), "ratelimit", "--resp-addr", "127.0.0.1:0", "--raft-addr", "127.0.0.1:0", "--data-dir", t.TempDir())
	return p
}

// waitXDSServing waits for the ports held for the first xDS
// configuration and records them.
func waitXDSServing(t *testing.T, p *proc) {
	t.Helper()
	eventually(t, 60*time.Second, "the ports held for the first xDS configuration to open", func() bool {
		m := xdsServing.FindStringSubmatch(p.Log())
		if m != nil {
			p.HTTP, p.GRPC = m[1], m[2]
		}
		return m != nil
	})
}

// limitOf returns the requests per unit of the first status, 0 when the
// descriptor is not limited.
func limitOf(resp *rlsv3.RateLimitResponse) uint32 {
	if l := resp.GetStatuses()[0].GetCurrentLimit(); l != nil {
		return l.RequestsPerUnit
	}
	return 0
}

// Pushed rules are in force within 2 s of each push; a push that does not
// load is NACKed and the rules in force stay; the node identifies itself
// and sends the headers it is given.
func TestRatelimitXDS(t *testing.T) {
	clock, _ := testClockAt(time.Date(2027, 1, 5, 10, 20, 1, 0, time.UTC))
	x := startXDSServer(t, "127.0.0.1:0")
	x.push(t, "rl-e2e", "v1", rlConfig("shop", map[string]uint32{"user": 3}))
	p := startXDSRatelimit(t, xdsEnv(x.addr, "rl-e2e", clock, "CONFIG_GRPC_XDS_NODE_METADATA=zone=eu-1",
		"CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS=authorization:Bearer t0ken")...)
	waitXDSServing(t, p)
	c := dialRLS(t, p.GRPC)
	if got := codeList(c.sequence(4, "shop", desc("user", "a"))...); got != "[OK OK OK OVER_LIMIT]" {
		t.Fatalf("v1, 3 an hour: %s", got)
	}
	if resp := c.must("shop", desc("path", "/a")); limitOf(resp) != 0 {
		t.Fatalf("path limited before v2: %v", resp)
	}

	// v2: user 5 an hour, and a new key.
	pushed := time.Now()
	x.push(t, "rl-e2e", "v2", rlConfig("shop", map[string]uint32{"user": 5, "path": 2}))
	eventually(t, 30*time.Second, "v2 in force", func() bool { return limitOf(c.must("shop", desc("path", "/a"))) == 2 })
	if took := time.Since(pushed); took > 2*time.Second {
		t.Fatalf("v2 in force %v after the push, want within 2s", took)
	}
	if got := codeList(c.sequence(6, "shop", desc("user", "b"))...); got != "[OK OK OK OK OK OVER_LIMIT]" {
		t.Fatalf("v2, 5 an hour: %s", got)
	}

	// v3 does not load: NACKed with the reason, v2 stays.
	bad := rlConfig("shop", map[string]uint32{"user": 1})
	bad.Descriptors[0].RateLimit.Unit = rlsconfv3.RateLimitUnit_UNKNOWN
	x.push(t, "rl-e2e", "v3", bad)
	eventually(t, 30*time.Second, "the NACK of v3", func() bool { _, _, _, nacks := x.seen(); return len(nacks) > 0 })
	_, _, _, nacks := x.seen()
	if want := `v2: RateLimitConfig "shop": descriptor 'shop.user': invalid rate limit unit 'unknown'`; !strings.HasPrefix(nacks[0], want) {
		t.Fatalf("NACK %q, want %q…", nacks[0], want)
	}
	if resp := c.must("shop", desc("user", "c")); limitOf(resp) != 5 {
		t.Fatalf("after the NACK, user=c: %v, want v2's 5 an hour", resp)
	}
	if !strings.Contains(p.Log(), "configuration refused (NACK): the rules in force stay") {
		t.Fatalf("the refusal is not logged:\n%s", p.Log())
	}

	// v4 empties the domain list: nothing is limited, requests are
	// answered (a configuration without domains is not no
	// configuration).
	x.push(t, "rl-e2e", "v4")
	eventually(t, 30*time.Second, "v4 in force", func() bool { return limitOf(c.must("shop", desc("path", "/a"))) == 0 })

	eventually(t, 30*time.Second, "the ACK of v4", func() bool { _, _, acks, _ := x.seen(); return len(acks) == 3 })
	auth, nodes, acks, _ := x.seen()
	if len(auth) == 0 || auth[0] != "Bearer t0ken" {
		t.Fatalf("stream authorization headers %q", auth)
	}
	if len(nodes) == 0 || nodes[0] != "rl-e2e zone=eu-1" {
		t.Fatalf("nodes %q", nodes)
	}
	if got := strings.Join(acks, ","); got != "v1,v2,v4" {
		t.Fatalf("ACKs %s, want v1,v2,v4", got)
	}
	m := metricsText(t, p.HTTP)
	for _, want := range []string{"ratelimit_service_config_load_success 3", "ratelimit_service_config_load_error 1"} {
		if !strings.Contains(m, want+"\n") {
			t.Errorf("/metrics lacks %s:\n%s", want, grepLines(m, "config_load"))
		}
	}
}

// With no xDS server at start: as envoyproxy/ratelimit, the node serves
// Envoy's ports only once the server's first configuration has come
// (FORCE_START_WITHOUT_INITIAL_CONFIG unset), or at once, answering "no
// rate limit configuration loaded" until it comes (set).
func TestRatelimitXDSWithoutServerAtStart(t *testing.T) {
	for _, force := range []bool{false, true} {
		t.Run(map[bool]string{false: "wait", true: "force"}[force], func(t *testing.T) {
			addr := "127.0.0.1:" + freePort(t)
			grpcPort, httpPort := freePort(t), freePort(t)
			env := xdsEnv(addr, "rl-late", "GRPC_PORT="+grpcPort, "PORT="+httpPort)
			if force {
				env = append(env, "FORCE_START_WITHOUT_INITIAL_CONFIG=true")
			}
			p := startXDSRatelimit(t, env...)
			if !force {
				if p.GRPC != `""` || p.HTTP != `""` { // slog writes an empty address ""
					t.Fatalf("gRPC %q and HTTP %q served before any configuration", p.GRPC, p.HTTP)
				}
				for _, port := range []string{grpcPort, httpPort} {
					if c, err := net.DialTimeout("tcp", "127.0.0.1:"+port, time.Second); err == nil {
						c.Close()
						t.Fatalf("port %s accepts connections before any configuration", port)
					}
				}
			} else {
				c := dialRLS(t, p.GRPC)
				_, err := c.call(&rlsv3.RateLimitRequest{Domain: "shop", Descriptors: []*rlcommon.RateLimitDescriptor{desc("user", "a")}})
				if status.Code(err) != codes.Unknown || !strings.Contains(err.Error(), "no rate limit configuration loaded") {
					t.Fatalf("before any configuration: %v", err)
				}
				// Serving once the node is ready (its Raft has a leader: a
				// moment on a busy machine), configuration or not.
				eventually(t, 60*time.Second, "health SERVING before any configuration", func() bool {
					h, err := c.health.Check(context.Background(), &healthpb.HealthCheckRequest{})
					return err == nil && h.Status == healthpb.HealthCheckResponse_SERVING
				})
			}

			x := startXDSServer(t, addr)
			x.push(t, "rl-late", "1", rlConfig("shop", map[string]uint32{"user": 2}))
			if !force {
				waitXDSServing(t, p)
				if p.GRPC != "127.0.0.1:"+grpcPort || p.HTTP != "127.0.0.1:"+httpPort {
					t.Fatalf("served on gRPC %s, HTTP %s; want the ports set", p.GRPC, p.HTTP)
				}
			}
			c := dialRLS(t, p.GRPC)
			eventually(t, 60*time.Second, "the first configuration in force", func() bool {
				resp, err := c.call(&rlsv3.RateLimitRequest{Domain: "shop", Descriptors: []*rlcommon.RateLimitDescriptor{desc("path", "/")}})
				return err == nil && resp.OverallCode == rlsv3.RateLimitResponse_OK
			})
			if resp := c.must("shop", desc("user", "a")); limitOf(resp) != 2 {
				t.Fatalf("user=a: %v, want 2 an hour", resp)
			}
		})
	}
}
