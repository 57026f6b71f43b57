package e2e

import (
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestRatelimitStatsd: run as ratelimit with the peer's statsd settings,
// the node sends its stats to a statsd server (here a UDP socket of the
// test) under envoyproxy/ratelimit's names, EXTRA_TAGS appended as
// gostats appends them: export's 10 hits against its 6 per hour are 4
// over the limit and 2 near it (past 0.8 of 6, rounded down).
func TestRatelimitStatsd(t *testing.T) {
	conn, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	clock, _ := testClockAt(time.Date(2027, 1, 5, 10, 20, 1, 0, time.UTC))
	env := append(peerRuntime(t), clock, "STATSD_HOST=127.0.0.1", "STATSD_PORT="+port(conn.LocalAddr().String()),
		"STATSD_PROTOCOL=udp", "STATS_FLUSH_INTERVAL=50ms", "EXTRA_TAGS=env:e2e,zone:a.1")
	_, c := startRatelimit(t, nil, env...)
	for i := 0; i < 10; i++ {
		c.must("search", desc("export", "boots"))
	}
	const tags = ".__env=e2e.__zone=a_1"
	want := map[string]uint64{
		"ratelimit.service.rate_limit.search.export.total_hits" + tags:   10,
		"ratelimit.service.rate_limit.search.export.over_limit" + tags:   4,
		"ratelimit.service.rate_limit.search.export.near_limit" + tags:   2,
		"ratelimit.service.rate_limit.search.export.within_limit" + tags: 6,
		"ratelimit.service.config_load_success" + tags:                   1,
		"ratelimit_server.ShouldRateLimit.total_requests" + tags:         10,
	}
	sums := map[string]uint64{}
	buf := make([]byte, 65536)
	deadline := time.Now().Add(90 * time.Second)
	for {
		done := true
		for k, v := range want {
			done = done && sums[k] >= v
		}
		if done {
			break
		}
		conn.SetReadDeadline(deadline)
		n, _, err := conn.ReadFrom(buf)
		if err != nil {
			t.Fatalf("statsd: %v; got %v", err, sums)
		}
		for _, line := range strings.Split(strings.TrimSuffix(string(buf[:n]), "\n"), "\n") {
			name, rest, _ := strings.Cut(line, ":")
			v, kind, _ := strings.Cut(rest, "|")
			if kind != "c" {
				continue
			}
			x, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				t.Fatalf("statsd line %q", line)
			}
			sums[name] += x
		}
	}
	for k, v := range want {
		if sums[k] != v {
			t.Errorf("%s: %d, want %d", k, sums[k], v)
		}
	}
}
