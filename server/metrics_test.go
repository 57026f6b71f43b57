package server

import (
	"bufio"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/raftfsm"
	"github.com/sluice-rl/sluice/testsupport/resptest"
	"github.com/sluice-rl/sluice/testsupport/testkit"
)

// scrape returns the sample values of /metrics keyed by "name{labels}".
func scrape(t *testing.T, addr string) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("bad sample %q", line)
		}
		out[line[:i]] = v
	}
	return out
}

func TestMetricsCountWhatHappened(t *testing.T) {
	n := startNode(t, nil)
	s := n.Server
	fixClock(s)
	c := resptest.Dial(t, s.RespAddr())
	c.Do("RL.BUDGET", "SET", "acme/api", "RATE", "30", "PER", "minute")
	for i := 0; i < 50; i++ {
		c.Do("RL.ACQUIRE", "inline:k", "RATE", "1", "PER", "hour", "BURST", "20", "COST", "2")
	}
	for i := 0; i < 40; i++ {
		c.Do("RL.ACQUIRE", "acme/api")
	}
	for i := 0; i < 5; i++ {
		c.Do("CL.THROTTLE", "cell", "2", "1", "60")
	}
	c.Do("RL.ACQUIRE", "x", "RATE", "0") // an error: not an acquire
	m := scrape(t, s.HTTPAddr())
	want := map[string]float64{
		`sluice_commands_total{cmd="rl.acquire"}`:                 91,
		`sluice_commands_total{cmd="cl.throttle"}`:                5,
		`sluice_commands_total{cmd="rl.budget"}`:                  1,
		`sluice_command_duration_seconds_count{cmd="rl.acquire"}`: 91,
		`sluice_acquire_total{budget="inline",result="allowed"}`:  10 + 3,
		`sluice_acquire_total{budget="inline",result="denied"}`:   40 + 2,
		`sluice_acquire_total{budget="acme",result="allowed"}`:    30,
		`sluice_acquire_total{budget="acme",result="denied"}`:     10,
		`sluice_tokens_consumed_total{budget="inline"}`:           20 + 3,
		`sluice_tokens_consumed_total{budget="acme"}`:             30,
		`sluice_buckets`:                           3,
		`sluice_connected_clients`:                 1,
		`sluice_raft_state`:                        2,
		`sluice_raft_leader`:                       1,
		`sluice_sync_lag_seconds`:                  -1,
		`sluice_raft_apply_duration_seconds_count`: m[`sluice_raft_apply_duration_seconds_count`], // present
		`sluice_raft_commit_index`:                 m[`sluice_raft_applied_index`],
	}
	for k, v := range want {
		got, ok := m[k]
		if !ok || got != v {
			t.Errorf("%s = %v (present %v), want %v", k, got, ok, v)
		}
	}
	for _, name := range []string{"sluice_raft_term", "sluice_raft_applied_index", "go_goroutines", "process_resident_memory_bytes", "sluice_waiting_clients"} {
		if _, ok := m[name]; !ok {
			t.Errorf("%s missing", name)
		}
	}
	if m[`sluice_raft_apply_duration_seconds_count`] < 1 {
		t.Error("no raft apply observed")
	}
	// INFO reads the same figures.
	info := c.Do("INFO", "stats")
	if !strings.Contains(info, "acquire_allowed:43") || !strings.Contains(info, "acquire_denied:52") {
		t.Errorf("INFO stats: %s", info)
	}
}

func TestReadyzWaitsForALeader(t *testing.T) {
	// Joining nobody: this node never learns a leader.
	n := startTestNode(t, testNode{Config: func(c *Config) { c.Join = "127.0.0.1:1" },
		Raft: func(o *raftfsm.Options) { o.ApplyTimeout = time.Second }})
	status := func(n *Node, path string) int {
		resp, err := http.Get("http://" + n.Server.HTTPAddr() + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	// This node can never elect itself (it waits to join), so the answer
	// must be 503 whenever we ask.
	if got := status(n, "/readyz"); got != 503 {
		t.Fatalf("/readyz without a leader: %d", got)
	}
	if got := status(n, "/healthz"); got != 200 {
		t.Fatalf("/healthz: %d", got)
	}
	// Without a leader it has not caught up with any cluster: RL.ACQUIRE
	// answers LOADING (for --loading-timeout, 30 s here); writes wait for a
	// leader up to the apply timeout, then say TRYAGAIN.
	c := resptest.Dial(t, n.Server.RespAddr())
	if got := c.Do("RL.ACQUIRE", "k", "RATE", "5"); got != "-LOADING sluice is loading the dataset in memory" {
		t.Fatalf("acquire without a leader, before --loading-timeout: %s", got)
	}
	if got := c.Do("RL.BUDGET", "SET", "a", "RATE", "5"); got != "-TRYAGAIN no leader" {
		t.Fatalf("write without a leader: %s", got)
	}
	// Past --loading-timeout, a node that never caught up decides from the
	// tree it has.
	late := startTestNode(t, testNode{Config: func(c *Config) { c.Join = "127.0.0.1:1"; c.LoadingTimeout = time.Second },
		Raft: func(o *raftfsm.Options) { o.ApplyTimeout = time.Second }})
	lc := resptest.Dial(t, late.Server.RespAddr())
	var got string
	testkit.WaitFor(t, 30*time.Second, "acquire past --loading-timeout", func() bool {
		got = lc.Do("RL.ACQUIRE", "k", "RATE", "5")
		return got != "-LOADING sluice is loading the dataset in memory"
	})
	if !strings.HasPrefix(got, "[1 4 5 0") {
		t.Fatalf("acquire without a leader, past --loading-timeout: %s", got)
	}
	single := startNode(t, nil)
	if got := status(single, "/readyz"); got != 200 {
		t.Fatalf("/readyz with a leader: %d", got)
	}
}

// Command counts are kept per connection and folded when scraped: under
// 16 connections sending at once, half of them closing on the way, every
// scrape's counts only grow, each histogram's count equals its counter,
// and once they are done /metrics counts exactly the commands sent.
func TestCommandCountsEqualWhatWasSentAcrossConnections(t *testing.T) {
	n := startNode(t, nil)
	s := n.Server
	const conns, each = 16, 300
	before := scrape(t, s.HTTPAddr())
	key := func(cmd string) string { return `sluice_commands_total{cmd="` + cmd + `"}` }
	done := make(chan struct{})
	errs := make(chan error, conns)
	clients := make([]*resptest.Client, conns)
	for i := range clients {
		clients[i] = resptest.Dial(t, s.RespAddr())
	}
	for i, c := range clients {
		go func(i int) {
			defer c.Conn.Close()
			for k := 0; k < each; k++ {
				cmd := []string{"PING"}
				if k%3 == 0 {
					cmd = []string{"RL.ACQUIRE", "cmdstats:" + strconv.Itoa(i), "RATE", "1000000", "PER", "second"}
				}
				if _, err := c.Conn.Write(resptest.Encode(cmd...)); err != nil {
					errs <- err
					return
				}
				if got, err := c.TryRead(10 * time.Second); err != nil || strings.HasPrefix(got, "-") {
					errs <- fmt.Errorf("%v: %q, %v", cmd, got, err)
					return
				}
				// Half the connections close half way: their counts move
				// to the retired totals while the others go on.
				if i%2 == 1 && k == each/2 {
					break
				}
			}
			errs <- nil
		}(i)
	}
	go func() {
		for i := 0; i < conns; i++ {
			if err := <-errs; err != nil {
				t.Error(err)
			}
		}
		close(done)
	}()
	last := before
	for running := true; running; {
		select {
		case <-done:
			running = false
		default:
		}
		m := scrape(t, s.HTTPAddr())
		for _, cmd := range []string{"ping", "rl.acquire"} {
			if m[key(cmd)] < last[key(cmd)] {
				t.Fatalf("%s went down from %v to %v", key(cmd), last[key(cmd)], m[key(cmd)])
			}
			if h := m[`sluice_command_duration_seconds_count{cmd="`+cmd+`"}`]; h != m[key(cmd)] {
				t.Fatalf("%s: histogram count %v, counter %v", cmd, h, m[key(cmd)])
			}
			if inf := m[`sluice_command_duration_seconds_bucket{cmd="`+cmd+`",le="+Inf"}`]; inf != m[key(cmd)] {
				t.Fatalf("%s: +Inf bucket %v, counter %v", cmd, inf, m[key(cmd)])
			}
		}
		last = m
	}
	// Each full connection sent each commands, each closed one each/2+1.
	var ping, acq float64
	for i := 0; i < conns; i++ {
		sent := each
		if i%2 == 1 {
			sent = each/2 + 1
		}
		for k := 0; k < sent; k++ {
			if k%3 == 0 {
				acq++
			} else {
				ping++
			}
		}
	}
	testkit.WaitFor(t, 10*time.Second, "the closed connections' counts", func() bool {
		m := scrape(t, s.HTTPAddr())
		last = m
		return m[key("ping")]-before[key("ping")] == ping && m[key("rl.acquire")]-before[key("rl.acquire")] == acq
	})
	if got := last[key("ping")] - before[key("ping")]; got != ping {
		t.Errorf("PING counted %v times, sent %v", got, ping)
	}
	// The acquires' counters are striped over cache lines and summed
	// when scraped: every admitted call is there once.
	allowed := `sluice_acquire_total{budget="inline",result="allowed"}`
	if got := last[allowed] - before[allowed]; got != acq {
		t.Errorf("%s grew by %v, %v acquires admitted", allowed, got, acq)
	}
	tokens := `sluice_tokens_consumed_total{budget="inline"}`
	if got := last[tokens] - before[tokens]; got != acq {
		t.Errorf("%s grew by %v, %v acquires of cost 1", tokens, got, acq)
	}
}
