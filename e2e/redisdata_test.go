package e2e

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
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
	// a counter kept as an integer, then read and rewritten as a string
	{"SET", "ie", "5"}, {"INCR", "ie"}, {"GET", "ie"}, {"INCRBYFLOAT", "ie", "0.5"}, {"INCR", "ie"}, {"GET", "ie"},
	{"INCR", "ie2"}, {"GETSET", "ie2", "x"}, {"INCR", "ie2"}, {"INCR", "ie3"}, {"SET", "ie3", "y", "GET"}, {"GET", "ie3"},
	{"INCRBY", "ie4", "-9223372036854775808"}, {"GET", "ie4"}, {"DECR", "ie4"}, {"INCR", "ie4"}, {"GET", "ie4"},
	{"INCR", "ie5"}, {"EXPIRE", "ie5", "100"}, {"INCR", "ie5"}, {"TTL", "ie5"}, {"RENAME", "ie5", "ie6"}, {"GET", "ie6"}, {"INCRBY", "ie6", "41"},
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

	// hashes: fields and counts
	{"HSET", "h2", "a", "1", "b", "2", "c", "3"}, {"HEXISTS", "h2", "a"}, {"HEXISTS", "h2", "zz"}, {"HEXISTS", "nosuch", "a"},
	{"HLEN", "h2"}, {"HLEN", "nosuch"}, {"HKEYS", "h2"}, {"HVALS", "h2"}, {"HKEYS", "nosuch"}, {"HVALS", "nosuch"},
	{"HDEL", "h2", "b"}, {"HKEYS", "h2"}, {"HVALS", "h2"}, {"HLEN", "h2"},
	{"HEXISTS", "l2", "a"}, {"HLEN", "l2"}, {"HKEYS", "l2"}, {"HVALS", "l2"}, {"HEXISTS", "h2"}, {"HLEN"}, {"HKEYS", "h2", "x"},

	// sorted sets: ZADD's options and scores as Redis reads and writes them
	{"ZADD", "z", "1", "a", "2", "b"}, {"ZADD", "z", "1.5", "c"}, {"ZRANGE", "z", "0", "-1", "WITHSCORES"}, {"ZCARD", "z"}, {"ZCARD", "nosuch"},
	{"ZADD", "z", "NX", "XX", "1", "a"}, {"ZADD", "z", "GT", "LT", "1", "a"}, {"ZADD", "z", "NX", "GT", "1", "a"}, {"ZADD", "z", "NX", "LT", "1", "a"},
	{"ZADD", "z", "INCR", "1", "a", "2", "b"}, {"ZADD", "z", "INCR", "1", "a"}, {"ZADD", "z", "INCR", "NX", "1", "a"}, {"ZADD", "z", "INCR", "XX", "1", "nosuch"},
	{"ZADD", "z", "x", "a"}, {"ZADD", "z", "1"}, {"ZADD", "z"}, {"ZADD", "z", "nan", "a"}, {"ZADD", "z", "1", "a", "2"}, {"ZADD", "z", "NX"}, {"ZADD", "z", "NX", "1"},
	{"ZADD", "z", "CH"}, {"ZADD", "z", "INCR", "1"}, {"ZADD", "z", "incr", "ch", "nx", "1", "fresh"},
	{"ZADD", "z", "inf", "a"}, {"ZSCORE", "z", "a"}, {"ZADD", "z", "INCR", "-inf", "a"}, {"ZADD", "z", "-inf", "a"}, {"ZSCORE", "z", "a"},
	{"ZADD", "z", "0.1", "d"}, {"ZSCORE", "z", "d"}, {"ZADD", "z", "1e300", "e"}, {"ZSCORE", "z", "e"}, {"ZADD", "z", "3.0000000000000004", "f"}, {"ZSCORE", "z", "f"},
	{"ZADD", "z", "123456789012345678", "g"}, {"ZSCORE", "z", "g"}, {"ZADD", "z", "-0", "h"}, {"ZSCORE", "z", "h"}, {"ZADD", "z", "1.5e-7", "i"}, {"ZSCORE", "z", "i"},
	{"ZADD", "z", "1e15", "i2"}, {"ZSCORE", "z", "i2"}, {"ZADD", "z", "1e17", "i3"}, {"ZSCORE", "z", "i3"}, {"ZADD", "z", "0.0001", "i4"}, {"ZSCORE", "z", "i4"},
	{"ZADD", "z", "0x10", "j"}, {"ZSCORE", "z", "j"}, {"ZADD", "z", "0x1p-2", "j2"}, {"ZSCORE", "z", "j2"}, {"ZADD", "z", "-1e-320", "j3"}, {"ZSCORE", "z", "j3"},
	{"ZADD", "z", " 1", "k"}, {"ZADD", "z", "1 ", "k"}, {"ZADD", "z", "1e400", "k"}, {"ZADD", "z", "1e-400", "k"}, {"ZADD", "z", "1e", "k"}, {"ZADD", "z", "", "k"},
	{"ZADD", "z", "1_0", "k"}, {"ZADD", "z", "infinity", "k"}, {"ZADD", "z", "-INF", "k2"}, {"ZADD", "z", ".5", "k3"}, {"ZADD", "z", "5.", "k4"}, {"ZADD", "z", "+5", "k5"},
	{"ZRANGE", "z", "0", "-1", "WITHSCORES"},
	{"ZADD", "z", "CH", "100", "a", "200", "zz", "0.1", "d"}, {"ZADD", "z", "XX", "CH", "5", "a", "5", "newone"}, {"ZADD", "z", "NX", "7", "a", "7", "newone"},
	{"ZADD", "z", "GT", "1", "a"}, {"ZADD", "z", "GT", "CH", "10", "a"}, {"ZADD", "z", "LT", "CH", "1", "a"}, {"ZADD", "z", "LT", "CH", "100", "a"},
	{"ZADD", "z", "GT", "INCR", "-1", "a"}, {"ZADD", "z", "LT", "INCR", "-1", "a"}, {"ZADD", "z", "XX", "GT", "CH", "1", "a", "1000", "zz"}, {"ZADD", "z", "1", "a", "2", "a"},
	{"ZADD", "nosuch", "XX", "1", "a"}, {"ZADD", "nosuch", "XX", "INCR", "1", "a"}, {"EXISTS", "nosuch"},
	{"ZINCRBY", "z", "5", "c"}, {"ZINCRBY", "z", "x", "c"}, {"ZINCRBY", "z", "NX", "c"}, {"ZINCRBY", "z", "1", "brandnew"}, {"ZINCRBY", "z", "0.2", "d"},
	{"ZINCRBY", "z", "-inf", "e"}, {"ZINCRBY", "z", "inf", "e"}, {"ZINCRBY", "z", "1"},
	{"ZSCORE", "z", "nosuch"}, {"ZSCORE", "nosuch", "a"}, {"ZSCORE", "z"}, {"ZRANK", "z", "c"}, {"ZREVRANK", "z", "c"}, {"ZRANK", "z", "nosuch"}, {"ZRANK", "nosuch", "a"},
	{"ZREM", "z", "a", "nosuch", "a"}, {"ZREM", "nosuch", "a"}, {"ZREM", "z"},
	// ranges of scores: ( for an end outside, inf, and what strtod reads
	{"ZCOUNT", "z", "-inf", "+inf"}, {"ZCOUNT", "z", "0", "1"}, {"ZCOUNT", "z", "(0", "(1"}, {"ZCOUNT", "z", "(1.5", "5"}, {"ZCOUNT", "z", "x", "1"}, {"ZCOUNT", "z", "1", "x"},
	{"ZCOUNT", "z", "", ""}, {"ZCOUNT", "z", "(", "("}, {"ZCOUNT", "z", " 1", "2"}, {"ZCOUNT", "z", "1 ", "2"}, {"ZCOUNT", "z", "1e400", "inf"}, {"ZCOUNT", "z", "-1e400", "1e400"},
	{"ZCOUNT", "z", "nan", "1"}, {"ZCOUNT", "z", "(nan", "1"}, {"ZCOUNT", "z", "5", "1"}, {"ZCOUNT", "z", "1", "1"}, {"ZCOUNT", "z", "(1", "1"}, {"ZCOUNT", "z", "0x10", "(0x11"},
	{"ZCOUNT", "nosuch", "0", "1"}, {"ZCOUNT", "nosuch", "x", "1"}, {"ZCOUNT", "z", "0"},
	// ZRANGE by index, by score, by member; REV, LIMIT, WITHSCORES
	{"ZRANGE", "z", "0", "2"}, {"ZRANGE", "z", "-2", "-1", "WITHSCORES"}, {"ZRANGE", "z", "5", "1"}, {"ZRANGE", "z", "-100", "100"}, {"ZRANGE", "z", "0", "-1", "REV"},
	{"ZRANGE", "z", "0", "1", "REV", "WITHSCORES"}, {"ZRANGE", "z", "0", "1", "LIMIT", "0", "1"}, {"ZRANGE", "z", "0", "1", "LIMIT", "0", "-1"}, {"ZRANGE", "z", "0", "1", "BYLEX", "WITHSCORES"},
	{"ZRANGE", "z", "x", "1"}, {"ZRANGE", "z", "0", "1", "BOGUS"}, {"ZRANGE", "z", "0", "1", "REV", "REV"}, {"ZRANGE", "z", "0", "1", "BYSCORE", "BYLEX"},
	{"ZRANGE", "z", "0", "1", "LIMIT", "0"}, {"ZRANGE", "z", "0", "1", "LIMIT", "x", "1"}, {"ZRANGE", "z", "0", "1", "withscores", "withscores"},
	{"ZRANGE", "z", "-inf", "+inf", "BYSCORE", "WITHSCORES"}, {"ZRANGE", "z", "-inf", "+inf", "BYSCORE", "LIMIT", "1", "2"}, {"ZRANGE", "z", "-inf", "+inf", "BYSCORE", "LIMIT", "-1", "2"},
	{"ZRANGE", "z", "-inf", "+inf", "BYSCORE", "LIMIT", "1", "-1"}, {"ZRANGE", "z", "-inf", "+inf", "BYSCORE", "LIMIT", "1", "0"}, {"ZRANGE", "z", "-inf", "+inf", "BYSCORE", "LIMIT", "100", "1"},
	{"ZRANGE", "z", "+inf", "-inf", "BYSCORE", "REV", "WITHSCORES"}, {"ZRANGE", "z", "+inf", "-inf", "BYSCORE", "REV", "LIMIT", "1", "2"}, {"ZRANGE", "z", "-inf", "+inf", "BYSCORE", "REV"},
	{"ZRANGE", "z", "(1.5", "2", "BYSCORE"}, {"ZRANGE", "z", "x", "2", "BYSCORE"}, {"ZRANGE", "nosuch", "0", "-1"}, {"ZRANGE", "nosuch", "x", "-1"}, {"ZRANGE", "nosuch", "0", "1", "LIMIT", "0", "1"},
	{"ZRANGE", "z"}, {"ZRANGE", "z", "0"},
	{"ZRANGEBYSCORE", "z", "-inf", "+inf"}, {"ZRANGEBYSCORE", "z", "-inf", "+inf", "WITHSCORES", "LIMIT", "0", "3"}, {"ZRANGEBYSCORE", "z", "-inf", "+inf", "LIMIT", "2", "2", "WITHSCORES"},
	{"ZRANGEBYSCORE", "z", "-inf", "+inf", "REV"}, {"ZRANGEBYSCORE", "z", "-inf", "+inf", "BYSCORE"}, {"ZRANGEBYSCORE", "z", "(5", "inf"}, {"ZRANGEBYSCORE", "z", "x", "inf"},
	{"ZREVRANGEBYSCORE", "z", "+inf", "-inf", "WITHSCORES"}, {"ZREVRANGEBYSCORE", "z", "+inf", "-inf", "LIMIT", "1", "1"}, {"ZREVRANGEBYSCORE", "z", "-inf", "+inf"},
	{"ZREVRANGE", "z", "0", "1", "WITHSCORES"}, {"ZREVRANGE", "z", "0", "1", "LIMIT", "0", "1"}, {"ZREVRANGE", "z", "0", "1", "REV"}, {"ZREVRANGE", "z", "0", "-1"},
	// wrong types both ways
	{"SET", "zs", "v"}, {"ZADD", "zs", "1", "a"}, {"ZADD", "zs", "x", "a"}, {"ZSCORE", "zs", "a"}, {"ZRANGE", "zs", "0", "-1"}, {"ZRANGE", "zs", "x", "1"}, {"ZCARD", "zs"},
	{"ZCOUNT", "zs", "0", "1"}, {"ZREM", "zs", "a"}, {"ZRANK", "zs", "a"}, {"ZREMRANGEBYSCORE", "zs", "0", "1"}, {"ZREMRANGEBYRANK", "zs", "0", "1"}, {"ZINCRBY", "zs", "1", "a"},
	{"TYPE", "z"}, {"GET", "z"}, {"LPUSH", "z", "a"}, {"HSET", "z", "a", "1"}, {"INCR", "z"},
	// removing by score and by index; an emptied set is gone
	{"ZREMRANGEBYSCORE", "z", "-inf", "(1"}, {"ZRANGE", "z", "0", "-1", "WITHSCORES"}, {"ZREMRANGEBYSCORE", "z", "x", "1"}, {"ZREMRANGEBYSCORE", "nosuch", "0", "1"},
	{"ZREMRANGEBYRANK", "z", "0", "0"}, {"ZREMRANGEBYRANK", "z", "-1", "-1"}, {"ZREMRANGEBYRANK", "z", "5", "1"}, {"ZREMRANGEBYRANK", "z", "x", "1"},
	{"ZRANGE", "z", "0", "-1", "WITHSCORES"}, {"ZREMRANGEBYSCORE", "z", "-inf", "+inf"}, {"EXISTS", "z"}, {"ZREMRANGEBYSCORE", "z", "0"},
	// by member, among equal scores
	{"ZADD", "lex", "0", "a", "0", "b", "0", "c", "0", "d", "0", "e"}, {"ZRANGE", "lex", "-", "+", "BYLEX"}, {"ZRANGE", "lex", "[b", "(d", "BYLEX"},
	{"ZRANGE", "lex", "(b", "[d", "BYLEX", "LIMIT", "1", "5"}, {"ZRANGE", "lex", "+", "-", "BYLEX", "REV"}, {"ZRANGE", "lex", "[d", "[b", "BYLEX", "REV", "LIMIT", "0", "2"},
	{"ZRANGE", "lex", "b", "d", "BYLEX"}, {"ZRANGE", "lex", "", "+", "BYLEX"}, {"ZRANGE", "lex", "+x", "+", "BYLEX"}, {"ZRANGE", "lex", "-", "-", "BYLEX"},
	{"ZRANGE", "lex", "+", "+", "BYLEX"}, {"ZRANGE", "lex", "[a", "[a", "BYLEX"}, {"ZRANGE", "lex", "(a", "[a", "BYLEX"}, {"ZADD", "lex", "0", "aa", "0", "A", "0", "\xff"},
	{"ZRANGE", "lex", "0", "-1"},
	// a set past Redis's small encoding (128 members) answers alike
	zaddMany("zbig", 300), {"ZCARD", "zbig"}, {"ZRANGE", "zbig", "100", "104", "WITHSCORES"}, {"ZRANK", "zbig", "m150"}, {"ZREVRANK", "zbig", "m150"},
	{"ZCOUNT", "zbig", "(10", "20"}, {"ZRANGEBYSCORE", "zbig", "(10", "+inf", "LIMIT", "5", "3"}, {"ZREVRANGEBYSCORE", "zbig", "+inf", "(10", "WITHSCORES", "LIMIT", "5", "3"},
	{"ZADD", "zbig", "-0", "neg0"}, {"ZREMRANGEBYSCORE", "zbig", "-inf", "50"}, {"ZREMRANGEBYRANK", "zbig", "-10", "-1"}, {"ZRANGE", "zbig", "-3", "-1", "REV", "WITHSCORES"},
	{"ZCARD", "zbig"}, {"EXPIRE", "zbig", "100"}, {"TTL", "zbig"}, {"RENAME", "zbig", "zbig2"}, {"TYPE", "zbig2"}, {"ZCARD", "zbig2"}, {"DEL", "zbig2"},
	// a sliding log as rate limiters keep one
	{"ZADD", "log", "1000", "r1", "1500", "r2", "2000", "r3"}, {"ZREMRANGEBYSCORE", "log", "-inf", "(1500"}, {"ZCARD", "log"}, {"ZRANGE", "log", "0", "0", "WITHSCORES"},
	{"PEXPIRE", "log", "60000"}, {"ZADD", "log", "2500", "r4"}, {"ZCOUNT", "log", "(1500", "+inf"},

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
	// sorted sets in scripts: scores are bulk strings there
	{"EVAL", "redis.call('ZADD', KEYS[1], 1, 'm', 2.5, 'n') return redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')", "1", "zk"},
	{"EVAL", "return redis.call('ZSCORE', KEYS[1], 'n')", "1", "zk"}, {"EVAL", "return redis.call('ZADD', KEYS[1], 'INCR', 0.5, 'n')", "1", "zk"},
	{"EVAL", "return redis.pcall('ZADD', KEYS[1], 'x', 'n')", "1", "zk"}, {"EVAL", "return redis.call('ZCARD', KEYS[1])", "1", "zk"},
	{"EVAL", "return redis.call('TYPE', KEYS[1])", "1", "zk"}, {"EVAL", "return redis.call('HEXISTS', KEYS[1], 'a')", "1", "hk"},
	// KEYS: a client's, and a script's; Python limits' reset (KEYS, then
	// DEL of what it found) runs unchanged
	{"SET", "lim:a", "1"}, {"SET", "lim:b", "1"}, {"ZADD", "lim:z", "1", "a"}, {"HSET", "lim:h", "f", "1"}, {"SET", "lim-other", "1"},
	{"KEYS", "lim:z"}, {"KEYS", "lim:[z]"}, {"KEYS", "lim-*"}, {"KEYS", `lim:\*`}, {"KEYS", "lim:[^abz]"}, {"KEYS", "nosuch*"}, {"KEYS"}, {"KEYS", "a", "b"},
	{"EVAL", "local k = redis.call('KEYS', ARGV[1]) table.sort(k) return k", "0", "lim*"},
	{"EVAL", "local k = redis.call('KEYS', ARGV[1]) table.sort(k) return k", "0", "lim:[a-c]"},
	{"EVAL", "return redis.call('KEYS')", "0"}, {"EVAL", "return redis.pcall('KEYS', 'a', 'b')", "0"},
	{"EVAL", limitsClearKeysLua, "1", "lim:*"}, {"EXISTS", "lim:a", "lim:b", "lim:z", "lim:h", "lim-other"}, {"EVAL", limitsClearKeysLua, "1", "lim:*"},
}

// limitsClearKeysLua is Python limits' (2.8 and later) reset(): the keys
// of a pattern, then DEL of them, 5000 at a time.
const limitsClearKeysLua = `local keys = redis.call('keys', KEYS[1])
local res = 0

for i=1,#keys,5000 do
    res = res + redis.call(
        'del',
        unpack(keys, i, math.min(i+4999, #keys))
    )
end

return res
`

// dataConformanceRESP3 runs after HELLO 3 on both connections: the
// replies whose RESP3 form differs (scores are doubles, a range
// WITHSCORES is pairs).
var dataConformanceRESP3 = [][]string{
	{"ZADD", "z3", "1", "a", "2.5", "b", "inf", "c"}, {"ZSCORE", "z3", "b"}, {"ZSCORE", "z3", "c"}, {"ZSCORE", "z3", "nosuch"}, {"ZSCORE", "nosuch", "a"},
	{"ZADD", "z3", "INCR", "1", "a"}, {"ZADD", "z3", "NX", "INCR", "1", "a"}, {"ZINCRBY", "z3", "0.1", "b"}, {"ZADD", "z3", "CH", "5", "a"},
	{"ZRANGE", "z3", "0", "-1", "WITHSCORES"}, {"ZRANGE", "z3", "0", "-1"}, {"ZRANGE", "z3", "+inf", "-inf", "BYSCORE", "REV", "WITHSCORES", "LIMIT", "0", "2"},
	{"ZRANGEBYSCORE", "z3", "-inf", "+inf", "WITHSCORES"}, {"ZREVRANGEBYSCORE", "z3", "+inf", "(1", "WITHSCORES"}, {"ZREVRANGE", "z3", "0", "0", "WITHSCORES"},
	{"ZRANGE", "nosuch", "0", "-1", "WITHSCORES"}, {"ZRANK", "z3", "nosuch"}, {"ZCARD", "z3"}, {"HGETALL", "h2"}, {"HKEYS", "h2"},
}

// zaddMany is ZADD key of n members, m0 to m(n-1), scored 0 to n-1 in
// an order of their own.
func zaddMany(key string, n int) []string {
	call := []string{"ZADD", key}
	for i := range n {
		j := i * 7 % n
		call = append(call, strconv.Itoa(j), "m"+strconv.Itoa(j))
	}
	return call
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
	compare := func(phase string, calls [][]string) {
		for i, call := range calls {
			want := roundPTTL(call[0], r.Do(call...))
			got := roundPTTL(call[0], s.Do(call...))
			if got != want {
				t.Errorf("%s step %d %q:\n sluice %s\n  redis %s", phase, i, strings.Join(call, " "), got, want)
			}
		}
	}
	compare("RESP2", dataConformance)
	r.Do("HELLO", "3")
	s.Do("HELLO", "3")
	compare("RESP3", dataConformanceRESP3)
}

// SCAN names every bucket and data key once, whatever COUNT, while other
// keys come and go between its calls; TYPE keeps one type of data key or
// one algorithm; KEYS names what a whole SCAN with MATCH names, and
// DBSIZE counts them all.
func TestScanAndKeysNameDataKeys(t *testing.T) {
	p := single(t)
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: p.Resp, MaxRetries: -1, ReadTimeout: 10 * time.Second})
	defer rdb.Close()
	want := map[string]string{}
	pipe := rdb.Pipeline()
	for i := range 200 {
		k := fmt.Sprint("s", i)
		pipe.Set(ctx, k, "v", 0)
		want[k] = "string"
	}
	for i := range 20 {
		pipe.HSet(ctx, fmt.Sprint("h", i), "f", 1)
		pipe.RPush(ctx, fmt.Sprint("l", i), "x")
		pipe.ZAdd(ctx, fmt.Sprint("z", i), redis.Z{Score: 1, Member: "m"})
		pipe.Do(ctx, "RL.ACQUIRE", fmt.Sprint("b", i), "RATE", "1", "PER", "hour")
		want[fmt.Sprint("h", i)], want[fmt.Sprint("l", i)], want[fmt.Sprint("z", i)] = "hash", "list", "zset"
		want[fmt.Sprint("b", i)] = "token_bucket"
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	var cursor uint64
	for calls := 0; ; calls++ {
		keys, next, err := rdb.Scan(ctx, cursor, "", 7).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			seen[k]++
		}
		// Keys that come and go meanwhile do not disturb the others.
		rdb.Set(ctx, fmt.Sprint("tmp", calls), "v", 0)
		rdb.Del(ctx, fmt.Sprint("tmp", calls-1))
		if cursor = next; cursor == 0 {
			break
		}
		if calls > 10000 {
			t.Fatal("SCAN does not end")
		}
	}
	for k := range want {
		if seen[k] != 1 {
			t.Errorf("SCAN named %s %d times", k, seen[k])
		}
	}
	for k, n := range seen {
		if _, ok := want[k]; !ok && !strings.HasPrefix(k, "tmp") || n != 1 {
			t.Errorf("SCAN named %s (%d times)", k, n)
		}
	}
	for _, typ := range []string{"string", "hash", "list", "zset", "token_bucket"} {
		keys, next, err := rdb.ScanType(ctx, 0, "", 100000, typ).Result()
		if err != nil || next != 0 {
			t.Fatalf("SCAN TYPE %s: %v, cursor %d", typ, err, next)
		}
		n := 0
		for _, k := range keys {
			if want[k] == typ {
				n++
			} else if !strings.HasPrefix(k, "tmp") {
				t.Errorf("SCAN TYPE %s named %s, a %s", typ, k, want[k])
			}
		}
		if n != map[string]int{"string": 200}[typ]+map[bool]int{true: 20}[typ != "string"] {
			t.Errorf("SCAN TYPE %s named %d keys", typ, n)
		}
	}
	keys, err := rdb.Keys(ctx, "[hz]1*").Result()
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(keys)
	if got := strings.Join(keys, " "); got != "h1 h10 h11 h12 h13 h14 h15 h16 h17 h18 h19 z1 z10 z11 z12 z13 z14 z15 z16 z17 z18 z19" {
		t.Errorf("KEYS [hz]1*: %s", got)
	}
	all, err := rdb.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	n, err := rdb.DBSize(ctx).Result()
	if err != nil || int(n) != len(all) || len(all) != len(want)+1 { // and the last tmp key
		t.Errorf("DBSIZE %d (%v), KEYS * %d, want %d", n, err, len(all), len(want)+1)
	}
}
