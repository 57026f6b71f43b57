package commands

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/access"
	"github.com/sluice-rl/sluice/testsupport/testkit"
)

// A reply as a test expects it, encoded for RESP2 or RESP3 by the test's
// own encoder (independent of the server's writer), so that every command
// is checked byte for byte in both protocols.
type rv interface{ enc(p int) string }

type (
	sstr string // +simple
	errv string // -error
	num  int64  // :integer
	blk  string // $bulk
	nul  struct{}
	nula struct{} // a missing array
	arr  []rv
	mapv []rv // key, value, key, value …
	setv []rv
	verb string // verbatim (RESP3), bulk (RESP2)
	dbl  string // a double (RESP3), bulk (RESP2)
	rex  string // a regular expression over the encoded bytes, for replies that vary
	byp  func(p int) rv
)

func (v sstr) enc(int) string { return "+" + string(v) + "\r\n" }
func (v errv) enc(int) string { return "-" + string(v) + "\r\n" }
func (v num) enc(int) string  { return ":" + strconv.FormatInt(int64(v), 10) + "\r\n" }
func (v blk) enc(int) string  { return "$" + strconv.Itoa(len(v)) + "\r\n" + string(v) + "\r\n" }
func (nul) enc(p int) string {
	if p == 3 {
		return "_\r\n"
	}
	return "$-1\r\n"
}
func (nula) enc(p int) string {
	if p == 3 {
		return "_\r\n"
	}
	return "*-1\r\n"
}
func (v arr) enc(p int) string { return "*" + strconv.Itoa(len(v)) + "\r\n" + encAll(v, p) }
func (v mapv) enc(p int) string {
	if p == 3 {
		return "%" + strconv.Itoa(len(v)/2) + "\r\n" + encAll(v, p)
	}
	return "*" + strconv.Itoa(len(v)) + "\r\n" + encAll(v, p)
}
func (v setv) enc(p int) string {
	if p == 3 {
		return "~" + strconv.Itoa(len(v)) + "\r\n" + encAll(v, p)
	}
	return arr(v).enc(p)
}
func (v verb) enc(p int) string {
	if p == 3 {
		return "=" + strconv.Itoa(len(v)+4) + "\r\ntxt:" + string(v) + "\r\n"
	}
	return blk(v).enc(p)
}
func (v dbl) enc(p int) string {
	if p == 3 {
		return "," + string(v) + "\r\n"
	}
	return blk(v).enc(p)
}
func (v rex) enc(int) string   { return string(v) }
func (f byp) enc(p int) string { return f(p).enc(p) }

func encAll(vs []rv, p int) string {
	var b strings.Builder
	for _, v := range vs {
		b.WriteString(v.enc(p))
	}
	return b.String()
}

func six(allowed, remaining, limit, retry, reset int64, by string) arr {
	return arr{num(allowed), num(remaining), num(limit), num(retry), num(reset), blk(by)}
}

type replyStep struct {
	cmd  string // split on spaces; {p} is the protocol version
	want rv
}

// TestEveryCommandRepliesExactlyInBothProtocols runs one script through the
// whole command path in RESP2 and again in RESP3 (after HELLO 3), and
// checks every reply byte for byte. Every registered command appears.
func TestEveryCommandRepliesExactlyInBothProtocols(t *testing.T) {
	t0s := int64(19676 * 86400)
	hello := byp(func(p int) rv {
		return mapv{blk("server"), blk("sluice"), blk("version"), blk("test"), blk("proto"), num(p),
			blk("id"), num(1), blk("mode"), blk("standalone"), blk("role"), blk("master"), blk("modules"), arr{}}
	})
	clientLine := `id=1 addr=127\.0\.0\.1:1 laddr=127\.0\.0\.1:2 fd=-1 name=gw age=\d+ idle=\d+ flags=%s db=0 sub=0 psub=0 ssub=0 multi=%s watch=0 ` +
		`qbuf=0 qbuf-free=0 argv-mem=0 multi-mem=%s rbs=0 rbp=0 obl=0 oll=0 omem=0 tot-mem=%[3]s events=r cmd=client user=default redir=-1 resp=%d lib-name=lib lib-ver=1\.0\n`
	verbRe := func(p int, body string) string {
		if p == 3 {
			return `^=\d+\r\ntxt:` + body + `\r\n$`
		}
		return `^\$\d+\r\n` + body + `\r\n$`
	}
	steps := []replyStep{
		{"HELLO {p}", hello},
		{"HELLO", hello},
		{"PING", sstr("PONG")},
		{"PING hi", blk("hi")},
		{"ECHO x", blk("x")},
		{"AUTH pw", errv("ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?")},
		{"SELECT 0", sstr("OK")},
		{"CLIENT SETNAME gw", sstr("OK")},
		{"CLIENT GETNAME", blk("gw")},
		{"CLIENT ID", num(1)},
		{"CLIENT SETINFO LIB-NAME lib", sstr("OK")},
		{"CLIENT SETINFO LIB-VER 1.0", sstr("OK")},
		{"CLIENT INFO", byp(func(p int) rv { return rex(verbRe(p, fmt.Sprintf(clientLine, "N", "-1", "0", p))) })},
		{"CLIENT LIST", byp(func(p int) rv { return rex(verbRe(p, fmt.Sprintf(clientLine, "N", "-1", "0", p))) })},
		{"CLIENT TRACKING ON", errv(errTrackingMode)},
		{"CLIENT TRACKING ON OPTIN", sstr("OK")},
		{"CLIENT TRACKINGINFO", mapv{blk("flags"), setv{sstr("on"), sstr("optin")}, blk("redirect"), num(0), blk("prefixes"), arr{}}},
		{"CLIENT GETREDIRECT", num(0)},
		{"CLIENT CACHING YES", sstr("OK")},
		{"RL.PEEK k RATE 5", errv(errCaching)},
		{"RL.PEEK k RATE 5", six(1, 4, 5, 0, 200, "k")}, // the mark applied to one command
		{"CLIENT CACHING NO", errv("ERR CLIENT CACHING NO is only valid when tracking is enabled in OPTOUT mode.")},
		{"CLIENT TRACKING OFF", sstr("OK")},
		{"CLIENT CACHING YES", errv("ERR CLIENT CACHING can be called only when the client is in tracking mode with OPTIN or OPTOUT mode enabled")},
		{"CLIENT TRACKINGINFO", mapv{blk("flags"), setv{sstr("off")}, blk("redirect"), num(-1), blk("prefixes"), arr{}}},
		{"CLIENT KILL ID 99", num(0)},

		{"RL.ACQUIRE t RATE 5", six(1, 4, 5, 0, 200, "t")},
		{"RL.ACQUIRE t RATE 5 COST 9", six(0, 4, 5, -1, 200, "t")},
		{"RL.PEEK t", six(1, 3, 5, 0, 400, "t")},
		{"RL.REFUND t COST 1", six(1, 5, 5, 0, 0, "t")},
		{"RL.RESET t", num(0)}, // a full bucket is forgotten
		{"RL.ACQUIRE t RATE 5", six(1, 4, 5, 0, 200, "t")},
		{"RL.RESET t", num(1)},
		{"RL.RESET t", num(0)},
		{"RL.RESERVE r RATE 10 COST 4", arr{num(1), num(6), num(10), num(0), num(400), blk("r"), blk("00000000000000010000000000000000@n0")}},
		{"RL.SETTLE 00000000000000010000000000000000@n0 ACTUAL 2", six(1, 8, 10, 0, 200, "r")},
		{"RL.SETTLE 00000000000000010000000000000000@n0 ACTUAL 2", errv("NORESERVATION no open reservation '00000000000000010000000000000000@n0': unknown, or already settled, released or expired")},
		{"RL.SETTLE 00000000000000010000000000000000@n9 ACTUAL 2", errv("NORESERVATION reservation '00000000000000010000000000000000@n9' was issued by node 'n9', which is not a member of this cluster")},
		{"RL.SETTLE x ACTUAL -1", errv("ERR ACTUAL must be an integer between 0 and 1000000000000")},
		{"RL.RELEASE 00000000000000010000000000000000@n0", num(0)},
		{"RL.RENEW 00000000000000010000000000000000@n0 TTL 1000", num(0)},
		{"RL.RENEW x TTL 0", errv("ERR TTL must be an integer between 1 and 3600000")},
		{"RL.RESERVE r RATE 10 COST 11", arr{num(0), num(8), num(10), num(-1), num(200), blk("r"), blk("")}},
		{"RL.RESERVE r RATE 10", errv("ERR COST is required: RL.RESERVE key|path … COST estimate")},
		{"RL.RESET r", num(1)},
		{"RL.RESERVE c CONCURRENCY 1 COST 1", arr{num(1), num(0), num(1), num(0), num(0), blk("concurrency:c"), blk("00000000000000030000000000000000@n0")}},
		{"RL.RESERVE c CONCURRENCY 1 COST 1", arr{num(0), num(0), num(1), num(60000), num(60000), blk("concurrency:c"), blk("")}},
		{"RL.RENEW 00000000000000030000000000000000@n0 TTL 1000", num(1)},
		{"RL.RELEASE 00000000000000030000000000000000@n0", num(1)},
		{"CL.THROTTLE u 15 30 60", arr{num(0), num(16), num(15), num(-1), num(2)}},
		{"CL.THROTTLE u x 30 60", errv("Cell error: Couldn't parse as integer: x")},
		{"RL.ACQUIRE t RATE 0", errv("ERR RATE must be an integer between 1 and 1000000000000")},

		{"RL.BUDGET SET a RATE 10", sstr("OK")},
		{"RL.BUDGET GET nosuch", nul{}},
		{"RL.BUDGET GET a", rex(`^\$\d+\r\n\{"path":"a",.*"version":\d+\}\r\n$`)},
		{"RL.BUDGET LIST", arr{blk("a")}},
		{"RL.BUDGET EXPORT", rex(`^\$\d+\r\n\{.*"a".*\}\r\n$`)},
		{"RL.ACQUIRE a", six(1, 9, 10, 0, 100, "a")},
		{"RL.QUOTA q QUOTA 5 PER day", mapv{blk("level"), blk("q"), blk("limit"), num(5), blk("used"), num(0), blk("remaining"), num(5),
			blk("period"), blk("day"), blk("resets_at"), num(t0s + 86400), blk("reset_after_ms"), num(86400000)}},
		{"RL.QUOTA RESET q QUOTA 5 PER day", num(0)},
		{"RL.BUDGET DEL a", num(1)},
		{`RL.BUDGET IMPORT {"budgets":{}}`, sstr("OK")},
		{"RL.CLUSTER INFO", byp(func(p int) rv {
			h := `^\*20\r\n`
			if p == 3 {
				h = `^%10\r\n`
			}
			return rex(h + `\$7\r\nnode_id\r\n\$2\r\nn0\r\n\$4\r\nrole\r\n\$6\r\nleader\r\n\$9\r\nleader_id\r\n\$2\r\nn0\r\n(\$\d+\r\n[^\r]*\r\n){12}\$11\r\nsync_lag_ms\r\n\$2\r\n-1\r\n$`)
		})},
		{"RL.CLUSTER NODES", rex(`^\*1\r\n\*5\r\n\$2\r\nn0\r\n\$11\r\n127\.0\.0\.1:1\r\n\$\d+\r\n127\.0\.0\.1:\d+\r\n\$5\r\nvoter\r\n\$6\r\nleader\r\n$`)},
		{"RL.CLUSTER FROB", errv("ERR unknown subcommand or wrong number of arguments for 'FROB'. Try RL.CLUSTER INFO, NODES, JOIN id raft_addr resp_addr or LEAVE id.")},
		{"RL.SYNC nosuch x", errv("ERR unknown command 'RL.SYNC', with args beginning with: 'nosuch' 'x' ")},
		{"RL.USAGE nosuch/", mapv{blk("nodes"), arr{}, blk("next"), blk("")}},
		{"RL.USAGE COUNT 0", errv("ERR COUNT must be an integer between 1 and 1000")},
		{"RL.TOP COUNT x", errv("ERR COUNT must be an integer between 1 and 1000")},
		{"RL.TOPSUMMARY DENIED", errv("ERR unknown command 'RL.TOPSUMMARY', with args beginning with: 'DENIED' ")},
		{"RL.LEASE nosuch x", errv("ERR unknown command 'RL.LEASE', with args beginning with: 'nosuch' 'x' ")},
		{"RL.SLOT nosuch HOLDS 1 k", errv("ERR unknown command 'RL.SLOT', with args beginning with: 'nosuch' 'HOLDS' '1' 'k' ")},
		{"RL.QUOTASYNC nosuch {}", errv("ERR unknown command 'RL.QUOTASYNC', with args beginning with: 'nosuch' '{}' ")},

		{"MULTI", sstr("OK")},
		{"MULTI", errv("ERR MULTI calls can not be nested")},
		{"RL.ACQUIRE m RATE 5", sstr("QUEUED")},
		{"RL.ACQUIRE m RATE 5 COST 9", sstr("QUEUED")},
		{"PING", sstr("QUEUED")},
		{"CLIENT INFO", sstr("QUEUED")},
		{"EXEC", byp(func(p int) rv {
			return arr{six(1, 4, 5, 0, 200, "m"), six(0, 4, 5, -1, 200, "m"), sstr("PONG"),
				rex(verbRe(p, fmt.Sprintf(clientLine, "x", "4", `[1-9]\d*`, p)))}
		})},
		{"EXEC", errv("ERR EXEC without MULTI")},
		{"DISCARD", errv("ERR DISCARD without MULTI")},
		{"MULTI", sstr("OK")},
		{"RL.ACQUIRE d RATE 5", sstr("QUEUED")},
		{"DISCARD", sstr("OK")},
		{"MULTI", sstr("OK")},
		{"RL.ACQUIRE e RATE 5", sstr("QUEUED")},
		{"NOSUCH", errv("ERR unknown command 'NOSUCH', with args beginning with: ")},
		{"ECHO", errv("ERR wrong number of arguments for 'echo' command")},
		{"EXEC", errv("EXECABORT Transaction discarded because of previous errors.")},
		{"WATCH k", errv("ERR WATCH is not supported: a bucket changes with every call and as time passes, so a watched transaction could never run; use MULTI/EXEC without WATCH")},
		{"UNWATCH", sstr("OK")},
		{"RL.PEEK d RATE 5 COST 0", six(1, 5, 5, 0, 0, "d")}, // DISCARD ran nothing
		{"RL.PEEK e RATE 5 COST 0", six(1, 5, 5, 0, 0, "e")}, // nor did the aborted EXEC

		{"SCAN 0 MATCH [mt] COUNT 1000", arr{blk("0"), setOrder("m")}},
		{"SCAN x", errv("ERR invalid cursor")},
		{"TYPE m", sstr("token_bucket")},
		{"TYPE u", sstr("cell")},
		{"TYPE quota:q", sstr("none")},
		{"TYPE nosuch", sstr("none")},
		{"PTTL m", num(200)},
		{"TTL m", num(1)},
		{"PTTL nosuch", num(-2)},
		{"DBSIZE", num(3)},
		{"INFO keyspace", verb("# Keyspace\r\ndb0:keys=3,expires=3,avg_ttl=0\r\n")},
		{"INFO clients", verb("# Clients\r\nconnected_clients:1\r\nblocked_clients:0\r\ntracking_clients:0\r\n")},
		{"INFO nosuch", verb("")},
		{"TIME", rex(`^\*2\r\n\$10\r\n\d{10}\r\n\$\d\r\n\d+\r\n$`)},
		{"CONFIG GET max*", mapv{blk("maxclients"), blk("10")}},

		{"SET dk 1", sstr("OK")},
		{"GET dk", blk("1")},
		{"GET nosuch", nul{}},
		{"SETNX dk 2", num(0)},
		{"GETSET dk 5", blk("1")},
		{"INCR dk", num(6)},
		{"DECR dk", num(5)},
		{"INCRBY dk 5", num(10)},
		{"DECRBY dk 3", num(7)},
		{"INCRBYFLOAT dk 0.5", blk("7.5")},
		{"INCR dk", errv("ERR value is not an integer or out of range")},
		{"EXISTS dk nosuch dk", num(2)},
		{"EXPIRE dk 100", num(1)},
		{"TTL dk", num(100)},
		{"PEXPIRE dk 200000", num(1)},
		{"PTTL dk", num(200000)},
		{"EXPIREAT dk 99999999999", num(1)},
		{"PEXPIREAT dk 99999999999000", num(1)},
		{"PERSIST dk", num(1)},
		{"TTL dk", num(-1)},
		{"TYPE dk", sstr("string")},
		{"RENAME dk dk2", sstr("OK")},
		{"UNLINK dk2", num(1)},
		{"DEL nosuch", num(0)},
		{"HSET dh a 1 b 2", num(2)},
		{"HMSET dh c 3", sstr("OK")},
		{"HGET dh a", blk("1")},
		{"HMGET dh a zz", arr{blk("1"), nul{}}},
		{"HINCRBY dh a 2", num(3)},
		{"HINCRBYFLOAT dh b 0.5", blk("2.5")},
		{"HDEL dh c", num(1)},
		{"HGETALL dh", mapv{blk("a"), blk("3"), blk("b"), blk("2.5")}},
		{"GET dh", errv("WRONGTYPE Operation against a key holding the wrong kind of value")},
		{"TYPE dh", sstr("hash")},
		{"RPUSH dl b c", num(2)},
		{"LPUSH dl a", num(3)},
		{"LLEN dl", num(3)},
		{"LINDEX dl -1", blk("c")},
		{"LRANGE dl 0 -1", arr{blk("a"), blk("b"), blk("c")}},
		{"LTRIM dl 0 1", sstr("OK")},
		{"LPOP dl", blk("a")},
		{"RPOP dl 5", arr{blk("b")}},
		{"RPOP dl", nul{}},
		{"RPOP dl 2", byp(func(p int) rv {
			if p == 3 {
				return nul{}
			}
			return rex(`^\*-1\r\n$`)
		})},
		{"HEXISTS dh a", num(1)},
		{"HLEN dh", num(2)},
		{"HKEYS dh", arr{blk("a"), blk("b")}},
		{"HVALS dh", arr{blk("3"), blk("2.5")}},
		{"ZADD dz 1 a 2.5 b 3 c", num(3)},
		{"ZADD dz INCR 1 a", dbl("2")},
		{"ZINCRBY dz 0.5 c", dbl("3.5")},
		{"ZSCORE dz b", dbl("2.5")},
		{"ZSCORE dz nosuch", nul{}},
		{"ZCARD dz", num(3)},
		{"ZCOUNT dz (2 +inf", num(2)},
		{"ZRANK dz b", num(1)},
		{"ZREVRANK dz b", num(1)},
		{"ZRANGE dz 0 -1", arr{blk("a"), blk("b"), blk("c")}},
		{"ZRANGE dz 0 0 WITHSCORES", byp(func(p int) rv {
			if p == 3 {
				return arr{arr{blk("a"), dbl("2")}}
			}
			return arr{blk("a"), blk("2")}
		})},
		{"ZRANGEBYSCORE dz 2.5 +inf LIMIT 0 1", arr{blk("b")}},
		{"ZREVRANGE dz 0 0", arr{blk("c")}},
		{"ZREVRANGEBYSCORE dz +inf -inf LIMIT 0 1", arr{blk("c")}},
		{"ZRANGE dz 0 1 BOGUS", errv("ERR syntax error")},
		{"ZCOUNT dz x 1", errv("ERR min or max is not a float")},
		{"ZREMRANGEBYRANK dz 0 0", num(1)},
		{"ZREMRANGEBYSCORE dz -inf 3", num(1)},
		{"ZREM dz c nosuch", num(1)},
		{"TYPE dz", sstr("none")},
		{"ZADD dz 1 a", num(1)},
		{"TYPE dz", sstr("zset")},
		{"KEYS d[z]", arr{blk("dz")}},
		{"EVAL return(7) 0", num(7)},
		{"EVAL return{1,'a',false} 0", arr{num(1), blk("a"), nul{}}},
		{"EVALSHA ffffffffffffffffffffffffffffffffffffffff 0", errv("NOSCRIPT No matching script. Please use EVAL.")},
		{"EVAL_RO return#KEYS 1 k", num(1)},
		{"EVALSHA_RO ffffffffffffffffffffffffffffffffffffffff 0", errv("NOSCRIPT No matching script. Please use EVAL.")},
		{"SCRIPT LOAD return(1)", blk("930269f31393d0be681588b6ab08dccee7d6bb67")},
		{"SCRIPT EXISTS 930269f31393d0be681588b6ab08dccee7d6bb67 ffff", arr{num(1), num(0)}},
		{"SCRIPT KILL", errv("NOTBUSY No scripts in execution right now.")},
		{"SCRIPT FLUSH", sstr("OK")},
		{"CONFIG GET nothing", mapv{}},
		{"MEMORY PURGE", sstr("OK")},
		{"COMMAND INFO ping nosuch", arr{arr{blk("ping"), num(-1), setv{sstr("fast")}, num(0), num(0), num(0), setv{}, arr{}, arr{}, arr{}}, nula{}}},
		{"COMMAND DOCS echo", mapv{blk("echo"), mapv{blk("summary"), blk("Return the given string."), blk("since"), blk("0.1.0"),
			blk("group"), blk("connection"), blk("complexity"), blk("O(1)"),
			blk("arguments"), arr{mapv{blk("name"), blk("message"), blk("type"), blk("string")}}}}},
		{"COMMAND DOCS time", mapv{blk("time"), mapv{blk("summary"), blk("The server's clock."), blk("since"), blk("0.1.0"),
			blk("group"), blk("server"), blk("complexity"), blk("O(1)")}}},
		{"COMMAND LIST", rex(`^\*\d+\r\n(\$\d+\r\n[a-z._]+\r\n)+$`)},
		{"ACL WHOAMI", blk("default")},
		{"ACL USERS", arr{blk("default")}},
		{"ACL LIST", arr{blk("user default on nopass ~* &* +@all")}},
		{"ACL SETUSER x", errv("ERR ACL SETUSER is not supported: users and roles come from --requirepass and --acl-file, read at start and on SIGHUP (see ACL LIST)")},
		{"RESET", sstr("RESET")},
		{"CLIENT GETNAME", nul{}}, // RESET went back to RESP2
		{"HELLO {p}", hello},
		{"QUIT", sstr("OK")},
	}
	for _, p := range []int{2, 3} {
		t.Run(fmt.Sprintf("RESP%d", p), func(t *testing.T) {
			env := testEnv(t)
			env.Settings = func() []Setting { return []Setting{{"maxclients", "10"}, {"save", ""}} }
			s := NewSession(1, "127.0.0.1:1", "127.0.0.1:2", access.RoleAdmin, func() {})
			env.Clients.Add(s)
			c := NewCapture()
			seen := map[*Command]bool{}
			for i, st := range steps {
				args := [][]byte{}
				for _, a := range strings.Fields(strings.ReplaceAll(st.cmd, "{p}", strconv.Itoa(p))) {
					args = append(args, []byte(a))
				}
				if cm := env.Registry.Lookup(args[0]); cm != nil {
					seen[cm] = true
				}
				c.Reset()
				env.Exec(c, s, args)
				got := string(c.Bytes())
				proto := p
				if i > 0 && st.cmd == "CLIENT GETNAME" && steps[i-1].cmd == "RESET" {
					proto = 2
				}
				want := st.want.enc(proto)
				if isRex(st.want, proto) {
					want = "^" + pattern(st.want, proto) + "$"
					if !regexp.MustCompile("(?s)" + want).MatchString(got) {
						t.Fatalf("step %d %q:\n got %q\nwant /%s/", i, st.cmd, got, want)
					}
					continue
				}
				if got != want {
					t.Fatalf("step %d %q:\n got %q\nwant %q", i, st.cmd, got, want)
				}
			}
			for _, cm := range env.Registry.Commands() {
				if !seen[cm] {
					t.Errorf("%s has no reply in the script", cm.Name)
				}
			}
		})
	}
}

// pattern renders an expected reply as a regular expression: its rex
// parts as they are, everything else quoted.
func pattern(v rv, p int) string {
	switch x := v.(type) {
	case rex:
		return strings.TrimSuffix(strings.TrimPrefix(string(x), "^"), "$")
	case byp:
		return pattern(x(p), p)
	case arr:
		out := regexp.QuoteMeta("*" + strconv.Itoa(len(x)) + "\r\n")
		for _, e := range x {
			out += pattern(e, p)
		}
		return out
	}
	return regexp.QuoteMeta(v.enc(p))
}

// setOrder is one bulk string in an array (SCAN's keys, here one).
func setOrder(k string) arr { return arr{blk(k)} }

// isRex reports whether v contains a regular expression part, in which
// case the whole encoding is matched as one (other parts quoted).
func isRex(v rv, p int) bool {
	switch x := v.(type) {
	case rex:
		return true
	case byp:
		return isRex(x(p), p)
	case arr:
		for _, e := range x {
			if isRex(e, p) {
				return true
			}
		}
	}
	return false
}

// The inline and budget hot paths allocate nothing in RESP3 either.
func TestAcquireAllocatesNothingInRESP3(t *testing.T) {
	env := testEnv(t)
	env.Run("RL.BUDGET", "SET", "system/p/t", "RATE", "1000000", "SCOPE", "user")
	s := NewSession(1, "127.0.0.1:1", "127.0.0.1:2", access.RoleAdmin, func() {})
	c := NewCapture()
	env.Exec(c, s, [][]byte{[]byte("HELLO"), []byte("3")})
	if s.Proto() != 3 {
		t.Fatal("HELLO 3 did not switch the session")
	}
	for _, call := range []string{
		"RL.ACQUIRE key RATE 100000 BURST 100000",
		"RL.ACQUIRE key RATE 100000 QUOTA 1000000000000 PER month TZ Europe/Paris",
		"RL.ACQUIRE system/p/t KEY user-1",
		"CL.THROTTLE u 100000 100000 1",
		"RL.PEEK key RATE 100000 BURST 100000",
	} {
		args := [][]byte{}
		for _, a := range strings.Fields(call) {
			args = append(args, []byte(a))
		}
		env.Exec(c, s, args)
		if n := testkit.LeastAllocsPerRun(200, func() {
			c.Reset()
			env.Exec(c, s, args)
		}); n != 0 {
			t.Errorf("%s: %.1f allocations a call in RESP3", call, n)
		}
	}
}

func TestSyntaxRendersBackFromCommandDocs(t *testing.T) {
	for _, c := range NewRegistry().Commands() {
		want := strings.ReplaceAll(c.Syntax, " | ", "|")
		if got := RenderArgs(c.Args(), " "); got != want {
			t.Errorf("%s: COMMAND DOCS arguments render as\n%q\nwant\n%q", c.Name, got, want)
		}
		var check func(as []Arg)
		check = func(as []Arg) {
			for _, a := range as {
				if a.Name == "" || a.Type == "" || (a.Type == "pure-token") != (a.Token != "" && len(a.Args) == 0 && a.Type == "pure-token") {
					t.Errorf("%s: malformed argument %+v", c.Name, a)
				}
				check(a.Args)
			}
		}
		check(c.Args())
	}
}
