package client

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// fakeNode is a RESP2 server that answers RL.ACQUIRE with an admission
// naming its own address, RL.CLUSTER NODES with members, PING with PONG,
// and anything else with the error reply in errReply (when set).
type fakeNode struct {
	ln   net.Listener
	addr string

	mu       sync.Mutex
	members  [][5]string
	errReply string
	calls    map[string]int // RL.ACQUIRE keys
	conns    []net.Conn
}

func newFakeNode(t *testing.T, addr string) *fakeNode {
	t.Helper()
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeNode{ln: ln, addr: ln.Addr().String(), calls: map[string]int{}}
	go f.serve()
	t.Cleanup(f.close)
	return f
}

func (f *fakeNode) close() {
	f.ln.Close()
	f.mu.Lock()
	for _, c := range f.conns {
		c.Close()
	}
	f.conns = nil
	f.mu.Unlock()
}

func (f *fakeNode) serve() {
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		f.mu.Lock()
		f.conns = append(f.conns, c)
		f.mu.Unlock()
		go f.conn(c)
	}
}

func (f *fakeNode) conn(c net.Conn) {
	defer c.Close()
	r := bufio.NewReader(c)
	for {
		args, err := readCommand(r)
		if err != nil {
			return
		}
		var out string
		f.mu.Lock()
		switch cmd := strings.ToUpper(args[0]); {
		case f.errReply != "":
			out = "-" + f.errReply + "\r\n"
		case cmd == "PING":
			out = "+PONG\r\n"
		case cmd == "RL.ACQUIRE" && len(args) > 1:
			f.calls[args[1]]++
			out = fmt.Sprintf("*6\r\n:1\r\n:9\r\n:10\r\n:0\r\n:100\r\n$%d\r\n%s\r\n", len(f.addr), f.addr)
		case cmd == "RL.CLUSTER" && len(args) == 2 && strings.EqualFold(args[1], "NODES"):
			out = fmt.Sprintf("*%d\r\n", len(f.members))
			for _, m := range f.members {
				out += "*5\r\n"
				for _, s := range m {
					out += fmt.Sprintf("$%d\r\n%s\r\n", len(s), s)
				}
			}
		default:
			out = "-ERR unknown command\r\n"
		}
		f.mu.Unlock()
		if _, err := io.WriteString(c, out); err != nil {
			return
		}
	}
}

func readCommand(r *bufio.Reader) ([]string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	if !strings.HasPrefix(line, "*") {
		return nil, errors.New("not an array")
	}
	n, err := strconv.Atoi(strings.TrimSpace(line[1:]))
	if err != nil || n < 1 {
		return nil, errors.New("bad array")
	}
	args := make([]string, n)
	for i := range args {
		h, err := r.ReadString('\n')
		if err != nil {
			return nil, err
		}
		size, err := strconv.Atoi(strings.TrimSpace(h[1:]))
		if err != nil {
			return nil, err
		}
		b := make([]byte, size+2)
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, err
		}
		args[i] = string(b[:size])
	}
	return args, nil
}

func (f *fakeNode) keys() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.calls)
}

// refusedAddr returns a loopback address nothing listens on.
func refusedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := ln.Addr().String()
	ln.Close()
	return a
}

// testOptions: RESP2 without CLIENT SETINFO, which the fake does not speak.
var testOptions = &redis.Options{Protocol: 2, DisableIdentity: true}

func newNodes(t *testing.T, cfg NodesConfig) *Nodes {
	t.Helper()
	if cfg.Options == nil {
		cfg.Options = testOptions
	}
	n, err := NewNodes(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// A refused port fails within 5 ms (the median of 20 calls), each call
// from the first: by the failure policy, or ErrUnavailable without one.
// go-redis's defaults would wait for the 50 ms deadline.
func TestRefusedPortFailsFast(t *testing.T) {
	for _, policy := range []FailurePolicy{FailClosed, {}} {
		nodes := newNodes(t, NodesConfig{Addrs: []string{refusedAddr(t)}, Static: true})
		// No breaker: every call goes to the network.
		c := New(nodes, OnFailure(policy), BreakerFailures(0))
		var took []time.Duration
		for i := 0; i < 20; i++ {
			start := time.Now()
			d, err := c.AcquireInline(bg, "k", Limit{Rate: 10})
			took = append(took, time.Since(start))
			if policy.kind == 0 {
				if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "refused") {
					t.Fatalf("call %d: %v", i, err)
				}
			} else if err != nil || d.Source != SourceFailClosed || d.Allowed {
				t.Fatalf("call %d: %+v %v", i, d, err)
			}
		}
		if m := median(took); m >= 5*time.Millisecond {
			t.Fatalf("policy %v: median %v of %v, want under 5 ms", policy.kind, m, took)
		}
		t.Logf("policy %v: median %v, first %v", policy.kind, median(took), took[0])
	}
}

// With one node refusing, every call is answered by the other, and a
// refused call costs no deadline: the refused node is tried first for
// some keys until it has failed, then ranked last.
func TestNodesFailOverOnARefusedNode(t *testing.T) {
	up := newFakeNode(t, "")
	nodes := newNodes(t, NodesConfig{Addrs: []string{up.addr, refusedAddr(t)}, Static: true})
	c := New(nodes, OnFailure(FailClosed), Timeout(2*time.Second))
	start := time.Now()
	for i := 0; i < 200; i++ {
		d, err := c.AcquireInline(bg, fmt.Sprint("k", i), Limit{Rate: 10})
		if err != nil || d.Source != SourceServer || !d.Allowed || d.LimitedBy != up.addr {
			t.Fatalf("call %d: %+v %v", i, d, err)
		}
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("200 calls took %v", el)
	}
	// Each node is some keys' first choice: the live one got them all.
	if up.keys() != 200 {
		t.Fatalf("the live node saw %d keys", up.keys())
	}
}

// Calls for one key go to one node while it answers; keys spread over
// the nodes; when that node goes, its keys move and the others stay.
func TestNodesRouteByKey(t *testing.T) {
	a, b, c3 := newFakeNode(t, ""), newFakeNode(t, ""), newFakeNode(t, "")
	nodes := newNodes(t, NodesConfig{Addrs: []string{a.addr, b.addr, c3.addr}, Static: true})
	c := New(nodes, Timeout(2*time.Second))
	first := map[string]string{}
	for i := 0; i < 300; i++ {
		k := fmt.Sprint("user", i%100)
		d, err := c.AcquireInline(bg, k, Limit{Rate: 10})
		if err != nil {
			t.Fatal(err)
		}
		if prev, ok := first[k]; ok && prev != d.LimitedBy {
			t.Fatalf("%s went to %s, then %s", k, prev, d.LimitedBy)
		}
		first[k] = d.LimitedBy
	}
	for _, f := range []*fakeNode{a, b, c3} {
		if n := f.keys(); n < 15 {
			t.Fatalf("%s got %d of 100 keys", f.addr, n)
		}
	}
	a.close()
	for k, was := range first {
		d, err := c.AcquireInline(bg, k, Limit{Rate: 10})
		if err != nil || d.Source != SourceServer {
			t.Fatalf("%s after a closed: %+v %v", k, d, err)
		}
		if was != a.addr && d.LimitedBy != was {
			t.Fatalf("%s moved from %s to %s though its node answers", k, was, d.LimitedBy)
		}
		if d.LimitedBy == a.addr {
			t.Fatalf("%s answered by the closed node", k)
		}
	}
}

// LOADING and TRYAGAIN go to the next node; an error about the call is
// the answer.
func TestNodesFailOverOnReplies(t *testing.T) {
	a, b := newFakeNode(t, ""), newFakeNode(t, "")
	nodes := newNodes(t, NodesConfig{Addrs: []string{a.addr, b.addr}, Static: true})
	c := New(nodes, Timeout(2*time.Second))
	for _, reply := range []string{"LOADING sluice is loading the dataset in memory", "TRYAGAIN no leader", "CLUSTERDOWN shutting down"} {
		a.mu.Lock()
		a.errReply = reply
		a.mu.Unlock()
		for i := 0; i < 20; i++ {
			d, err := c.AcquireInline(bg, fmt.Sprint("k", i), Limit{Rate: 10})
			if err != nil || d.LimitedBy != b.addr {
				t.Fatalf("%s, call %d: %+v %v", reply, i, d, err)
			}
		}
	}
	a.mu.Lock()
	a.errReply = ""
	a.mu.Unlock()
	b.mu.Lock()
	b.errReply = "ERR RATE must be an integer"
	b.mu.Unlock()
	sent := 0
	for i := 0; i < 20; i++ {
		_, err := c.AcquireInline(bg, fmt.Sprint("k", i), Limit{Rate: 10})
		if err != nil {
			if !strings.HasPrefix(err.Error(), "ERR RATE") {
				t.Fatal(err)
			}
			sent++
		}
	}
	if sent == 0 {
		t.Fatal("no key went to b")
	}
}

// The members come from RL.CLUSTER NODES; dns: names resolve to every
// address.
func TestNodesTopology(t *testing.T) {
	a, b := newFakeNode(t, ""), newFakeNode(t, "")
	a.members = [][5]string{{"n1", a.addr, "127.0.0.1:1", "voter", "leader"}, {"n2", b.addr, "127.0.0.1:2", "voter", "follower"},
		{"n3", "", "127.0.0.1:3", "nonvoter", "follower"}}
	nodes := newNodes(t, NodesConfig{Addrs: []string{a.addr}})
	want := []string{a.addr, b.addr}
	sort.Strings(want)
	waitFor(t, "both members", func() bool { return slices.Equal(nodes.Addrs(), want) })

	// A node that knows no RL.CLUSTER keeps the addresses given.
	old := newNodes(t, NodesConfig{Addrs: []string{b.addr}})
	if err := New(old).rdb.Do(bg, "PING").Err(); err != nil {
		t.Fatal(err)
	}
	if got := old.Addrs(); !slices.Equal(got, []string{b.addr}) {
		t.Fatalf("without RL.CLUSTER NODES: %v", got)
	}

	// Two loopback addresses on one port behind one name.
	one := newFakeNode(t, "127.0.0.1:0")
	_, port, _ := net.SplitHostPort(one.addr)
	two := newFakeNode(t, "127.0.0.2:"+port)
	lookup := func(ctx context.Context, host string) ([]string, error) {
		if host != "sluice.test" {
			return nil, fmt.Errorf("no such host %s", host)
		}
		return []string{"127.0.0.2", "127.0.0.1"}, nil
	}
	dns := newNodes(t, NodesConfig{Addrs: []string{"dns:sluice.test:" + port}, Static: true, LookupHost: lookup})
	if got := dns.Addrs(); !slices.Equal(got, []string{one.addr, two.addr}) {
		t.Fatalf("dns: %v", got)
	}
	seen := map[string]bool{}
	for i := 0; i < 50; i++ {
		d, err := New(dns, Timeout(2*time.Second)).AcquireInline(bg, fmt.Sprint("k", i), Limit{Rate: 1})
		if err != nil {
			t.Fatal(err)
		}
		seen[d.LimitedBy] = true
	}
	if !seen[one.addr] || !seen[two.addr] {
		t.Fatalf("answered by %v", seen)
	}
	if _, err := NewNodes(NodesConfig{Addrs: []string{"dns:nosuch.test:1"}, LookupHost: lookup}); err == nil {
		t.Fatal("no address resolved, no error")
	}
}

// Close stops the background reads; calls after it fail with ErrNoNodes.
func TestNodesClose(t *testing.T) {
	a := newFakeNode(t, "")
	nodes := newNodes(t, NodesConfig{Addrs: []string{a.addr}})
	if err := nodes.Close(); err != nil {
		t.Fatal(err)
	}
	_, err := New(nodes).AcquireInline(bg, "k", Limit{Rate: 1})
	if !errors.Is(err, ErrNoNodes) || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("after Close: %v", err)
	}
}

// A node that accepts and never answers costs the call that meets it its
// deadline (decided by the policy); then it is ranked last and the calls
// after it are answered by the other node at once.
func TestNodesHungNodeIsRankedLast(t *testing.T) {
	hung, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hung.Close()
	var held []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := hung.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	defer func() {
		mu.Lock()
		for _, c := range held {
			c.Close()
		}
		mu.Unlock()
	}()
	up := newFakeNode(t, "")
	nodes := newNodes(t, NodesConfig{Addrs: []string{hung.Addr().String(), up.addr}, Static: true})
	c := New(nodes, OnFailure(FailClosed), Timeout(200*time.Millisecond), BreakerFailures(0))
	policy := 0
	for i := 0; i < 100; i++ {
		d, err := c.AcquireInline(bg, fmt.Sprint("k", i), Limit{Rate: 10})
		if err != nil {
			t.Fatal(err)
		}
		if d.Source == SourceFailClosed {
			policy++
		} else if d.LimitedBy != up.addr {
			t.Fatalf("call %d: %+v", i, d)
		}
	}
	// One call met the hung node (two if this machine stalled past the
	// half second it is set aside for).
	if policy < 1 || policy > 2 {
		t.Fatalf("%d of 100 calls decided by the policy", policy)
	}
}
