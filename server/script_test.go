package server

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/testsupport/resptest"
	"github.com/sluice-rl/sluice/testsupport/testkit"
)

// A script that loops forever does not stall the node: other clients'
// PINGs and data commands on other keys answer meanwhile, SCRIPT KILL
// stops it (and only it: a script that wrote is UNKILLABLE), and
// --script-time-limit stops one nobody kills.
func TestRunawayScriptIsStopped(t *testing.T) {
	n := startNode(t, func(c *Config) { c.ScriptTimeLimit = 3 * time.Second })
	addr := n.Server.RespAddr()
	looper := resptest.Dial(t, addr)
	other := resptest.Dial(t, addr)
	if got := other.Do("SCRIPT", "KILL"); !strings.HasPrefix(got, "-NOTBUSY") {
		t.Fatalf("SCRIPT KILL with nothing running: %s", got)
	}
	// A script touches the keys it declares, no other: one declaring none
	// holds nothing (a loop of it holds up no key).
	if got := other.Do("EVAL", "return redis.call('INCR', 'undeclared')", "0"); !strings.Contains(got, "it did not declare") {
		t.Fatalf("a key a script did not declare: %s", got)
	}
	if got := other.Do("EVAL", "return redis.call('INCR', 'x' .. KEYS[1])", "1", "y"); !strings.Contains(got, "it did not declare") {
		t.Fatalf("a key beside the declared one: %s", got)
	}

	looper.Send("EVAL", "local i = 0 while true do i = i + 1 end", "1", "loop:{a}")
	testkit.WaitFor(t, 10*time.Second, "the script to run", func() bool {
		running, _ := n.Server.svc.Scripts.Running()
		return running == 1
	})
	// Meanwhile the node answers: PING and keys the script does not hold.
	var free []string
	for i := 0; len(free) < 5; i++ {
		if k := fmt.Sprint("elsewhere:", i); n.Server.svc.Keys.Apart([]byte(k), []byte("loop:{a}")) {
			free = append(free, k)
		}
	}
	var took []time.Duration
	for i := range 50 {
		start := time.Now()
		if got := other.Do("PING"); got != "+PONG" {
			t.Fatalf("PING while a script loops: %s", got)
		}
		if got := other.Do("INCR", free[i%5]); strings.HasPrefix(got, "-") {
			t.Fatalf("INCR while a script loops: %s", got)
		}
		took = append(took, time.Since(start))
	}
	sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
	t.Logf("PING+INCR while a script loops: p50 %v, p99 %v", took[len(took)/2], took[len(took)*99/100])
	if got := other.Do("SCRIPT", "KILL"); got != "+OK" {
		t.Fatalf("SCRIPT KILL: %s", got)
	}
	if got, err := looper.TryRead(10 * time.Second); err != nil || got != "-ERR Script killed by user with SCRIPT KILL..." {
		t.Fatalf("the killed script's reply: %q %v", got, err)
	}

	// One that has written is not killed; the time limit stops it.
	looper.Send("EVAL", "redis.call('SET', KEYS[1], 'x') while true do end", "1", "w")
	testkit.WaitFor(t, 10*time.Second, "the writing script to have written", func() bool {
		_, wrote := n.Server.svc.Scripts.Running()
		return wrote == 1
	})
	if got := other.Do("SCRIPT", "KILL"); !strings.HasPrefix(got, "-UNKILLABLE") {
		t.Fatalf("SCRIPT KILL of a script that wrote: %s", got)
	}
	got, err := looper.TryRead(30 * time.Second)
	if err != nil || !strings.HasPrefix(got, "-ERR Script stopped: it ran past its time limit (3s") {
		t.Fatalf("the script past its limit: %q %v", got, err)
	}
	if got := other.Do("GET", "w"); got != `"x"` && got != "x" {
		t.Fatalf("what the stopped script wrote: %s", got)
	}
	if running, _ := n.Server.svc.Scripts.Running(); running != 0 {
		t.Fatal("a script still runs")
	}
}

// Loaded scripts are bounded: 10,000 distinct ones load, and the cache
// reports their count and bytes (its bound, script.MaxScripts and
// script.MaxSourceBytes, refuses more).
func TestManyScriptsStayBounded(t *testing.T) {
	n := startNode(t, nil)
	c := resptest.Dial(t, n.Server.RespAddr())
	for i := range 10000 {
		c.Send("SCRIPT", "LOAD", fmt.Sprintf("return %d", i))
	}
	for i := range 10000 {
		if got := c.Read(); len(got) != 42 && len(got) != 40 {
			t.Fatalf("SCRIPT LOAD %d: %s", i, got)
		}
	}
	if e := n.Server.svc.Scripts; e.Len() != 10000 || e.Bytes() > 10000*12 {
		t.Fatalf("%d scripts, %d bytes of source", e.Len(), e.Bytes())
	}
	if got := c.Do("EVALSHA", strings.Trim(c.Do("SCRIPT", "LOAD", "return 9999"), `"`), "0"); got != "9999" {
		t.Fatalf("EVALSHA of the last: %s", got)
	}
}
