package server

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/testsupport/resptest"
	"github.com/sluice-rl/sluice/testsupport/testkit"
)

// A client that pipelines held calls and closes: the hold ends at once,
// its reservation goes back (the next caller's retry time is the earlier
// one), and the commands it had queued behind it never run.
func TestHeldCallEndsWhenItsClientLeaves(t *testing.T) {
	n := startNode(t, nil)
	a := resptest.Dial(t, n.Server.RespAddr())
	if got := a.Do("RL.ACQUIRE", "w", "RATE", "1", "PER", "minute"); !strings.HasPrefix(got, "[1 0 1 ") {
		t.Fatalf("first call: %s", got)
	}
	b, err := net.Dial("tcp", n.Server.RespAddr())
	if err != nil {
		t.Fatal(err)
	}
	var pipe strings.Builder
	pipe.WriteString("RL.ACQUIRE w RATE 1 PER minute WAIT 60000\r\n")
	for i := 0; i < 3; i++ {
		pipe.WriteString("RL.ACQUIRE side RATE 10\r\n")
	}
	if _, err := b.Write([]byte(pipe.String())); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, "the call to be held", func() bool {
		return scrape(t, n.Server.HTTPAddr())["sluice_waiting_clients"] == 1
	})
	b.Close()
	testkit.WaitFor(t, 10*time.Second, "the hold to end", func() bool {
		return scrape(t, n.Server.HTTPAddr())["sluice_waiting_clients"] == 0
	})
	// Refunded: the next token is due about a minute after the first call,
	// not two (as it would be behind a reservation nobody collects).
	got := a.Do("RL.ACQUIRE", "w", "RATE", "1", "PER", "minute", "DRYRUN")
	var allowed, remaining, limit, retry int64
	if _, err := fmt.Sscanf(got, "[%d %d %d %d", &allowed, &remaining, &limit, &retry); err != nil || allowed != 0 || retry > 60000 {
		t.Fatalf("after the client left: %s (retry_after must be within the first minute)", got)
	}
	// The three queued calls never ran: this one is the bucket's first.
	if got := a.Do("RL.ACQUIRE", "side", "RATE", "10"); !strings.HasPrefix(got, "[1 9 10 ") {
		t.Fatalf("commands queued behind the held call ran: %s", got)
	}
}
