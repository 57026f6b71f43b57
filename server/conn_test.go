package server

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/access"
	"github.com/sluice-rl/sluice/testsupport/resptest"
)

func TestConnectionCommands(t *testing.T) {
	s := startServer(t, nil)
	c := resptest.Dial(t, s.RespAddr())
	script(t, c, []exchange{
		{cmd("PING"), "+PONG"},
		{cmd("ping", "hello"), `"hello"`},
		{cmd("PING", "a", "b"), "-ERR wrong number of arguments for 'ping' command"},
		{cmd("ECHO", "x y"), `"x y"`},
		{cmd("HELLO", "4"), "-NOPROTO sorry, this protocol version is not supported"},
		{cmd("HELLO", "two"), "-ERR Protocol version is not an integer or out of range"},
		{cmd("HELLO", "2", "SETNAME", "gw-1"), `["server" "sluice" "version" "` + Version + `" "proto" 2 "id" 1 "mode" "standalone" "role" "master" "modules" []]`},
		{cmd("CLIENT", "GETNAME"), `"gw-1"`},
		{cmd("CLIENT", "SETNAME", "bad name"), "-ERR Client names cannot contain spaces, newlines or special characters."},
		{cmd("CLIENT", "SETNAME", "api"), "+OK"},
		{cmd("CLIENT", "ID"), "1"},
		{cmd("CLIENT", "SETINFO", "LIB-NAME", "go-redis(,go1.26)"), "+OK"},
		{cmd("CLIENT", "SETINFO", "LIB-VER", "9.0.0"), "+OK"},
		{cmd("CLIENT", "SETINFO", "COLOR", "blue"), "-ERR Unrecognized option 'COLOR'"},
		{cmd("CLIENT", "FROB"), "-ERR unknown subcommand or wrong number of arguments for 'FROB'. Try CLIENT HELP."},
		{cmd("SELECT", "0"), "+OK"},
		{cmd("SELECT", "1"), "-ERR DB index is out of range (sluice has database 0 only)"},
		{cmd("SELECT", "x"), "-ERR value is not an integer or out of range"},
		{cmd("AUTH", "pw"), "-ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?"},
		{cmd("NOSUCH", "a", "b"), "-ERR unknown command 'NOSUCH', with args beginning with: 'a' 'b' "},
		{cmd("DBSIZE", "x"), "-ERR wrong number of arguments for 'dbsize' command"},
		{cmd("CONFIG", "GET", "max*"), `["max-args" "4096" "max-bucket-len-placeholder"]`[:0] + `["max-args" "4096" "max-buckets" "10000000" "max-bulk-len" "33554432" "max-client-buffers" "1073741824" "max-data-memory" "268435456" "max-key-len" "1024" "max-quota-counters" "1000000" "max-reservations" "1000000" "maxclients" "10000"]`},
		{cmd("CONFIG", "GET", "nothing-like-this"), "[]"},
		{cmd("CONFIG", "SET", "maxclients", "5"), "-ERR CONFIG SET is not supported: settings are fixed at start (flags, SLUICE_* variables, --config file)"},
		{cmd("COMMAND", "INFO", "rl.acquire", "nosuch"), `[["rl.acquire" -2 [] 1 1 1 [] [] [] []] nil]`},
		{cmd("COMMAND", "INFO", "ping"), `[["ping" -1 [+fast] 0 0 0 [] [] [] []]]`},
		{cmd("RESET"), "+RESET"},
		{cmd("CLIENT", "GETNAME"), "nil"},
	})
	info := c.Do("CLIENT", "INFO")
	for _, want := range []string{"id=1 ", "name= ", "lib-name=go-redis(,go1.26)", "lib-ver=9.0.0", "cmd=client"} {
		if !strings.Contains(info, want) {
			t.Errorf("CLIENT INFO %s lacks %q", info, want)
		}
	}
	// COMMAND shows a client every command; the operations nodes send
	// each other are none of them (package peer answers those).
	if n := c.Do("COMMAND", "COUNT"); n != fmt.Sprint(len(s.reg.Commands())) {
		t.Errorf("COMMAND COUNT %s; %d commands", n, len(s.reg.Commands()))
	}
	for _, internal := range []string{"rl.sync", "rl.lease", "rl.slot", "rl.quotasync", "rl.topsummary"} {
		if got := c.Do("COMMAND", "INFO", internal); got != "[nil]" {
			t.Errorf("COMMAND INFO %s: %s", internal, got)
		}
		if list := c.Do("COMMAND", "LIST"); strings.Contains(list, `"`+internal+`"`) {
			t.Errorf("COMMAND LIST names %s", internal)
		}
	}
	docs := c.Do("COMMAND", "DOCS", "RL.ACQUIRE")
	if !strings.HasPrefix(docs, `["rl.acquire" ["summary" "Check a limit`) {
		t.Errorf("COMMAND DOCS: %s", docs)
	}
	all := c.Do("INFO")
	for _, sec := range []string{"# Server", "# Clients", "# Stats", "# Memory", "# Buckets", "sluice_version:" + Version, "connected_clients:1"} {
		if !strings.Contains(all, sec) {
			t.Errorf("INFO lacks %q", sec)
		}
	}
	if one := c.Do("INFO", "buckets"); strings.Contains(one, "# Server") || !strings.Contains(one, "buckets:0") {
		t.Errorf("INFO buckets: %s", one)
	}
	if tm := c.Do("TIME"); !strings.HasPrefix(tm, `["1`) {
		t.Errorf("TIME %s", tm)
	}
	c2 := resptest.Dial(t, s.RespAddr())
	c2.Do("CLIENT", "SETNAME", "victim")
	if list := c.Do("CLIENT", "LIST"); !strings.Contains(list, "name=victim") || strings.Count(list, "id=") != 2 {
		t.Errorf("CLIENT LIST %s", list)
	}
	if got := c.Do("CLIENT", "KILL", "ID", "2"); got != "1" {
		t.Fatalf("CLIENT KILL ID 2: %s", got)
	}
	if !c2.Closed(2 * time.Second) {
		t.Fatal("killed client still open")
	}
	if got := c.Do("QUIT"); got != "+OK" || !c.Closed(2*time.Second) {
		t.Fatalf("QUIT: %s", got)
	}
}

func TestAuthAndRoles(t *testing.T) {
	dir := t.TempDir()
	hash := func(pw string) string { h := sha256.Sum256([]byte(pw)); return hex.EncodeToString(h[:]) }
	acl := filepath.Join(dir, "users.acl")
	os.WriteFile(acl, []byte("# users\nuser gateway limiter "+hash("gw-secret")+"\nuser ops admin sha256:"+hash("ops-secret")+"\n"), 0o600)
	s := startServer(t, func(c *Config) { c.RequirePass = "s3cret"; c.ACLFile = acl })
	fixClock(s)
	c := resptest.Dial(t, s.RespAddr())
	script(t, c, []exchange{
		{cmd("PING"), "-NOAUTH Authentication required."},
		{cmd("RL.ACQUIRE", "k", "RATE", "5"), "-NOAUTH Authentication required."},
		{cmd("HELLO", "2", "SETNAME", "sneaky"), "-NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time"},
		{cmd("HELLO", "2", "AUTH", "default", "nope", "SETNAME", "sneaky"), "-WRONGPASS invalid username-password pair or user is disabled."},
		{cmd("HELLO", "1", "AUTH", "default", "s3cret"), "-NOPROTO sorry, this protocol version is not supported"},
		{cmd("HELLO", "2"), "-NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time"},
		{cmd("AUTH", "wrong"), "-WRONGPASS invalid username-password pair or user is disabled."},
		{cmd("AUTH", "nobody", "s3cret"), "-WRONGPASS invalid username-password pair or user is disabled."},
		{cmd("AUTH", "gateway", "gw-secret"), "+OK"},
		{cmd("RL.ACQUIRE", "k", "RATE", "5"), `[1 4 5 0 200 "k"]`},
		{cmd("CL.THROTTLE", "c", "1", "1", "1"), "[0 2 1 -1 1]"},
		{cmd("RL.PEEK", "k"), `[1 3 5 0 400 "k"]`},
		{cmd("RL.RESET", "k"), "-NOPERM User gateway has no permissions to run the 'rl.reset' command"},
		{cmd("RL.REFUND", "k", "COST", "1"), "-NOPERM User gateway has no permissions to run the 'rl.refund' command"},
		{cmd("RL.QUOTA", "q", "QUOTA", "5", "PER", "day"), `["level" "q" "limit" 5 "used" 0 "remaining" 5 "period" "day" "resets_at" ` + fmt.Sprint(t0/1e9+86400) + ` "reset_after_ms" 86400000]`},
		{cmd("RL.QUOTA", "RESET", "q", "QUOTA", "5", "PER", "day"), "-NOPERM this user has no permissions to run the 'rl.quota' command or its subcommand"},
		{cmd("RL.QUOTASYNC", "n1", "{}"), "-ERR unknown command 'RL.QUOTASYNC', with args beginning with: 'n1' '{}' "},
		{cmd("CONFIG", "GET", "*"), "-NOPERM User gateway has no permissions to run the 'config' command"},
		{cmd("CLIENT", "LIST"), "-NOPERM this user has no permissions to run the 'client' command or its subcommand"},
		{cmd("AUTH", "ops", "ops-secret"), "+OK"},
		{cmd("RL.RESET", "k"), "1"},
		{cmd("RESET"), "+RESET"},
		{cmd("PING"), "-NOAUTH Authentication required."},
		{cmd("HELLO", "2", "AUTH", "default", "s3cret"), `["server" "sluice" "version" "` + Version + `" "proto" 2 "id" 1 "mode" "standalone" "role" "master" "modules" []]`},
		{cmd("CLIENT", "GETNAME"), "nil"}, // the refused HELLOs set no name
		{cmd("CONFIG", "GET", "requirepass"), `["requirepass" "********"]`},
	})
}

func TestProtocolLimits(t *testing.T) {
	s := startServer(t, func(c *Config) { c.MaxBulkLen = 1 << 20; c.MaxArgs = 1024 })
	fixClock(s)
	bystander := resptest.Dial(t, s.RespAddr())
	bystander.Do("RL.ACQUIRE", "keep", "RATE", "1", "PER", "hour", "BURST", "5")
	cases := []struct {
		name  string
		input []byte
		want  string
	}{
		{"600 MB bulk length", []byte("*2\r\n$4\r\nECHO\r\n$629145600\r\nxxxx"), "-ERR Protocol error: invalid bulk length (at most 1048576 bytes, --max-bulk-len)"},
		{"100000 arguments", []byte("*100000\r\n$4\r\nPING\r\n"), "-ERR Protocol error: invalid multibulk length (at most 1024 arguments, --max-args)"},
		{"negative bulk", []byte("*1\r\n$-5\r\n"), "-ERR Protocol error: invalid bulk length"},
		{"letters in a length", []byte("*1\r\n$abc\r\n"), "-ERR Protocol error: invalid bulk length"},
		{"missing dollar", []byte("*1\r\n:5\r\n"), "-ERR Protocol error: expected '$', got ':'"},
		{"inline over 64 KiB", append(bytes.Repeat([]byte("a"), 70000), '\n'), "-ERR Protocol error: too big inline request"},
		{"binary garbage", []byte("*\x00\xff\xfe\r\n"), "-ERR Protocol error: invalid multibulk length"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := resptest.Dial(t, s.RespAddr())
			// A valid command first: it is answered before the violation.
			c.Write(append(resptest.Encode("PING"), tc.input...))
			if got := c.Read(); got != "+PONG" {
				t.Fatalf("first reply %s", got)
			}
			if got := c.Read(); got != tc.want {
				t.Fatalf("got %s\nwant %s", got, tc.want)
			}
			if !c.Closed(2 * time.Second) {
				t.Fatal("connection left open after a protocol violation")
			}
		})
	}
	// Inline commands (telnet style) work within the limit, with Redis's
	// quoting; empty commands (*0, *-1, blank lines) are ignored as Redis does.
	c := resptest.Dial(t, s.RespAddr())
	c.Write([]byte("PING\r\nECHO \"two words\\x41\\n\" 'it\\'s'\r\n\r\n*0\r\n*-1\r\n"))
	c.Write(resptest.Encode("ECHO", "after"))
	if a, b, d := c.Read(), c.Read(), c.Read(); a != "+PONG" || b != "-ERR wrong number of arguments for 'echo' command" || d != `"after"` {
		t.Fatalf("inline: %s %s %s", a, b, d)
	}
	c.Write([]byte("ECHO \"two words\\x41\\n\"\r\nECHO 'it\\'s'\r\n"))
	if a, b := c.Read(), c.Read(); a != `"two wordsA\n"` || b != `"it's"` {
		t.Fatalf("inline quoting: %s %s", a, b)
	}
	c.Write([]byte("ECHO \"open\r\n"))
	if got := c.Read(); got != "-ERR Protocol error: unbalanced quotes in request" || !c.Closed(2*time.Second) {
		t.Fatalf("unbalanced quotes: %s", got)
	}
	// The other client kept being served, and nothing changed.
	if got := bystander.Do("RL.PEEK", "keep", "COST", "0"); got != `[1 4 5 0 3600000 "keep"]` {
		t.Fatalf("bystander: %s", got)
	}
	if got := bystander.Do("DBSIZE"); got != "1" {
		t.Fatalf("DBSIZE %s", got)
	}
}

func TestPipelineOnePass(t *testing.T) {
	s := startServer(t, nil)
	fixClock(s)
	c := resptest.Dial(t, s.RespAddr())
	var buf bytes.Buffer
	const n = 2000
	for i := 0; i < n; i++ {
		buf.Write(resptest.Encode("RL.ACQUIRE", "p", "RATE", "1", "PER", "hour", "BURST", "1500"))
	}
	c.Write(buf.Bytes())
	admitted := 0
	for i := 0; i < n; i++ {
		if strings.HasPrefix(c.Read(), "[1 ") {
			admitted++
		}
	}
	if admitted != 1500 {
		t.Fatalf("admitted %d of a %d-command pipeline, want 1500", admitted, n)
	}
}

func TestMaxClients(t *testing.T) {
	s := startServer(t, func(c *Config) { c.MaxClients = 2 })
	a := resptest.Dial(t, s.RespAddr())
	b := resptest.Dial(t, s.RespAddr())
	a.Do("PING")
	b.Do("PING")
	c := resptest.Dial(t, s.RespAddr())
	if got := c.Read(); got != "-ERR max number of clients reached" || !c.Closed(2*time.Second) {
		t.Fatalf("third client: %s", got)
	}
	a.Conn.Close()
	waitFor(t, func() bool { return s.env.Clients.Len() == 1 })
	d := resptest.Dial(t, s.RespAddr())
	if got := d.Do("PING"); got != "+PONG" {
		t.Fatalf("after one left: %s", got)
	}
}

func TestProtectedMode(t *testing.T) {
	if !access.IsLoopback("127.0.0.1:1") || !access.IsLoopback("[::1]:1") || access.IsLoopback("10.0.0.1:1") {
		t.Fatal("isLoopback")
	}
	ip := firstNonLoopbackIP()
	if ip == "" {
		t.Log("no non-loopback interface on this machine: protected mode checked through isLoopback only")
		return
	}
	s := startServer(t, func(c *Config) { c.RespAddr = "0.0.0.0:0" })
	_, port, _ := net.SplitHostPort(s.RespAddr())
	c := resptest.Dial(t, net.JoinHostPort(ip, port))
	if got := c.Read(); !strings.HasPrefix(got, "-DENIED sluice is running in protected mode") {
		t.Fatalf("non-loopback client: %s", got)
	}
	local := resptest.Dial(t, net.JoinHostPort("127.0.0.1", port))
	if got := local.Do("PING"); got != "+PONG" {
		t.Fatal(got)
	}
	s2 := startServer(t, func(c *Config) { c.RespAddr = "0.0.0.0:0"; c.RequirePass = "pw" })
	_, port2, _ := net.SplitHostPort(s2.RespAddr())
	remote := resptest.Dial(t, net.JoinHostPort(ip, port2))
	if got := remote.Do("AUTH", "pw"); got != "+OK" {
		t.Fatalf("with a password, remote clients are accepted: %s", got)
	}
}

func firstNonLoopbackIP() string {
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			return n.IP.String()
		}
	}
	return ""
}

func TestGracefulShutdown(t *testing.T) {
	s := startServer(t, nil)
	fixClock(s)
	idle := resptest.Dial(t, s.RespAddr())
	idle.Do("PING")
	busy := resptest.Dial(t, s.RespAddr())
	busy.Do("RL.ACQUIRE", "w", "RATE", "1", "PER", "minute", "BURST", "1")
	// Due in a minute: held until the server stops, then refused with the
	// reservation given back.
	busy.Send("RL.ACQUIRE", "w", "RATE", "1", "PER", "minute", "BURST", "1", "WAIT", "60000")
	waitFor(t, func() bool { return s.env.Metrics.Waiting() == 1 })
	done := make(chan struct{})
	go func() { s.Shutdown(); close(done) }()
	if got := busy.Read(); got != `[0 0 1 60000 60000 "w"]` {
		t.Fatalf("held reply at shutdown: %s", got)
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("shutdown did not finish")
	}
	if !busy.Closed(time.Second) || !idle.Closed(time.Second) {
		t.Fatal("connections left open after shutdown")
	}
	if _, err := net.DialTimeout("tcp", s.RespAddr(), time.Second); err == nil {
		t.Fatal("still accepting after shutdown")
	}
}

// waitFor polls cond until it holds, failing after 10s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
