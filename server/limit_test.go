package server

import (
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/testsupport/resptest"
)

func TestAcquireInline(t *testing.T) {
	s := startServer(t, nil)
	clk := fixClock(s)
	c := resptest.Dial(t, s.RespAddr())
	script(t, c, []exchange{
		{cmd("RL.ACQUIRE", "k", "RATE", "10", "BURST", "3"), `[1 2 3 0 100 "k"]`},
		{cmd("rl.acquire", "k", "rate", "10", "burst", "3", "cost", "2"), `[1 0 3 0 300 "k"]`},
		{cmd("RL.ACQUIRE", "k", "RATE", "10", "BURST", "3"), `[0 0 3 100 300 "k"]`},
		{cmd("RL.ACQUIRE", "k", "RATE", "10", "BURST", "3", "COST", "4"), `[0 0 3 -1 300 "k"]`},
		{cmd("RL.ACQUIRE", "k", "RATE", "10", "BURST", "3", "COST", "0"), `[1 0 3 0 300 "k"]`},
		{cmd("RL.ACQUIRE", "d", "RATE", "1", "PER", "day", "DRYRUN"), `[1 0 1 0 86400000 "d"]`},
		{cmd("DBSIZE"), "1"},
		{cmd("RL.ACQUIRE", "m", "RATE", "60", "PER", "minute"), `[1 59 60 0 1000 "m"]`},
		{cmd("RL.ACQUIRE", "h", "RATE", "2", "PER", "1h30m", "ALGO", "gcra"), `[1 1 2 0 2700000 "h"]`},
		{cmd("RL.ACQUIRE", "w", "RATE", "5", "PER", "250ms", "ALGO", "fixed_window"), `[1 4 5 0 250 "w"]`},
		{cmd("RL.ACQUIRE", "s", "RATE", "5", "PER", "2s", "ALGO", "sliding_window", "BURST", "5"), `[1 4 5 0 4000 "s"]`},
		{cmd("RL.ACQUIRE", "big", "RATE", "100000", "BURST", "100000", "COST", "99999"), `[1 1 100000 0 1000 "big"]`},
	})
	clk.Advance(100 * time.Millisecond)
	script(t, c, []exchange{
		{cmd("RL.ACQUIRE", "k", "RATE", "10", "BURST", "3"), `[1 0 3 0 300 "k"]`},
		{cmd("RL.PEEK", "k"), `[0 0 3 100 300 "k"]`},
		{cmd("RL.PEEK", "k", "COST", "0"), `[1 0 3 0 300 "k"]`},
		{cmd("RL.REFUND", "k", "COST", "2"), `[1 2 3 0 100 "k"]`},
		{cmd("RL.PEEK", "k", "RATE", "10", "BURST", "3", "COST", "2"), `[1 0 3 0 300 "k"]`},
		{cmd("RL.REFUND", "k", "COST", "50"), `[1 3 3 0 0 "k"]`},
		{cmd("RL.RESET", "m"), "1"},
		{cmd("RL.RESET", "m"), "0"},
		{cmd("RL.PEEK", "never-seen"), "-NOBUDGET no budget node on path 'never-seen' and no bucket for that key; give RATE … to name an inline limit"},
		{cmd("RL.PEEK", "never-seen", "RATE", "5"), `[1 4 5 0 200 "never-seen"]`},
		{cmd("RL.ACQUIRE", "tenant/a"), "-NOBUDGET no budget node on path 'tenant/a'"},
		{cmd("RL.RESET", "k", "KEY", "u"), "-NOBUDGET no budget node on path 'k'; KEY applies to budget paths only"},
		{cmd("RL.PEEK", "k", "KEY", "u"), "-NOBUDGET no budget node on path 'k'; KEY applies to budget paths only"},
	})
}

func TestAcquireErrors(t *testing.T) {
	s := startServer(t, func(c *Config) { c.MaxKeyLen = 64 })
	fixClock(s)
	c := resptest.Dial(t, s.RespAddr())
	script(t, c, []exchange{
		{cmd("RL.ACQUIRE"), "-ERR wrong number of arguments for 'rl.acquire' command"},
		{cmd("RL.ACQUIRE", "k", "RATE", "0"), "-ERR RATE must be an integer between 1 and 1000000000000"},
		{cmd("RL.ACQUIRE", "k", "RATE", "-3"), "-ERR RATE must be an integer between 1 and 1000000000000"},
		{cmd("RL.ACQUIRE", "k", "RATE", "ten"), "-ERR RATE must be an integer between 1 and 1000000000000"},
		{cmd("RL.ACQUIRE", "k", "RATE", "1.5"), "-ERR RATE must be an integer between 1 and 1000000000000"},
		{cmd("RL.ACQUIRE", "k", "RATE", "99999999999999999999999"), "-ERR RATE must be an integer between 1 and 1000000000000"},
		{cmd("RL.ACQUIRE", "k", "RATE"), "-ERR syntax error: RATE needs a value"},
		{cmd("RL.ACQUIRE", "k", "RATE", "5", "PER", "fortnight"), "-ERR PER must be second, minute, hour, day, week or a duration such as 250ms, 5m, 1h30m, 7d, between 1ms and 3650d"},
		{cmd("RL.ACQUIRE", "k", "RATE", "5", "PER", "0s"), "-ERR PER must be second, minute, hour, day, week or a duration such as 250ms, 5m, 1h30m, 7d, between 1ms and 3650d"},
		{cmd("RL.ACQUIRE", "k", "RATE", "5", "BURST", "0"), "-ERR BURST must be an integer between 1 and 1000000000000"},
		{cmd("RL.ACQUIRE", "k", "RATE", "5", "COST", "-1"), "-ERR COST must be an integer between 0 and 1000000000000"},
		{cmd("RL.ACQUIRE", "k", "RATE", "5", "WAIT", "60001"), "-ERR WAIT must be an integer between 0 and 60000"},
		{cmd("RL.ACQUIRE", "k", "RATE", "5", "ALGO", "magic"), "-ERR ALGO must be one of token_bucket, gcra, sliding_window, fixed_window, leaky_bucket"},
		{cmd("RL.ACQUIRE", "k", "RATE", "5", "BURST", "6", "ALGO", "fixed_window"), "-ERR BURST must equal RATE for fixed_window (a window admits RATE requests)"},
		{cmd("RL.ACQUIRE", "k", "RATE", "1", "PER", "3650d", "BURST", "100000"), "-ERR BURST is too large for this rate: an empty bucket would take over 100 years to refill"},
		{cmd("RL.ACQUIRE", "k", "RATE", "5", "FROB"), "-ERR syntax error near 'FROB'"},
		{cmd("RL.ACQUIRE", "k", "BURST", "5"), "-ERR RATE is required with PER, BURST or ALGO"},
		{cmd("RL.ACQUIRE", "k", "RATE", "5", "KEY", "u"), "-ERR KEY belongs to the budget form; an inline limit's key is the first argument"},
		{cmd("RL.ACQUIRE", strings.Repeat("x", 65), "RATE", "5"), "-ERR key is too long: 65 bytes, the limit (--max-key-len) is 64"},
		{cmd("RL.REFUND", "k"), "-ERR wrong number of arguments for 'rl.refund' command"},
		{cmd("RL.REFUND", "k", "RATE", "5", "BURST", "5"), "-ERR COST is required: RL.REFUND key COST n"},
		// An option given twice is refused, whichever command and form.
		{cmd("RL.ACQUIRE", "k", "RATE", "5", "BURST", "5", "BURST", "9"), "-ERR BURST given twice"},
		{cmd("RL.ACQUIRE", "k", "RATE", "5", "rate", "6"), "-ERR RATE given twice"},
		{cmd("RL.ACQUIRE", "k", "RATE", "5", "PER", "second", "PER", "minute"), "-ERR PER given twice"},
		{cmd("RL.ACQUIRE", "k", "RATE", "5", "ALGO", "gcra", "ALGO", "gcra"), "-ERR ALGO given twice"},
		{cmd("RL.ACQUIRE", "k", "RATE", "5", "COST", "1", "COST", "2"), "-ERR COST given twice"},
		{cmd("RL.ACQUIRE", "k", "RATE", "5", "WAIT", "1", "WAIT", "2"), "-ERR WAIT given twice"},
		{cmd("RL.ACQUIRE", "k", "RATE", "5", "DRYRUN", "DRYRUN"), "-ERR DRYRUN given twice"},
		{cmd("RL.ACQUIRE", "k", "RATE", "5", "QUOTA", "10", "QUOTA", "20"), "-ERR QUOTA given twice"},
		{cmd("RL.ACQUIRE", "t/a", "KEY", "u", "KEY", "v"), "-ERR KEY given twice"},
		{cmd("RL.PEEK", "k", "RATE", "5", "BURST", "5", "BURST", "9"), "-ERR BURST given twice"},
		{cmd("RL.REFUND", "k", "COST", "1", "COST", "2"), "-ERR COST given twice"},
		{cmd("RL.RESET", "t/a", "KEY", "u", "KEY", "v"), "-ERR KEY given twice"},
		{cmd("RL.QUOTA", "k", "QUOTA", "10", "QUOTA", "20"), "-ERR QUOTA given twice"},
		{cmd("RL.BUDGET", "SET", "t", "RATE", "5", "BURST", "5", "BURST", "9"), "-ERR BURST given twice"},
		{cmd("RL.BUDGET", "IMPORT", `{"budgets":{}}`, "REPLACE", "replace"), "-ERR REPLACE given twice"},
		{cmd("DBSIZE"), "0"}, // nothing above changed state
	})
}

func TestAcquireWaitHoldsTheReply(t *testing.T) {
	s := startServer(t, nil)
	fixClock(s)
	c := resptest.Dial(t, s.RespAddr())
	script(t, c, []exchange{
		{cmd("RL.ACQUIRE", "q", "RATE", "20", "BURST", "1"), `[1 0 1 0 50 "q"]`},
		{cmd("RL.ACQUIRE", "q", "RATE", "20", "BURST", "1", "WAIT", "10"), `[0 0 1 50 50 "q"]`},
	})
	start := time.Now()
	if got := c.Do("RL.ACQUIRE", "q", "RATE", "20", "BURST", "1", "WAIT", "1000"); got != `[1 0 1 0 100 "q"]` {
		t.Fatalf("WAIT reply %s", got)
	}
	if held := time.Since(start); held < 50*time.Millisecond {
		t.Fatalf("reply came after %v, before the 50ms reservation was due", held)
	}
	// Another connection is not held up by the waiting one.
	c2 := resptest.Dial(t, s.RespAddr())
	c.Send("RL.ACQUIRE", "q", "RATE", "20", "BURST", "1", "WAIT", "60000") // due in 150ms
	if got := c2.Do("PING"); got != "+PONG" {
		t.Fatal(got)
	}
	if got := c.Read(); got != `[1 0 1 0 150 "q"]` {
		t.Fatal(got)
	}
}

func TestThrottleMatchesRedisCell(t *testing.T) {
	s := startServer(t, nil)
	clk := fixClock(s)
	c := resptest.Dial(t, s.RespAddr())
	// redis-cell's README: 15 burst, 30 per 60s.
	if got := c.Do("CL.THROTTLE", "user123", "15", "30", "60"); got != "[0 16 15 -1 2]" {
		t.Fatalf("first call: %s", got)
	}
	for i := 0; i < 15; i++ {
		c.Do("CL.THROTTLE", "user123", "15", "30", "60")
	}
	script(t, c, []exchange{
		{cmd("CL.THROTTLE", "user123", "15", "30", "60"), "[1 16 0 2 32]"},
		// quantity larger than the limit: refused, never retryable
		{cmd("CL.THROTTLE", "big", "4", "1", "1", "6"), "[1 5 5 -1 0]"},
		// quantity 0 peeks
		{cmd("CL.THROTTLE", "user123", "15", "30", "60", "0"), "[0 16 0 -1 32]"},
		// max_burst 0: one at a time, every 2s
		{cmd("CL.THROTTLE", "solo", "0", "1", "2"), "[0 1 0 -1 2]"},
		{cmd("CL.THROTTLE", "solo", "0", "1", "2"), "[1 1 0 2 2]"},
		// redis-cell's parsing: leading '+' and zeros are integers
		{cmd("CL.THROTTLE", "p", "+4", "007", "1"), "[0 5 4 -1 1]"},
		// errors, in redis-cell's words
		{cmd("CL.THROTTLE", "user123", "15", "30"), "-Cell error: Usage: cl.throttle <key> <max_burst> <count per period> <period> [<quantity>]"},
		{cmd("CL.THROTTLE"), "-Cell error: Usage: cl.throttle <key> <max_burst> <count per period> <period> [<quantity>]"},
		{cmd("CL.THROTTLE", "k", "15", "30", "60", "1", "extra"), "-Cell error: Usage: cl.throttle <key> <max_burst> <count per period> <period> [<quantity>]"},
		{cmd("CL.THROTTLE", "k", "x", "30", "60"), "-Cell error: Couldn't parse as integer: x"},
		{cmd("CL.THROTTLE", "k", "15", "3.5", "60"), "-Cell error: Couldn't parse as integer: 3.5"},
		{cmd("CL.THROTTLE", "k", "15", "30", "60", "one"), "-Cell error: Couldn't parse as integer: one"},
		{cmd("CL.THROTTLE", "k", "15", "0", "60"), "-Cell error: Zero rates are not supported"},
		{cmd("CL.THROTTLE", "k", "15", "30", "0"), "-Cell error: Zero rates are not supported"},
		{cmd("CL.THROTTLE", "k", "-1", "30", "60"), "-Cell error: max_burst must be an integer between 0 and 999999999999"},
		{cmd("CL.THROTTLE", "k", "15", "30", "60", "-2"), "-Cell error: quantity must be an integer between 0 and 1000000000000"},
	})
	// After 2s one token is back.
	clk.Advance(2 * time.Second)
	if got := c.Do("CL.THROTTLE", "user123", "15", "30", "60"); got != "[0 16 0 -1 32]" {
		t.Fatalf("after 2s: %s", got)
	}
}
