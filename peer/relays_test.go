package peer

import (
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/limiter"
	"github.com/sluice-rl/sluice/quota"
)

// A reservation relayed to the member that decides its slots is written
// as the RL.RESERVE a client would send for it: the same key, subject and
// limits (so the same buckets there), concurrency, cost, TTL and WAIT.
func TestReserveArgs(t *testing.T) {
	lim, err := engine.NewLimit(engine.GCRA, 10, 90*time.Minute, 20)
	if err != nil {
		t.Fatal(err)
	}
	p, err := quota.ParsePeriod("month", "Europe/Paris")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		call limiter.Call
		o    limiter.ReserveOpts
		want string
	}{
		{limiter.Call{Path: []byte("job:1"), Rate: &lim, Cost: 3, HasCost: true, WaitMs: 250, HasWait: true},
			limiter.ReserveOpts{TTL: int64(90 * time.Second), Concurrency: 2},
			"RL.RESERVE job:1 RATE 10 PER 1h30m BURST 20 ALGO " + engine.GCRA.String() + " CONCURRENCY 2 COST 3 TTL 90000 WAIT 250"},
		{limiter.Call{Path: []byte("acme/chat"), Subject: []byte("alice"), Cost: 1, HasCost: true},
			limiter.ReserveOpts{},
			"RL.RESERVE acme/chat KEY alice COST 1"},
		{limiter.Call{Path: []byte("llm"), Quota: &quota.Spec{N: 5000, Period: p}, Cost: 40, HasCost: true},
			limiter.ReserveOpts{TTL: int64(time.Minute)},
			"RL.RESERVE llm QUOTA 5000 PER month TZ Europe/Paris COST 40 TTL 60000"},
	} {
		var words []string
		for _, a := range reserveArgs(&c.call, c.o) {
			words = append(words, string(a))
		}
		if got := strings.Join(words, " "); got != c.want {
			t.Errorf("reserveArgs:\n got %s\nwant %s", got, c.want)
		}
	}
}
