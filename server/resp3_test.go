package server

import (
	"bytes"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/testsupport/resptest"
)

// HELLO 3 and HELLO 2 switch one connection back and forth; replies keep
// their shapes, and those that are maps in Redis become maps.
func TestHELLOSwitchesProtocolsOnOneConnection(t *testing.T) {
	s := startServer(t, nil)
	fixClock(s)
	c := resptest.Dial(t, s.RespAddr())
	hello := func(p string) string {
		return `{"server" "sluice" "version" "` + Version + `" "proto" ` + p + ` "id" 1 "mode" "standalone" "role" "master" "modules" []}`
	}
	quota := `"level" "q" "limit" 5 "used" 0 "remaining" 5 "period" "day" "resets_at" 1700092800 "reset_after_ms" 86400000`
	script(t, c, []exchange{
		{cmd("CLIENT", "GETNAME"), "nil"},
		{cmd("HELLO", "3"), hello("3")},
		{cmd("RL.ACQUIRE", "k", "RATE", "5"), `[1 4 5 0 200 "k"]`},
		{cmd("CL.THROTTLE", "c", "1", "1", "1"), "[0 2 1 -1 1]"},
		{cmd("CLIENT", "GETNAME"), "_"},
		{cmd("RL.QUOTA", "q", "QUOTA", "5", "PER", "day"), "{" + quota + "}"},
		{cmd("CONFIG", "GET", "maxclients"), `{"maxclients" "10000"}`},
		{cmd("RL.BUDGET", "GET", "nosuch"), "_"},
		{cmd("INFO", "keyspace"), `=txt "# Keyspace\r\ndb0:keys=2,expires=2,avg_ttl=0\r\n"`},
		{cmd("COMMAND", "INFO", "ping"), `[["ping" -1 ~[+fast] 0 0 0 ~[] [] [] []]]`},
		{cmd("HELLO"), hello("3")},
		{cmd("HELLO", "2"), `["server" "sluice" "version" "` + Version + `" "proto" 2 "id" 1 "mode" "standalone" "role" "master" "modules" []]`},
		{cmd("RL.ACQUIRE", "k", "RATE", "5"), `[1 3 5 0 400 "k"]`},
		{cmd("CLIENT", "GETNAME"), "nil"},
		{cmd("RL.QUOTA", "q", "QUOTA", "5", "PER", "day"), "[" + quota + "]"},
		{cmd("HELLO", "3"), hello("3")},
		{cmd("RESET"), "+RESET"},
		{cmd("CLIENT", "GETNAME"), "nil"}, // RESET is back to RESP2, as in Redis
	})
	if info := c.Do("CLIENT", "INFO"); !strings.Contains(info, " resp=2 ") || !strings.Contains(info, " fd=") || strings.Contains(info, " fd=-1 ") {
		t.Fatalf("CLIENT INFO %s", info)
	}
	c.Do("HELLO", "3")
	if info := c.Do("CLIENT", "INFO"); !strings.HasPrefix(info, `=txt "id=1 `) || !strings.Contains(info, " resp=3 ") {
		t.Fatalf("CLIENT INFO in RESP3: %s", info)
	}
}

// A transaction sent as one pipeline, as clients send it: every reply
// comes back; DISCARD and an aborted EXEC run nothing.
func TestTransactions(t *testing.T) {
	s := startServer(t, nil)
	fixClock(s)
	c := resptest.Dial(t, s.RespAddr())
	var b bytes.Buffer
	for _, cmd := range [][]string{
		{"MULTI"},
		{"RL.ACQUIRE", "tx", "RATE", "2"},
		{"RL.ACQUIRE", "tx", "RATE", "2"},
		{"RL.ACQUIRE", "tx", "RATE", "2"},
		{"RL.ACQUIRE", "tx", "RATE", "x"},
		{"EXEC"},
	} {
		b.Write(resptest.Encode(cmd...))
	}
	c.Write(b.Bytes())
	for i, want := range []string{"+OK", "+QUEUED", "+QUEUED", "+QUEUED", "+QUEUED",
		`[[1 1 2 0 500 "tx"] [1 0 2 0 1000 "tx"] [0 0 2 500 1000 "tx"] -ERR RATE must be an integer between 1 and 1000000000000]`} {
		if got := c.Read(); got != want {
			t.Fatalf("reply %d: got %s want %s", i, got, want)
		}
	}
	script(t, c, []exchange{
		{cmd("MULTI"), "+OK"},
		{cmd("RL.ACQUIRE", "d", "RATE", "2"), "+QUEUED"},
		{cmd("DISCARD"), "+OK"},
		{cmd("MULTI"), "+OK"},
		{cmd("RL.ACQUIRE", "a", "RATE", "2"), "+QUEUED"},
		{cmd("RL.ACQUIRE"), "-ERR wrong number of arguments for 'rl.acquire' command"},
		{cmd("EXEC"), "-EXECABORT Transaction discarded because of previous errors."},
		{cmd("DBSIZE"), "1"}, // tx only: nothing ran on DISCARD or EXECABORT
		{cmd("WATCH", "tx"), "-ERR WATCH is not supported: a bucket changes with every call and as time passes, so a watched transaction could never run; use MULTI/EXEC without WATCH"},
	})
	// A transaction's queue is per connection: another client's commands
	// run while it is open, and a closed connection's queue is dropped.
	other := resptest.Dial(t, s.RespAddr())
	c.Do("MULTI")
	c.Do("RL.ACQUIRE", "open", "RATE", "2")
	if got := other.Do("RL.PEEK", "open", "RATE", "2", "COST", "0"); got != `[1 2 2 0 0 "open"]` {
		t.Fatalf("other connection during MULTI: %s", got)
	}
	if got := other.Do("CLIENT", "LIST"); !strings.Contains(got, "flags=x ") || !strings.Contains(got, " multi=1 ") {
		t.Fatalf("CLIENT LIST does not show the open transaction: %s", got)
	}
	c.Conn.Close()
	waitFor(t, func() bool { return s.env.Clients.Len() == 1 })
	if got := other.Do("DBSIZE"); got != "1" {
		t.Fatalf("DBSIZE after a client left mid-transaction: %s", got)
	}
}

// What rueidis sends by default: tracking in OPTIN mode is accepted, and
// a command it would cache (CLIENT CACHING YES, MULTI, PTTL, command, EXEC)
// is refused, so nothing is cached and nothing runs.
func TestClientTrackingOptIn(t *testing.T) {
	s := startServer(t, nil)
	fixClock(s)
	c := resptest.Dial(t, s.RespAddr())
	c.Do("HELLO", "3")
	script(t, c, []exchange{
		{cmd("CLIENT", "TRACKING", "ON", "OPTIN"), "+OK"},
		{cmd("CLIENT", "CACHING", "YES"), "+OK"},
		{cmd("MULTI"), "+OK"},
		{cmd("PTTL", "k"), "-" + errCachingText},
		{cmd("RL.PEEK", "k", "RATE", "5"), "-" + errCachingText},
		{cmd("EXEC"), "-EXECABORT Transaction discarded because of previous errors."},
		{cmd("RL.ACQUIRE", "k", "RATE", "5"), `[1 4 5 0 200 "k"]`},
		{cmd("CLIENT", "TRACKING", "ON", "BCAST"), "-ERR sluice accepts CLIENT TRACKING ON only with OPTIN: no sluice reply can be cached (each describes state that changes with every call and as time passes), and in OPTIN mode nothing is tracked unless asked for. Turn client-side caching off in the client (rueidis: DisableCache) or use OPTIN"},
	})
	if got := c.Do("CLIENT", "INFO"); !strings.Contains(got, "flags=t ") {
		t.Fatalf("CLIENT INFO of a tracking client: %s", got)
	}
}

const errCachingText = "ERR sluice replies cannot be cached client-side: each describes limiter state that changes with every call and as time passes, " +
	"so no invalidation could ever be sent for it. Send the command without CLIENT CACHING YES (rueidis: Do, not DoCache)"

// SCAN walks every live bucket once, a few at a time; TYPE and PTTL
// describe them.
func TestScanTypeTTL(t *testing.T) {
	s := startServer(t, nil)
	fixClock(s)
	c := resptest.Dial(t, s.RespAddr())
	c.Do("RL.BUDGET", "SET", "acme/api", "RATE", "10", "SCOPE", "user")
	want := map[string]bool{"acme/api#alice": true}
	c.Do("RL.ACQUIRE", "acme/api", "KEY", "alice")
	for i := 0; i < 300; i++ {
		k := "k" + strings.Repeat("x", i%7) + string(rune('a'+i%26)) + string(rune('a'+i/26))
		c.Do("RL.ACQUIRE", k, "RATE", "1", "PER", "hour")
		want[k] = true
	}
	seen := map[string]int{}
	cursor := "0"
	for {
		r := c.Do("SCAN", cursor, "COUNT", "7")
		// ["cursor" ["k1" "k2" …]]
		head, rest, _ := strings.Cut(strings.TrimPrefix(r, "["), " ")
		cursor = strings.Trim(head, `"`)
		for _, k := range strings.Fields(strings.Trim(rest, "[]")) {
			seen[strings.Trim(k, `"`)]++
		}
		if cursor == "0" {
			break
		}
	}
	for k := range want {
		if seen[k] != 1 {
			t.Errorf("SCAN returned %q %d times", k, seen[k])
		}
	}
	if len(seen) != len(want) {
		t.Errorf("SCAN returned %d keys, want %d", len(seen), len(want))
	}
	script(t, c, []exchange{
		{cmd("SCAN", "0", "MATCH", "acme/*", "COUNT", "1000"), `["0" ["acme/api#alice"]]`},
		{cmd("SCAN", "0", "TYPE", "token_bucket", "MATCH", "acme*", "COUNT", "1000"), `["0" ["acme/api#alice"]]`},
		{cmd("SCAN", "0", "TYPE", "gcra", "COUNT", "1000"), `["0" []]`},
		{cmd("TYPE", "acme/api#alice"), "+token_bucket"},
		{cmd("PTTL", "acme/api#alice"), "100"},
		{cmd("TTL", "kaa"), "3600"},
		{cmd("SCAN", "0", "COUNT", "0"), "-ERR COUNT must be an integer between 1 and 1048576"},
		{cmd("SCAN", "0", "MATCH"), "-ERR syntax error"},
	})
}
