package commands

import (
	"bufio"
	"bytes"
	"github.com/sluice-rl/sluice/access"
	"github.com/sluice-rl/sluice/keyspace"
	"github.com/sluice-rl/sluice/limiter"
	"github.com/sluice-rl/sluice/reserve"
	"github.com/sluice-rl/sluice/script"
	"github.com/sluice-rl/sluice/usage"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/raftfsm"
	"github.com/sluice-rl/sluice/testsupport/resptest"
	"github.com/sluice-rl/sluice/testsupport/testkit"
	"github.com/sluice-rl/sluice/testsupport/testraft"
)

// reply parses the one reply a command wrote.
func reply(t testing.TB, c *Capture) string {
	b := c.Bytes()
	s, err := resptest.Parse(bufio.NewReader(bytes.NewReader(b)))
	if err != nil {
		t.Fatalf("command wrote invalid RESP %q: %v", b, err)
	}
	return s
}

// testEnv returns an environment backed by a real one-node Raft cluster.
func testEnv(t testing.TB) *Env {
	o := testraft.Options(t, 0)
	node, err := raftfsm.Open(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { node.Shutdown() })
	testkit.WaitForLeader(t, node)
	reg := NewRegistry()
	done := make(chan struct{})
	close(done) // WAIT returns at once: the fuzzer must not sleep
	store := engine.New(engine.Options{Shards: 4, MaxBuckets: 10000})
	store.SetQuotaSource(node.FSM())
	env := &Env{
		Now:     func() int64 { return int64(19676*86400) * int64(time.Second) },
		Clients: NewClients(), Auth: access.NewAuth("", nil), Metrics: NewMetrics(reg), Registry: reg,
		Version: "test", Started: time.Now(), MaxKeyLen: 256,
		Settings: func() []Setting { return nil },
		Cluster:  node,
	}
	env.Service = &limiter.Service{Store: store, Cluster: node, Quotas: node.FSM(), Clock: env.Clock, Shutdown: done,
		Waiting: env.Metrics.AddWaiting, Counted: env.Metrics.Count, Recorder: usage.NewRecorder(), Holds: reserve.New("n0", 100, 0),
		Keys: keyspace.New(keyspace.Options{MaxKeys: 10000, MaxBytes: 1 << 20}), Scripts: script.New()}
	return env
}

// FuzzCommands feeds arbitrary argument vectors (split on 0x00) to every
// command: no panic, exactly one well-formed reply, and a command that
// answers with an error leaves the bucket count unchanged.
func FuzzCommands(f *testing.F) {
	for _, seed := range []string{
		"RL.ACQUIRE\x00k\x00RATE\x0010\x00BURST\x005",
		"RL.ACQUIRE\x00k\x00RATE\x0010\x00PER\x001h30m\x00ALGO\x00sliding_window\x00COST\x003\x00WAIT\x0010",
		"RL.ACQUIRE\x00k\x00RATE\x00-1",
		"RL.PEEK\x00k\x00RATE\x005\x00COST\x000",
		"RL.REFUND\x00k\x00COST\x002",
		"RL.RESET\x00k",
		"RL.RESERVE\x00k\x00RATE\x0010\x00CONCURRENCY\x002\x00COST\x003\x00TTL\x00100\x00WAIT\x0010",
		"RL.RESERVE\x00k\x00CONCURRENCY\x001\x00COST\x001",
		"RL.SETTLE\x0000000000000000010000000000000000@n0\x00ACTUAL\x009",
		"RL.RELEASE\x0000000000000000020000000000000000@n0",
		"RL.RENEW\x0000000000000000010000000000000000@n0\x00TTL\x005",
		"CL.THROTTLE\x00u\x0015\x0030\x0060\x001",
		"CL.THROTTLE\x00u\x00+0\x00-0\x0060",
		"RL.ACQUIRE\x00k\x00RATE\x005\x00PER\x009999999999999999999h",
		"HELLO\x002\x00SETNAME\x00x",
		"CLIENT\x00KILL\x00ID\x00999",
		"COMMAND\x00DOCS",
		"INFO\x00all",
		"RL.BUDGET\x00SET\x00a/b\x00{\"sustained\":{\"rate\":5}}",
		"RL.BUDGET\x00SET\x00a\x00RATE\x0010\x00SHARING\x00enforce\x00MODE\x00allocated\x00TOTAL\x0010",
		"RL.ACQUIRE\x00a/b/c\x00COST\x002",
		"RL.BUDGET\x00IMPORT\x00{\"budgets\":{\"x\":{\"scope\":\"user\"}}}\x00REPLACE",
		"RL.BUDGET\x00DEL\x00a\x00RECURSIVE",
		"RL.CLUSTER\x00NODES",
		"HELLO\x003",
		"MULTI",
		"EXEC",
		"SCAN\x000\x00MATCH\x00[a-*\\\x00COUNT\x005\x00TYPE\x00gcra",
		"CLIENT\x00TRACKING\x00ON\x00OPTIN\x00REDIRECT\x001",
		"CLIENT\x00CACHING\x00YES",
		"PTTL\x00k",
		"ACL\x00LIST",
	} {
		f.Add([]byte(seed))
	}
	env := testEnv(f)
	f.Fuzz(func(t *testing.T, in []byte) {
		args := bytes.Split(in, []byte{0})
		if len(args) == 0 || len(args[0]) == 0 || len(args) > 64 {
			return
		}
		if name := string(bytes.ToUpper(args[0])); name == "QUIT" || name == "CLIENT" && len(args) > 1 && bytes.EqualFold(args[1], []byte("KILL")) {
			return
		}
		s := NewSession(1, "127.0.0.1:1", "127.0.0.1:2", access.RoleAdmin, func() {})
		c := NewCapture()
		before := env.Service.Store.Len()
		env.Exec(c, s, args)
		if r := reply(t, c); len(r) > 0 && r[0] == '-' && env.Service.Store.Len() != before {
			t.Fatalf("%q answered %s but changed the bucket count %d → %d", args, r, before, env.Service.Store.Len())
		}
	})
}

func FuzzParseWindow(f *testing.F) {
	for _, s := range []string{"second", "250ms", "1h30m", "7d", "2w", "", "1.5s", "-1s", "99999999999999h"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, ok := engine.ParseWindow([]byte(s))
		if ok && d < 0 {
			t.Fatalf("%q parsed to a negative window %v", s, d)
		}
	})
}
