package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// fakeServer answers RESP commands with reply(s, args): nil means never
// answer, "close" means hang up. It records every command it read.
type fakeServer struct {
	t     *testing.T
	ln    net.Listener
	reply func(s *fakeServer, args []string) []byte

	mu      sync.Mutex
	conns   int
	cmds    [][]string
	answers map[string]int // reply kind → count, as the server sees it
}

func newFakeServer(t *testing.T, reply func(s *fakeServer, args []string) []byte) *fakeServer {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &fakeServer{t: t, ln: ln, reply: reply, answers: map[string]int{}}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns++
			s.mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				s.serve(c)
			}()
		}
	}()
	return s
}

func (s *fakeServer) addr() string { return s.ln.Addr().String() }

func (s *fakeServer) serve(c net.Conn) {
	defer c.Close()
	go func() { // unblock on test end
		<-s.t.Context().Done()
		c.Close()
	}()
	r, w := bufio.NewReader(c), bufio.NewWriter(c)
	for {
		args, err := readCommand(r)
		if err != nil {
			return
		}
		s.mu.Lock()
		s.cmds = append(s.cmds, args)
		s.mu.Unlock()
		out := s.reply(s, args)
		if out == nil {
			continue
		}
		if string(out) == "close" {
			return
		}
		w.Write(out)
		if r.Buffered() == 0 {
			if w.Flush() != nil {
				return
			}
		}
	}
}

func (s *fakeServer) count(kind string) {
	s.mu.Lock()
	s.answers[kind]++
	s.mu.Unlock()
}

// stats returns a copy of the answers by kind and the connections accepted.
func (s *fakeServer) stats() (map[string]int, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := make(map[string]int, len(s.answers))
	for k, v := range s.answers {
		m[k] = v
	}
	return m, s.conns
}

func (s *fakeServer) commands() [][]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([][]string(nil), s.cmds...)
}

func readCommand(r *bufio.Reader) ([]string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	n, _ := strconv.Atoi(strings.TrimSpace(line[1:]))
	args := make([]string, n)
	for i := range args {
		line, err := r.ReadString('\n')
		if err != nil {
			return nil, err
		}
		size, _ := strconv.Atoi(strings.TrimSpace(line[1:]))
		b := make([]byte, size+2)
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, err
		}
		args[i] = string(b[:size])
	}
	return args, nil
}

// limiter answers like sluice would, deciding by the key's number: n%3 is
// 0 → admitted, 1 → denied, 2 → degraded. Budget acquires get NOBUDGET.
func limiter(s *fakeServer, args []string) []byte {
	switch strings.ToUpper(args[0]) {
	case "AUTH":
		s.count("auth")
		return []byte("+OK\r\n")
	case "RL.BUDGET":
		if args[1] == "IMPORT" {
			s.count("import")
		} else {
			s.count("ok")
		}
		return []byte("+OK\r\n")
	case "RL.ACQUIRE":
		if len(args) > 2 && args[2] == "KEY" {
			s.count("NOBUDGET")
			return []byte("-NOBUDGET no budget node on path '" + args[1] + "'\r\n")
		}
		n, _ := strconv.Atoi(strings.TrimPrefix(args[1], "key:"))
		allowed := []string{"1", "0", "2"}[n%3]
		s.count([]string{"admitted", "denied", "degraded"}[n%3])
		return []byte("*6\r\n:" + allowed + "\r\n:5\r\n:100\r\n:0\r\n:50\r\n$" + strconv.Itoa(len(args[1])) + "\r\n" + args[1] + "\r\n")
	case "CL.THROTTLE":
		s.count("admitted")
		return []byte("*5\r\n:0\r\n:101\r\n:99\r\n:-1\r\n:1\r\n")
	}
	s.count("unknown")
	return []byte("-ERR unknown command '" + args[0] + "'\r\n")
}

func mustParse(t *testing.T, args ...string) Config {
	t.Helper()
	c, err := parseArgs(args, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestExecuteCountsEveryReply(t *testing.T) {
	a, b := newFakeServer(t, limiter), newFakeServer(t, limiter)
	c := mustParse(t, "-h", a.addr()+","+b.addr(), "-a", "secret", "--user", "ops", "-c", "4", "-P", "8",
		"-n", "1001", "-r", "50", "--mix", "acquire=4,throttle=1,budget=1,budget-write=1", "--tree-partners", "2", "--tree-tenants", "2")
	var warn strings.Builder
	res, err := execute(context.Background(), c, &warn)
	if err != nil {
		t.Fatal(err)
	}
	if res.Failure != "" || res.Interrupted || warn.Len() > 0 {
		t.Fatalf("failure %q, interrupted %v, warnings %q", res.Failure, res.Interrupted, warn.String())
	}
	if res.Requests != 1001 {
		t.Errorf("%d requests, want exactly 1001 (the last batch is short)", res.Requests)
	}
	seen := map[string]int{}
	conns := map[*fakeServer]int{}
	for _, s := range []*fakeServer{a, b} {
		answers, n := s.stats()
		for k, v := range answers {
			seen[k] += v
		}
		conns[s] = n
	}
	reported := map[string]int64{"admitted": res.Admitted, "denied": res.Denied, "degraded": res.Degraded,
		"ok": res.OK, "NOBUDGET": res.Errors}
	for k, n := range reported {
		if int64(seen[k]) != n {
			t.Errorf("%s: reported %d, server answered %d", k, n, seen[k])
		}
	}
	if res.Denied == 0 || res.Degraded == 0 || res.Errors == 0 || res.OK == 0 {
		t.Errorf("a mix of every kind should give every outcome: %+v", res)
	}
	if res.ErrorCodes["NOBUDGET"] != res.Errors {
		t.Errorf("error codes %v, want NOBUDGET %d", res.ErrorCodes, res.Errors)
	}
	if len(res.ErrorTexts) == 0 || !strings.HasPrefix(res.ErrorTexts[0].Text, "NOBUDGET no budget node on path 'system/p") {
		t.Errorf("error texts %+v", res.ErrorTexts)
	}
	// Four workers spread over two targets, plus one connection that
	// loaded the tree; every one authenticated first.
	if conns[a]+conns[b] != 5 || conns[a] < 2 || conns[b] < 2 {
		t.Errorf("connections: %d and %d, want 2 each plus one for the import", conns[a], conns[b])
	}
	if seen["auth"] != 5 || seen["import"] != 1 || seen["unknown"] != 0 {
		t.Errorf("server saw %v", seen)
	}
	for _, cmd := range append(a.commands(), b.commands()...) {
		if cmd[0] == "AUTH" && (len(cmd) != 3 || cmd[1] != "ops" || cmd[2] != "secret") {
			t.Errorf("AUTH sent as %q", cmd)
		}
		if cmd[0] == "RL.BUDGET" && cmd[1] == "IMPORT" {
			if len(cmd) != 4 || cmd[3] != "REPLACE" {
				t.Errorf("IMPORT sent as %q", cmd[:2])
			}
			var tree budgetTree
			if err := json.Unmarshal([]byte(cmd[2]), &tree); err != nil || len(tree.Budgets) != 1+2*3 {
				t.Errorf("IMPORT document: %v, %d nodes", err, len(tree.Budgets))
			}
		}
	}
	if res.Latency.Max == 0 || res.Latency.P50 > res.Latency.Max {
		t.Errorf("latency %+v", res.Latency)
	}
}

func TestExecuteImportRefusedIsAWarning(t *testing.T) {
	s := newFakeServer(t, func(_ *fakeServer, args []string) []byte {
		return []byte("-ERR unknown command '" + args[0] + "', with args beginning with: \r\n")
	})
	c := mustParse(t, "-h", s.addr(), "-c", "2", "-n", "10", "--mix", "budget=1")
	var warn strings.Builder
	res, err := execute(context.Background(), c, &warn)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0], "RL.BUDGET IMPORT of the generated tree (111 nodes) was refused: ERR unknown command 'RL.BUDGET'") {
		t.Errorf("warnings %q", res.Warnings)
	}
	if !strings.Contains(warn.String(), "refused") {
		t.Errorf("nothing said on the warning stream: %q", warn.String())
	}
	if res.Requests != 10 || res.Errors != 10 || res.ErrorCodes["ERR"] != 10 {
		t.Errorf("requests %d, errors %d, codes %v; want 10 errors", res.Requests, res.Errors, res.ErrorCodes)
	}
	if len(res.ErrorTexts) != 1 || res.ErrorTexts[0] != (ErrorText{Text: "ERR unknown command 'RL.ACQUIRE'", Count: 10}) {
		t.Errorf("error texts %+v, want one grouped text", res.ErrorTexts)
	}
}

// Just after a start a node may have no leader yet: the import is retried.
func TestExecuteImportRetriesTryAgain(t *testing.T) {
	s := newFakeServer(t, func(s *fakeServer, args []string) []byte {
		if args[0] == "RL.BUDGET" {
			s.count("import")
			if answers, _ := s.stats(); answers["import"] <= 3 {
				return []byte("-TRYAGAIN no leader\r\n")
			}
			return []byte("+OK\r\n")
		}
		return []byte("*6\r\n:1\r\n:0\r\n:1\r\n:0\r\n:0\r\n$1\r\np\r\n")
	})
	c := mustParse(t, "-h", s.addr(), "-c", "1", "-n", "5", "--mix", "budget=1", "--timeout", "10s")
	res, err := execute(context.Background(), c, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if answers, _ := s.stats(); len(res.Warnings) != 0 || res.Admitted != 5 || answers["import"] != 4 {
		t.Errorf("warnings %q, admitted %d, imports %d; want the fourth import to succeed", res.Warnings, res.Admitted, answers["import"])
	}
	// It gives up after --timeout with a warning that says why.
	s2 := newFakeServer(t, func(*fakeServer, []string) []byte { return []byte("-TRYAGAIN no leader\r\n") })
	c = mustParse(t, "-h", s2.addr(), "-c", "1", "-n", "1", "--mix", "budget=1", "--timeout", "250ms")
	if res, err = execute(context.Background(), c, io.Discard); err != nil {
		t.Fatal(err)
	}
	if len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0], "refused: TRYAGAIN no leader") {
		t.Errorf("warnings %q", res.Warnings)
	}
}

func TestExecuteAuthRefused(t *testing.T) {
	s := newFakeServer(t, func(*fakeServer, []string) []byte { return []byte("-WRONGPASS invalid username-password pair\r\n") })
	c := mustParse(t, "-h", s.addr(), "-a", "nope", "-n", "10")
	_, err := execute(context.Background(), c, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "AUTH: WRONGPASS") || !strings.Contains(err.Error(), s.addr()) {
		t.Errorf("error %v, want the AUTH refusal naming the target", err)
	}
}

func TestExecuteStalledServer(t *testing.T) {
	s := newFakeServer(t, func(*fakeServer, []string) []byte { return nil })
	c := mustParse(t, "-h", s.addr(), "-c", "2", "-n", "100", "--timeout", "300ms")
	res, err := execute(context.Background(), c, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(res.Failure, "no reply for 300ms") {
		t.Errorf("failure %q, want a stall", res.Failure)
	}
}

func TestExecuteServerCloses(t *testing.T) {
	s := newFakeServer(t, func(s *fakeServer, _ []string) []byte {
		if len(s.commands()) > 20 {
			return []byte("close")
		}
		return []byte("*5\r\n:0\r\n:1\r\n:1\r\n:-1\r\n:1\r\n")
	})
	c := mustParse(t, "-h", s.addr(), "-c", "1", "-n", "1000", "--mix", "throttle=1")
	res, err := execute(context.Background(), c, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(res.Failure, "server closed the connection") || res.Requests != 20 {
		t.Errorf("failure %q after %d requests, want a closed connection after 20", res.Failure, res.Requests)
	}
}

func TestExecuteInterrupted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var once sync.Once
	s := newFakeServer(t, func(s *fakeServer, _ []string) []byte {
		if len(s.commands()) > 50 {
			once.Do(cancel)
		}
		return []byte(":1\r\n")
	})
	c := mustParse(t, "-h", s.addr(), "-c", "3", "-d", "1h", "--mix", "incr=1")
	res, err := execute(ctx, c, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	// Replies in flight at the signal are not counted, so fewer than the
	// server's 50 may be.
	if !res.Interrupted || res.Failure != "" || res.Requests == 0 || res.OK != res.Requests {
		t.Errorf("interrupted %v, failure %q, requests %d, ok %d", res.Interrupted, res.Failure, res.Requests, res.OK)
	}
}

func TestExecutePacedAndTimed(t *testing.T) {
	s := newFakeServer(t, func(*fakeServer, []string) []byte { return []byte(":1\r\n") })
	c := mustParse(t, "-h", s.addr(), "-c", "4", "-P", "2", "-n", "40", "--rate-limit", "4000", "--mix", "incr=1")
	res, err := execute(context.Background(), c, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests != 40 || res.OK != 40 || res.Failure != "" {
		t.Errorf("paced run: %+v", res)
	}
	c = mustParse(t, "-h", s.addr(), "-c", "2", "-d", "500ms", "--mix", "incr=1")
	if res, err = execute(context.Background(), c, io.Discard); err != nil {
		t.Fatal(err)
	}
	if res.Requests == 0 || res.Failure != "" || res.Interrupted {
		t.Errorf("timed run: %+v", res)
	}
}

// The JSON report's field names are part of the tool's interface.
func TestResultJSONFields(t *testing.T) {
	res := newResult(&Config{Targets: []string{"a:1"}, Mix: Mix{kindAcquire: 1}, Dist: "zipf", ZipfS: 1.1})
	var b strings.Builder
	if err := res.writeJSON(&b); err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(b.String()), &m); err != nil {
		t.Fatal(err)
	}
	want := []string{"targets", "connections", "pipeline", "mix", "distribution", "keyspace", "rate_limit",
		"requests", "duration_s", "throughput_rps", "admitted", "denied", "degraded", "ok", "errors",
		"error_codes", "error_texts", "latency_us", "warnings", "failure", "interrupted"}
	if len(m) != len(want) {
		t.Errorf("%d fields, want %d: %v", len(m), len(want), m)
	}
	for _, k := range want {
		if _, ok := m[k]; !ok {
			t.Errorf("field %q missing", k)
		}
	}
	lat, _ := m["latency_us"].(map[string]any)
	for _, k := range []string{"p50", "p90", "p99", "p999", "max", "min", "mean"} {
		if _, ok := lat[k]; !ok {
			t.Errorf("latency_us.%s missing", k)
		}
	}
	if m["distribution"] != "zipf s=1.1" || m["error_texts"] == nil || m["warnings"] == nil {
		t.Errorf("distribution %v, error_texts %v, warnings %v", m["distribution"], m["error_texts"], m["warnings"])
	}
}

func TestResultText(t *testing.T) {
	res := newResult(&Config{Targets: []string{"a:1"}, Conns: 2, Pipeline: 4, Mix: Mix{kindBudget: 1}, Dist: "uniform", KeySpace: 10})
	res.Requests, res.Errors = 7, 7
	res.ErrorCodes["NOBUDGET"] = 7
	for i := 0; i < 7; i++ {
		res.ErrorTexts = append(res.ErrorTexts, ErrorText{Text: "NOBUDGET no budget node on path 'p" + strconv.Itoa(i) + "'", Count: 1})
	}
	res.Failure = "connection 0 to a:1: server closed the connection"
	var b strings.Builder
	res.writeText(&b)
	out := b.String()
	for _, w := range []string{"a:1 (2 connections, pipeline 4)", "errors 7", "error codes   NOBUDGET 7",
		"path 'p4'", "… 2 more", "failed        connection 0"} {
		if !strings.Contains(out, w) {
			t.Errorf("report lacks %q:\n%s", w, out)
		}
	}
	if strings.Contains(out, "path 'p5'") {
		t.Errorf("report shows more than %d error texts:\n%s", shownErrors, out)
	}
}
