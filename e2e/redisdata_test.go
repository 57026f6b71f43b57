package e2e

import (
	"net"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/testsupport/resptest"
	"github.com/sluice-rl/sluice/testsupport/testkit"
)

// startRedis runs a redis-server without persistence on a free port.
func startRedis(t *testing.T) string {
	t.Helper()
	bin := requireTool(t, "redis-server")
	port := freePort(t)
	cmd := exec.Command(bin, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	addr := "127.0.0.1:" + port
	testkit.WaitFor(t, 20*time.Second, "redis-server to answer", func() bool {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return false
		}
		c.Close()
		return true
	})
	return addr
}

// dataConformance is the subset of Redis the data commands answer, as
// one script of calls: each is sent to redis-server and to sluice, and
// the replies, errors included, must be the same. A reply that depends
// on the instant (PTTL) is compared after rounding to the second.
var dataConformance = [][]string{
	// strings and counters
	{"GET", "s"}, {"SET", "s", "v"}, {"GET", "s"}, {"SET", "s", "w", "NX"}, {"SET", "s", "w", "XX"}, {"GET", "s"},
	{"SET", "s", "x", "GET"}, {"SET", "nosuch", "x", "XX", "GET"}, {"SET", "s", "y", "NX", "GET"},
	{"SET", "s", "v", "EX", "0"}, {"SET", "s", "v", "EX", "-5"}, {"SET", "s", "v", "EX", "x"}, {"SET", "s", "v", "PX", "100", "EX", "5"},
	{"SET", "s", "v", "EX", "10", "EX", "20"}, {"TTL", "s"}, {"SET", "s", "v", "EX", "10", "PX", "20"}, {"SET", "s", "v", "PX", "10", "KEEPTTL"},
	{"SET", "s", "v", "NX", "XX"}, {"SET", "s", "v", "KEEPTTL", "EX", "5"}, {"SET", "s", "v", "BOGUS"}, {"SET", "s"},
	{"SET", "s", "v", "EX", "100"}, {"TTL", "s"}, {"SET", "s", "v2", "KEEPTTL"}, {"TTL", "s"}, {"SET", "s", "v3"}, {"TTL", "s"},
	{"SET", "s", "v", "PX", "100000"}, {"PTTL", "s"}, {"SET", "s", "v", "EXAT", "99999999999"}, {"TTL", "s"},
	{"SET", "s", "v", "PXAT", "1"}, {"GET", "s"}, {"EXISTS", "s"},
	{"SETNX", "n", "1"}, {"SETNX", "n", "2"}, {"GET", "n"}, {"GETSET", "n", "5"}, {"GETSET", "fresh", "1"},
	{"INCR", "c"}, {"INCR", "c"}, {"INCRBY", "c", "10"}, {"DECR", "c"}, {"DECRBY", "c", "3"}, {"INCRBY", "c", "x"},
	{"INCRBY", "c", "9223372036854775807"}, {"SET", "big", "9223372036854775807"}, {"INCR", "big"}, {"SET", "neg", "-9223372036854775808"}, {"DECR", "neg"},
	{"DECRBY", "c", "-9223372036854775808"}, {"SET", "t", "abc"}, {"INCR", "t"}, {"SET", "t", "007"}, {"INCR", "t"}, {"SET", "t", " 7"}, {"INCR", "t"},
	{"SET", "t", "+7"}, {"INCR", "t"}, {"SET", "t", "-0"}, {"INCR", "t"}, {"INCRBY", "c", "01"},
	{"INCRBYFLOAT", "f", "1.5"}, {"INCRBYFLOAT", "f", "0.25"}, {"INCRBYFLOAT", "f", "x"}, {"INCRBYFLOAT", "f", "-1.75"}, {"GET", "f"},
	{"INCRBYFLOAT", "f", "3e2"}, {"INCR", "f"}, {"INCRBYFLOAT", "c", "0.5"},
	{"INCRBYFLOAT", "g", "0.1"}, {"INCRBYFLOAT", "g", "0.2"}, {"INCRBYFLOAT", "g", "1e20"}, {"HSET", "hf", "a", "1"}, {"INCRBYFLOAT", "hf", "x"},
	{"HINCRBYFLOAT", "hf", "a", "inf"}, {"HINCRBYFLOAT", "hf", "a", "0.1"}, {"HINCRBYFLOAT", "hf", "a", "0.2"},
	{"INCR", "a", "b"}, {"GET"},
	// keys and expiry
	{"DEL", "s", "n", "nosuch", "n"}, {"EXISTS", "c", "c", "nosuch"}, {"UNLINK", "c"}, {"EXISTS", "c"},
	{"SET", "e", "1"}, {"TTL", "e"}, {"PTTL", "e"}, {"TTL", "nosuch"}, {"PTTL", "nosuch"},
	{"EXPIRE", "e", "100"}, {"TTL", "e"}, {"EXPIRE", "e", "50", "GT"}, {"EXPIRE", "e", "200", "GT"}, {"TTL", "e"},
	{"EXPIRE", "e", "300", "LT"}, {"EXPIRE", "e", "10", "LT"}, {"TTL", "e"}, {"EXPIRE", "e", "10", "NX"}, {"EXPIRE", "e", "20", "XX"}, {"TTL", "e"},
	{"EXPIRE", "e", "1", "NX", "XX"}, {"EXPIRE", "e", "1", "GT", "LT"}, {"EXPIRE", "e", "1", "FOO"}, {"EXPIRE", "e", "x"},
	{"EXPIRE", "e", "9223372036854775807"}, {"PEXPIRE", "e", "9223372036854775807"},
	{"PERSIST", "e"}, {"PERSIST", "e"}, {"TTL", "e"}, {"EXPIRE", "e", "10", "XX"}, {"EXPIRE", "e", "10", "GT"}, {"EXPIRE", "e", "10", "LT"}, {"TTL", "e"},
	{"PEXPIRE", "e", "20000"}, {"PTTL", "e"}, {"EXPIREAT", "e", "99999999999"}, {"TTL", "e"}, {"PEXPIREAT", "e", "99999999999000"}, {"TTL", "e"},
	{"EXPIRE", "nosuch", "10"}, {"EXPIRE", "e", "0"}, {"EXISTS", "e"}, {"SET", "e", "1"}, {"EXPIRE", "e", "-1"}, {"GET", "e"},
	{"SET", "r", "1", "EX", "100"}, {"RENAME", "r", "r2"}, {"GET", "r"}, {"GET", "r2"}, {"TTL", "r2"}, {"RENAME", "nosuch", "x"}, {"RENAME", "r2", "r2"},
	{"TYPE", "r2"}, {"TYPE", "nosuch"},
	// hashes
	{"HSET", "h", "a", "1", "b", "2"}, {"HSET", "h", "a", "3", "c", "4"}, {"HGET", "h", "a"}, {"HGET", "h", "zz"}, {"HGET", "nosuch", "a"},
	{"HMGET", "h", "a", "zz", "b"}, {"HMGET", "nosuch", "a"}, {"HGETALL", "h"}, {"HGETALL", "nosuch"}, {"HSET", "h", "a"}, {"HSET", "h", "a", "1", "b"},
	{"HMSET", "h", "d", "5"}, {"HINCRBY", "h", "a", "10"}, {"HINCRBY", "h", "new", "-2"}, {"HINCRBY", "h", "a", "x"}, {"HSET", "h", "s", "abc"}, {"HINCRBY", "h", "s", "1"},
	{"HINCRBYFLOAT", "h", "fl", "1.5"}, {"HINCRBYFLOAT", "h", "fl", "x"}, {"HINCRBYFLOAT", "h", "s", "1"}, {"HDEL", "h", "a", "zz", "a"}, {"HGETALL", "h"},
	{"TYPE", "h"}, {"GET", "h"}, {"INCR", "h"}, {"HGET", "r2", "a"}, {"HSET", "r2", "a", "1"},
	{"HDEL", "h", "b", "c", "d", "new", "s", "fl"}, {"EXISTS", "h"}, {"HDEL", "nosuch", "a"},

	// lists
	{"LPUSH", "l", "a", "b", "c"}, {"RPUSH", "l", "d", "e"}, {"LRANGE", "l", "0", "-1"}, {"LLEN", "l"}, {"LLEN", "nosuch"},
	{"LINDEX", "l", "0"}, {"LINDEX", "l", "-1"}, {"LINDEX", "l", "99"}, {"LINDEX", "l", "x"}, {"LINDEX", "nosuch", "0"},
	{"LRANGE", "l", "1", "2"}, {"LRANGE", "l", "-2", "-1"}, {"LRANGE", "l", "3", "1"}, {"LRANGE", "l", "-100", "100"}, {"LRANGE", "l", "9", "10"},
	{"LRANGE", "nosuch", "0", "-1"}, {"LRANGE", "l", "a", "1"}, {"LTRIM", "l", "0", "2"}, {"LRANGE", "l", "0", "-1"},
	{"LPOP", "l"}, {"RPOP", "l"}, {"LPUSH", "l", "x", "y", "z"}, {"LPOP", "l", "2"}, {"RPOP", "l", "2"}, {"LPOP", "l", "0"}, {"LPOP", "l", "-1"},
	{"LPOP", "nosuch"}, {"LPOP", "nosuch", "2"}, {"LPOP", "l", "1", "2"}, {"LPOP", "l", "abc"}, {"RPOP", "l", "9"}, {"EXISTS", "l"}, {"RPUSH", "l", "1"}, {"LTRIM", "l", "5", "9"}, {"EXISTS", "l"},
	{"LPUSH", "s", "x"}, {"TYPE", "l"}, {"RPUSH", "l2", "a"}, {"TYPE", "l2"}, {"GET", "l2"}, {"LPUSH"}, {"LPUSH", "l2"},

	// scripts: conversions both ways, KEYS and ARGV, errors
	{"EVAL", "return 1", "0"}, {"EVAL", "return 3.99", "0"}, {"EVAL", "return -2.5", "0"}, {"EVAL", "return 'x'", "0"},
	{"EVAL", "return true", "0"}, {"EVAL", "return false", "0"}, {"EVAL", "return nil", "0"},
	{"EVAL", "return {1, 'a', {2, false}, nil, 5}", "0"}, {"EVAL", "return {ok='fine'}", "0"}, {"EVAL", "return {err='My Error'}", "0"},
	{"EVAL", "return redis.status_reply('PONG')", "0"}, {"EVAL", "return redis.error_reply('BAD thing')", "0"},
	{"EVAL", "return {KEYS[1], KEYS[2], ARGV[1], #ARGV}", "2", "k1", "k2", "a1", "a2"},
	{"EVAL", "return redis.call('SET', KEYS[1], ARGV[1])", "1", "sk", "v"}, {"EVAL", "return redis.call('GET', KEYS[1])", "1", "sk"},
	{"EVAL", "return redis.call('GET', KEYS[1])", "1", "nosuchkey"}, {"EVAL", "return redis.call('INCRBY', KEYS[1], 5)", "1", "ck"},
	{"EVAL", "return redis.call('INCR', KEYS[1])", "1", "sk"}, {"EVAL", "return redis.pcall('INCR', KEYS[1])", "1", "sk"},
	{"EVAL", "local r = redis.pcall('INCR', KEYS[1]); return type(r) .. ':' .. r['err']", "1", "sk"},
	{"EVAL", "return redis.call('HSET', KEYS[1], 'a', 1, 'b', 2)", "1", "hk"}, {"EVAL", "return redis.call('HMGET', KEYS[1], 'a', 'b', 'c')", "1", "hk"},
	{"EVAL", "return redis.call('HGETALL', KEYS[1])", "1", "hk"}, {"EVAL", "return redis.call('PTTL', KEYS[1])", "1", "hk"},
	{"EVAL", "return redis.call('TTL', KEYS[1])", "1", "nosuchkey"}, {"EVAL", "return redis.call('TYPE', KEYS[1])", "1", "hk"},
	{"EVAL", "return redis.call('EXISTS', KEYS[1])", "1", "hk"},
	{"EVAL", "redis.call('LPUSH', KEYS[1], 1, 2, 3) redis.call('LTRIM', KEYS[1], 0, 1) return redis.call('LRANGE', KEYS[1], 0, -1)", "1", "lk"}, {"EVAL", "return redis.sha1hex('abc')", "0"},
	{"EVAL", "return tonumber(ARGV[1]) + 1", "0", "41"}, {"EVAL", "return string.format('%d-%s', 7, 'x')", "0"},
	{"EVAL", "return math.floor(7 / 2)", "0"}, {"EVAL", "return #KEYS", "0"},
	{"EVAL", "return 1", "-1"}, {"EVAL", "return 1", "x"}, {"EVAL", "return 1", "3", "a"}, {"EVAL"},
	{"EVALSHA", "e0e1f9fabfc9d4800c877a703b823ac0578ff8db", "0"}, {"EVALSHA", "ffffffffffffffffffffffffffffffffffffffff", "0"},
	{"SCRIPT", "LOAD", "return 'loaded'"}, {"EVALSHA", "4c0bd2c8a5e11fa42c5c1d8dd2bc3a8e5fc47f89", "0"},
	{"SCRIPT", "EXISTS", "4c0bd2c8a5e11fa42c5c1d8dd2bc3a8e5fc47f89", "ffffffffffffffffffffffffffffffffffffffff"},
	{"EVAL_RO", "return redis.call('GET', KEYS[1])", "1", "ck"},
	{"EVAL", "return tostring(1/3) .. ' ' .. tostring(2^60) .. ' ' .. tostring(0.1) .. ' ' .. tostring(-7) .. ' ' .. tostring(1e300)", "0"},
	{"EVAL", "redis.call('SET', KEYS[1], 10/3) return redis.call('GET', KEYS[1])", "1", "fk"},
	{"EVAL", "redis.call('SET', KEYS[1], 2^53) return redis.call('GET', KEYS[1])", "1", "fk"},
	{"EVAL", "return x", "0"}, {"EVAL", "x = 1", "0"}, {"EVAL", "error('boom')", "0"},
	{"EVAL", "return redis.call('NOSUCHCMD')", "0"}, {"EVAL", "return redis.call()", "0"}, {"EVAL", "return redis.call('GET')", "0"},
	{"SCRIPT", "FLUSH"}, {"SCRIPT", "EXISTS", "4c0bd2c8a5e11fa42c5c1d8dd2bc3a8e5fc47f89"}, {"SCRIPT", "KILL"},
	// a hand-written token bucket: TIME, HMGET, HSET, PEXPIRE
	{"EVAL", tokenBucketLua, "1", "tb:alice", "10", "1", "1"}, {"EVAL", tokenBucketLua, "1", "tb:alice", "10", "1", "4"},
	{"EVAL", tokenBucketLua, "1", "tb:alice", "10", "1", "9"}, {"HGET", "tb:alice", "tokens"},
}

// tokenBucketLua is a token bucket as applications write it by hand:
// capacity ARGV[1], ARGV[2] tokens a second, cost ARGV[3]; it answers
// whether the call is allowed and the tokens left. Its refill over the
// few ms between the two servers' calls is below one token.
const tokenBucketLua = `
local key = KEYS[1]
local capacity = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local cost = tonumber(ARGV[3])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local b = redis.call('HMGET', key, 'tokens', 'ts')
local tokens = tonumber(b[1]) or capacity
local ts = tonumber(b[2]) or now
tokens = math.min(capacity, tokens + (now - ts) * rate / 1000)
local allowed = 0
if tokens >= cost then
  tokens = tokens - cost
  allowed = 1
end
redis.call('HSET', key, 'tokens', math.floor(tokens), 'ts', now)
redis.call('PEXPIRE', key, math.ceil(capacity / rate * 1000))
return {allowed, math.floor(tokens)}
`

// ttlish rounds a PTTL reply to the second, so that both servers' replies
// compare whatever passed between the two calls.
var pttlReply = regexp.MustCompile(`^\(integer\) (\d{4,})$|^(\d{4,})$`)

func roundPTTL(cmd, reply string) string {
	if !strings.EqualFold(cmd, "PTTL") {
		return reply
	}
	if m := pttlReply.FindStringSubmatch(reply); m != nil {
		s := m[1] + m[2]
		n, _ := strconv.ParseInt(s, 10, 64)
		return strconv.FormatInt((n+500)/1000, 10) + "s"
	}
	return reply
}

// Every command of the data subset answers as redis-server does, errors
// included (docs/redis-libraries.md lists them).
func TestDataCommandsMatchRedis(t *testing.T) {
	redisAddr := startRedis(t)
	p := single(t)
	r := resptest.Dial(t, redisAddr)
	s := resptest.Dial(t, p.Resp)
	r.Do("FLUSHALL")
	for i, call := range dataConformance {
		want := roundPTTL(call[0], r.Do(call...))
		got := roundPTTL(call[0], s.Do(call...))
		if got != want {
			t.Errorf("step %d %q:\n sluice %s\n  redis %s", i, strings.Join(call, " "), got, want)
		}
	}
}
