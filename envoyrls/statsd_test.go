package envoyrls

import (
	"bufio"
	"context"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// BenchmarkShouldRateLimitPeerStats is BenchmarkShouldRateLimitPeer with
// the drop-in's stats on: envoyproxy/ratelimit's Prometheus series.
func BenchmarkShouldRateLimitPeerStats(b *testing.B) {
	benchShouldRateLimitWith(b, PeerOptions(), 5, func(s *Server) {
		m := NewMetrics(prometheus.NewRegistry())
		m.EnablePeerStats(0.8)
		s.metrics = m
	})
}

// BenchmarkShouldRateLimitPeerStatsd is the same with statsd on too
// (its flushes go to a port nobody reads).
func BenchmarkShouldRateLimitPeerStatsd(b *testing.B) {
	benchShouldRateLimitWith(b, PeerOptions(), 5, func(s *Server) {
		m := NewMetrics(prometheus.NewRegistry())
		m.EnablePeerStatsWith(PeerStatsOptions{NearRatio: 0.8, Statsd: &StatsdOptions{Addr: "127.0.0.1:9", Protocol: "udp", Interval: time.Second}})
		b.Cleanup(m.Close)
		s.metrics = m
	})
}

// statsdSums reads statsd lines from conn and sums the counters by name
// until done says they are all there (or a generous deadline passes).
func statsdSums(t *testing.T, conn net.PacketConn, done func(map[string]uint64) bool) map[string]uint64 {
	t.Helper()
	sums := map[string]uint64{}
	buf := make([]byte, 65536)
	deadline := time.Now().Add(60 * time.Second)
	for !done(sums) {
		if time.Now().After(deadline) {
			t.Fatalf("statsd: after 60s got %v", sums)
		}
		conn.SetReadDeadline(deadline)
		n, _, err := conn.ReadFrom(buf)
		if err != nil {
			t.Fatalf("statsd: %v (got %v)", err, sums)
		}
		if n > udpPacket {
			t.Errorf("a datagram of %d bytes, over %d", n, udpPacket)
		}
		for _, line := range strings.Split(strings.TrimSuffix(string(buf[:n]), "\n"), "\n") {
			addStatsdLine(t, sums, line)
		}
	}
	return sums
}

// addStatsdLine adds one statsd line to sums: a counter's value to its
// name, one to name|kind for a timer or gauge.
func addStatsdLine(t *testing.T, sums map[string]uint64, line string) {
	t.Helper()
	name, v, ok := strings.Cut(line, ":")
	num, kind, _ := strings.Cut(v, "|")
	x, err := strconv.ParseUint(num, 10, 64)
	if !ok || err != nil || kind == "" {
		t.Fatalf("statsd line %q", line)
	}
	if kind == "c" {
		sums[name] += x
	} else {
		sums[name+"|"+kind]++
	}
}

// TestStatsdPeerNames: the drop-in's stats reach a statsd server over
// UDP under envoyproxy/ratelimit's names, EXTRA_TAGS appended as gostats
// appends them, counters folded between flushes.
func TestStatsdPeerNames(t *testing.T) {
	conn, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	now := t0
	s := newServer(t, cfgYAML, &now)
	s.SetOptions(PeerOptions())
	m := NewMetrics(prometheus.NewRegistry())
	m.EnablePeerStatsWith(PeerStatsOptions{NearRatio: 0.8, Statsd: &StatsdOptions{Addr: conn.LocalAddr().String(),
		Protocol: "udp", Interval: 10 * time.Millisecond, Tags: map[string]string{"env": "test.1", "app": "rl"}}})
	defer m.Close()
	s.metrics = m
	m.ConfigLoad(true)
	ctx := context.Background()
	for i := 0; i < 3; i++ { // a limit of 2: within, near (1.6 → 1), over
		if _, err := s.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*rlcommon.RateLimitDescriptor{desc("k", "a")}}); err != nil {
			t.Fatal(err)
		}
	}
	override := desc("k", "z", "sub", "10.0.0.1")
	override.Limit = &rlcommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 10, Unit: typeSecond}
	if _, err := s.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*rlcommon.RateLimitDescriptor{override}}); err != nil {
		t.Fatal(err)
	}
	s.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "nowhere", Descriptors: []*rlcommon.RateLimitDescriptor{desc("k", "a")}})
	const tags = ".__app=rl.__env=test_1"
	want := map[string]uint64{
		"ratelimit.service.rate_limit.d.k.total_hits" + tags:   3,
		"ratelimit.service.rate_limit.d.k.within_limit" + tags: 2,
		"ratelimit.service.rate_limit.d.k.near_limit" + tags:   1,
		"ratelimit.service.rate_limit.d.k.over_limit" + tags:   1,
		// An override is named by its keys and values, as the peer
		// names it (an address's dots as '_').
		"ratelimit.service.rate_limit.d.k_z.sub_10_0_0_1.total_hits" + tags: 1,
		"ratelimit.service.config_load_success" + tags:                      1,
		"ratelimit.service.rate_limit.nowhere.domain_not_found" + tags:      1,
		"ratelimit_server.ShouldRateLimit.total_requests" + tags:            5,
		"ratelimit_server.ShouldRateLimit.response_time" + tags + "|ms":     5,
	}
	got := statsdSums(t, conn, func(got map[string]uint64) bool {
		for k, v := range want {
			if got[k] < v {
				return false
			}
		}
		return true
	})
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %d, want %d", k, got[k], v)
		}
	}
}

// TestStatsdSendFailure: a statsd server that is not there costs a
// logged failure at each flush, never a blocked call.
func TestStatsdSendFailure(t *testing.T) {
	sd := newStatsd(StatsdOptions{Addr: "127.0.0.1:1", Protocol: "tcp", Interval: time.Hour}, nil)
	c := sd.counter("x")
	c.add(1)
	sd.flush()
	if !sd.failed {
		t.Fatal("a refused connection was not noted")
	}
	c.add(1)
	go sd.run()
	sd.close()
}

// TestPeerPrometheusSeries: the metrics have every series of the peer's
// Prometheus exporter (testdata/peer_prometheus_series.txt, taken from
// its source), of the same type, with the same label names.
func TestPeerPrometheusSeries(t *testing.T) {
	data, err := os.ReadFile("testdata/peer_prometheus_series.txt")
	if err != nil {
		t.Fatal(err)
	}
	now := t0
	s := newServer(t, cfgYAML, &now)
	s.SetOptions(PeerOptions())
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	m.EnablePeerStats(0.8)
	s.metrics = m
	ctx := context.Background()
	for _, d := range []string{"d", "nowhere"} {
		if _, err := s.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: d, Descriptors: []*rlcommon.RateLimitDescriptor{desc("k", "a")}}); err != nil {
			t.Fatal(err)
		}
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]*dto.MetricFamily{}
	for _, f := range families {
		got[f.GetName()] = f
	}
	n := 0
	for _, line := range strings.Split(string(data), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		n++
		fields := strings.Fields(line)
		name, typ, labels := strings.Replace(fields[0], "<domain>", "nowhere", 1), fields[1], fields[2:]
		f := got[name]
		if f == nil {
			t.Errorf("%s: missing", name)
			continue
		}
		if g := strings.ToLower(f.GetType().String()); g != typ {
			t.Errorf("%s: a %s, the peer's a %s", name, g, typ)
		}
		for _, metric := range f.GetMetric() {
			var names []string
			for _, l := range metric.GetLabel() {
				names = append(names, l.GetName())
			}
			if strings.Join(names, " ") != strings.Join(labels, " ") {
				t.Errorf("%s: labels %v, the peer's %v", name, names, labels)
			}
		}
	}
	if n < 12 {
		t.Fatalf("%d series in the list", n)
	}
}

// TestStatsdOverTCP: over TCP, gostats' default and so the drop-in's
// (STATSD_PROTOCOL unset), the same lines reach a statsd server, one a
// line, across the connections the sender opens.
func TestStatsdOverTCP(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	lines := make(chan string, 1024)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				sc := bufio.NewScanner(c)
				for sc.Scan() {
					lines <- sc.Text()
				}
			}()
		}
	}()
	now := t0
	s := newServer(t, cfgYAML, &now)
	s.SetOptions(PeerOptions())
	m := NewMetrics(prometheus.NewRegistry())
	m.EnablePeerStatsWith(PeerStatsOptions{NearRatio: 0.8, Statsd: &StatsdOptions{Addr: ln.Addr().String(),
		Protocol: "tcp", Interval: 10 * time.Millisecond}})
	defer m.Close()
	s.metrics = m
	for i := 0; i < 3; i++ {
		if _, err := s.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*rlcommon.RateLimitDescriptor{desc("k", "a")}}); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]uint64{"ratelimit.service.rate_limit.d.k.total_hits": 3, "ratelimit.service.rate_limit.d.k.over_limit": 1,
		"ratelimit_server.ShouldRateLimit.total_requests": 3}
	got := map[string]uint64{}
	deadline := time.After(60 * time.Second)
	for done := false; !done; {
		select {
		case line := <-lines:
			addStatsdLine(t, got, line)
		case <-deadline:
			t.Fatalf("statsd over TCP: after 60s got %v", got)
		}
		done = true
		for k, v := range want {
			done = done && got[k] >= v
		}
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %d, want %d", k, got[k], v)
		}
	}
}
