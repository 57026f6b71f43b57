package keyspace

import (
	"math"
	"strconv"
	"strings"

	"github.com/sluice-rl/sluice/fault"
	"github.com/sluice-rl/sluice/internal/glob"
)

// Spec is one command of the keyspace: its name, arity as Redis counts
// it (n exact, -n at least n, the name included), where its keys are
// (FirstKey to LastKey, -1: to the end; 0: none), whether it writes, and
// what it does inside a transaction holding its keys.
type Spec struct {
	Name              string
	Arity             int
	FirstKey, LastKey int
	Write             bool
	// ReplyMap: the command answers a map (RESP3), an array of pairs in
	// RESP2.
	ReplyMap bool
	// ScriptOnly: scripts call it here; clients reach the server's own
	// command of that name, which answers for buckets too (TYPE, TTL,
	// PTTL).
	ScriptOnly      bool
	Summary, Syntax string
	run             func(tx *Tx, a [][]byte) Reply
	// resp3 says how the reply differs in RESP3 (scores: RESP3).
	resp3 resp3Shape
	// removes: the command writes only by removing keys (DEL, UNLINK),
	// which a script may do to keys it did not declare once it has
	// called KEYS.
	removes bool
}

// Keys returns the keys a call of the command names.
func (sp *Spec) Keys(a [][]byte) [][]byte {
	if sp.FirstKey == 0 || sp.FirstKey >= len(a) {
		return nil
	}
	last := sp.LastKey
	if last < 0 || last >= len(a) {
		last = len(a) - 1
	}
	return a[sp.FirstKey : last+1]
}

// ArityOK reports whether n arguments (name included) suit the command.
func (sp *Spec) ArityOK(n int) bool {
	if sp.Arity >= 0 {
		return n == sp.Arity
	}
	return n >= -sp.Arity
}

var specs = []*Spec{
	{Name: "GET", Arity: 2, FirstKey: 1, LastKey: 1, run: getCmd, Summary: "Get a string's value.", Syntax: "key"},
	{Name: "SET", Arity: -3, FirstKey: 1, LastKey: 1, Write: true, run: setCmd, Summary: "Set a string's value, with an expiry and conditions.",
		Syntax: "key value [NX | XX] [GET] [EX seconds | PX milliseconds | EXAT unix-time-seconds | PXAT unix-time-milliseconds | KEEPTTL]"},
	{Name: "SETNX", Arity: 3, FirstKey: 1, LastKey: 1, Write: true, run: setnxCmd, Summary: "Set a string's value if the key does not exist.", Syntax: "key value"},
	{Name: "GETSET", Arity: 3, FirstKey: 1, LastKey: 1, Write: true, run: getsetCmd, Summary: "Set a string's value and return the old one.", Syntax: "key value"},
	{Name: "INCR", Arity: 2, FirstKey: 1, LastKey: 1, Write: true, run: incrCmd(1, false), Summary: "Add 1 to an integer counter.", Syntax: "key"},
	{Name: "DECR", Arity: 2, FirstKey: 1, LastKey: 1, Write: true, run: incrCmd(-1, false), Summary: "Subtract 1 from an integer counter.", Syntax: "key"},
	{Name: "INCRBY", Arity: 3, FirstKey: 1, LastKey: 1, Write: true, run: incrCmd(1, true), Summary: "Add to an integer counter.", Syntax: "key increment"},
	{Name: "DECRBY", Arity: 3, FirstKey: 1, LastKey: 1, Write: true, run: incrCmd(-1, true), Summary: "Subtract from an integer counter.", Syntax: "key decrement"},
	{Name: "INCRBYFLOAT", Arity: 3, FirstKey: 1, LastKey: 1, Write: true, run: incrFloatCmd, Summary: "Add a float to a counter.", Syntax: "key increment"},
	{Name: "DEL", Arity: -2, FirstKey: 1, LastKey: -1, Write: true, removes: true, run: delCmd, Summary: "Delete keys.", Syntax: "key [key ...]"},
	{Name: "UNLINK", Arity: -2, FirstKey: 1, LastKey: -1, Write: true, removes: true, run: delCmd, Summary: "Delete keys (as DEL).", Syntax: "key [key ...]"},
	{Name: "EXISTS", Arity: -2, FirstKey: 1, LastKey: -1, run: existsCmd, Summary: "Count the keys that exist.", Syntax: "key [key ...]"},
	{Name: "EXPIRE", Arity: -3, FirstKey: 1, LastKey: 1, Write: true, run: expireCmd(1000, false, "expire"), Summary: "Make a key expire in seconds.", Syntax: "key seconds [NX | XX | GT | LT]"},
	{Name: "PEXPIRE", Arity: -3, FirstKey: 1, LastKey: 1, Write: true, run: expireCmd(1, false, "pexpire"), Summary: "Make a key expire in milliseconds.", Syntax: "key milliseconds [NX | XX | GT | LT]"},
	{Name: "EXPIREAT", Arity: -3, FirstKey: 1, LastKey: 1, Write: true, run: expireCmd(1000, true, "expireat"), Summary: "Make a key expire at a Unix time in seconds.", Syntax: "key unix-time-seconds [NX | XX | GT | LT]"},
	{Name: "PEXPIREAT", Arity: -3, FirstKey: 1, LastKey: 1, Write: true, run: expireCmd(1, true, "pexpireat"), Summary: "Make a key expire at a Unix time in milliseconds.", Syntax: "key unix-time-milliseconds [NX | XX | GT | LT]"},
	{Name: "PERSIST", Arity: 2, FirstKey: 1, LastKey: 1, Write: true, run: persistCmd, Summary: "Remove a key's expiry.", Syntax: "key"},
	{Name: "RENAME", Arity: 3, FirstKey: 1, LastKey: 2, Write: true, run: renameCmd, Summary: "Rename a key.", Syntax: "key newkey"},
	{Name: "TTL", Arity: 2, FirstKey: 1, LastKey: 1, ScriptOnly: true, run: ttlCmd(1000), Summary: "Seconds before a key expires.", Syntax: "key"},
	{Name: "PTTL", Arity: 2, FirstKey: 1, LastKey: 1, ScriptOnly: true, run: ttlCmd(1), Summary: "Milliseconds before a key expires.", Syntax: "key"},
	{Name: "TYPE", Arity: 2, FirstKey: 1, LastKey: 1, ScriptOnly: true, run: typeCmd, Summary: "A key's type.", Syntax: "key"},
	{Name: "KEYS", Arity: 2, ScriptOnly: true, run: keysCmd, Summary: "The keys whose names match a pattern.", Syntax: "pattern"},
	{Name: "LPUSH", Arity: -3, FirstKey: 1, LastKey: 1, Write: true, run: pushCmd(true), Summary: "Add elements at a list's head.", Syntax: "key element [element ...]"},
	{Name: "RPUSH", Arity: -3, FirstKey: 1, LastKey: 1, Write: true, run: pushCmd(false), Summary: "Add elements at a list's tail.", Syntax: "key element [element ...]"},
	{Name: "LPOP", Arity: -2, FirstKey: 1, LastKey: 1, Write: true, run: popCmd(true), Summary: "Remove and return elements from a list's head.", Syntax: "key [count]"},
	{Name: "RPOP", Arity: -2, FirstKey: 1, LastKey: 1, Write: true, run: popCmd(false), Summary: "Remove and return elements from a list's tail.", Syntax: "key [count]"},
	{Name: "LLEN", Arity: 2, FirstKey: 1, LastKey: 1, run: llenCmd, Summary: "A list's length.", Syntax: "key"},
	{Name: "LINDEX", Arity: 3, FirstKey: 1, LastKey: 1, run: lindexCmd, Summary: "A list's element by index.", Syntax: "key index"},
	{Name: "LRANGE", Arity: 4, FirstKey: 1, LastKey: 1, run: lrangeCmd, Summary: "A range of a list's elements.", Syntax: "key start stop"},
	{Name: "LTRIM", Arity: 4, FirstKey: 1, LastKey: 1, Write: true, run: ltrimCmd, Summary: "Keep only a range of a list's elements.", Syntax: "key start stop"},
	{Name: "HGET", Arity: 3, FirstKey: 1, LastKey: 1, run: hgetCmd, Summary: "Get a hash field's value.", Syntax: "key field"},
	{Name: "HSET", Arity: -4, FirstKey: 1, LastKey: 1, Write: true, run: hsetCmd(false), Summary: "Set hash fields; the number of new fields.", Syntax: "key field value [field value ...]"},
	{Name: "HMSET", Arity: -4, FirstKey: 1, LastKey: 1, Write: true, run: hsetCmd(true), Summary: "Set hash fields (as HSET, answering OK).", Syntax: "key field value [field value ...]"},
	{Name: "HMGET", Arity: -3, FirstKey: 1, LastKey: 1, run: hmgetCmd, Summary: "Get hash fields' values.", Syntax: "key field [field ...]"},
	{Name: "HINCRBY", Arity: 4, FirstKey: 1, LastKey: 1, Write: true, run: hincrbyCmd, Summary: "Add to an integer hash field.", Syntax: "key field increment"},
	{Name: "HINCRBYFLOAT", Arity: 4, FirstKey: 1, LastKey: 1, Write: true, run: hincrbyfloatCmd, Summary: "Add a float to a hash field.", Syntax: "key field increment"},
	{Name: "HDEL", Arity: -3, FirstKey: 1, LastKey: 1, Write: true, run: hdelCmd, Summary: "Delete hash fields.", Syntax: "key field [field ...]"},
	{Name: "HGETALL", Arity: 2, FirstKey: 1, LastKey: 1, ReplyMap: true, run: hgetallCmd, Summary: "Get a hash's fields and values.", Syntax: "key"},
	{Name: "HEXISTS", Arity: 3, FirstKey: 1, LastKey: 1, run: hexistsCmd, Summary: "Whether a hash field exists.", Syntax: "key field"},
	{Name: "HLEN", Arity: 2, FirstKey: 1, LastKey: 1, run: hlenCmd, Summary: "The number of a hash's fields.", Syntax: "key"},
	{Name: "HKEYS", Arity: 2, FirstKey: 1, LastKey: 1, run: hkeysCmd(true), Summary: "A hash's fields.", Syntax: "key"},
	{Name: "HVALS", Arity: 2, FirstKey: 1, LastKey: 1, run: hkeysCmd(false), Summary: "A hash's values.", Syntax: "key"},
	{Name: "ZADD", Arity: -4, FirstKey: 1, LastKey: 1, Write: true, run: zaddCmd(false), resp3: asScore, Summary: "Add members to a sorted set, or change their scores.",
		Syntax: "key [NX | XX] [GT | LT] [CH] [INCR] score member [score member ...]"},
	{Name: "ZINCRBY", Arity: 4, FirstKey: 1, LastKey: 1, Write: true, run: zaddCmd(true), resp3: asScore, Summary: "Add to a sorted set member's score.", Syntax: "key increment member"},
	{Name: "ZREM", Arity: -3, FirstKey: 1, LastKey: 1, Write: true, run: zremCmd, Summary: "Remove members from a sorted set.", Syntax: "key member [member ...]"},
	{Name: "ZREMRANGEBYSCORE", Arity: 4, FirstKey: 1, LastKey: 1, Write: true, run: zremrangeCmd(true), Summary: "Remove a sorted set's members within a range of scores.", Syntax: "key min max"},
	{Name: "ZREMRANGEBYRANK", Arity: 4, FirstKey: 1, LastKey: 1, Write: true, run: zremrangeCmd(false), Summary: "Remove a sorted set's members within a range of indexes.", Syntax: "key start stop"},
	{Name: "ZCARD", Arity: 2, FirstKey: 1, LastKey: 1, run: zcardCmd, Summary: "The number of a sorted set's members.", Syntax: "key"},
	{Name: "ZCOUNT", Arity: 4, FirstKey: 1, LastKey: 1, run: zcountCmd, Summary: "Count a sorted set's members within a range of scores.", Syntax: "key min max"},
	{Name: "ZSCORE", Arity: 3, FirstKey: 1, LastKey: 1, run: zscoreCmd, resp3: asScore, Summary: "A sorted set member's score.", Syntax: "key member"},
	{Name: "ZRANK", Arity: 3, FirstKey: 1, LastKey: 1, run: zrankCmd(false), Summary: "A sorted set member's index, lowest score first.", Syntax: "key member"},
	{Name: "ZREVRANK", Arity: 3, FirstKey: 1, LastKey: 1, run: zrankCmd(true), Summary: "A sorted set member's index, highest score first.", Syntax: "key member"},
	{Name: "ZRANGE", Arity: -4, FirstKey: 1, LastKey: 1, run: zrangeCmd(zbyAny, false), resp3: asPairs, Summary: "A range of a sorted set's members, by index, score or member.",
		Syntax: "key start stop [BYSCORE | BYLEX] [REV] [LIMIT offset count] [WITHSCORES]"},
	{Name: "ZRANGEBYSCORE", Arity: -4, FirstKey: 1, LastKey: 1, run: zrangeCmd(zbyScore, false), resp3: asPairs, Summary: "A sorted set's members within a range of scores, lowest first.",
		Syntax: "key min max [WITHSCORES] [LIMIT offset count]"},
	{Name: "ZREVRANGE", Arity: -4, FirstKey: 1, LastKey: 1, run: zrangeCmd(zbyRank, true), resp3: asPairs, Summary: "A range of a sorted set's members by index, highest score first.",
		Syntax: "key start stop [WITHSCORES]"},
	{Name: "ZREVRANGEBYSCORE", Arity: -4, FirstKey: 1, LastKey: 1, run: zrangeCmd(zbyScore, true), resp3: asPairs, Summary: "A sorted set's members within a range of scores, highest first.",
		Syntax: "key max min [WITHSCORES] [LIMIT offset count]"},
}

// byName holds every command under its lower- and its upper-case name,
// the two spellings clients and scripts send: those are found without
// folding the name first.
var byName = func() map[string]*Spec {
	m := map[string]*Spec{}
	for _, sp := range specs {
		m[strings.ToLower(sp.Name)] = sp
		m[sp.Name] = sp
	}
	return m
}()

// Specs returns every command of the keyspace.
func Specs() []*Spec { return specs }

// Lookup finds a command by name, case-insensitively.
func Lookup(name []byte) *Spec {
	if len(name) > 16 {
		return nil
	}
	if sp := byName[string(name)]; sp != nil {
		return sp
	}
	return byName[strings.ToLower(string(name))]
}

// Exec runs one command at now (Unix ns), locking its keys' shards.
func (s *Store) Exec(now int64, sp *Spec, a [][]byte) Reply {
	if !sp.ArityOK(len(a)) {
		return WrongArity(sp.Name)
	}
	tx := s.Lock(now, false, sp.Keys(a)...)
	defer tx.Unlock()
	return sp.run(tx, a)
}

// Exec runs one command inside the transaction, which must hold its keys
// (a script's declared keys). Once the transaction holds every shard
// after a KEYS (widen), a command that only reads or removes keys (DEL,
// UNLINK) may name keys it did not declare, as Redis's reset scripts
// delete what KEYS found; other writes stay on the declared keys.
func (tx *Tx) Exec(sp *Spec, a [][]byte) Reply {
	if !sp.ArityOK(len(a)) {
		return WrongArity(sp.Name)
	}
	free := tx.wide && (!sp.Write || sp.removes)
	for _, k := range sp.Keys(a) {
		if !free && !tx.Holds(k) {
			return Errf("ERR script tried accessing key '" + fault.Printable(k) + "' it did not declare: pass every key a script touches in KEYS")
		}
	}
	r := sp.run(tx, a)
	tx.calls++
	return r
}

// WrongArity is Redis's reply to a command with the wrong number of
// arguments.
func WrongArity(name string) Reply {
	return Errf("ERR wrong number of arguments for '" + strings.ToLower(name) + "' command")
}

// ParseInt reads an integer as Redis does (string2ll): an optional '-',
// digits without leading zeros, within int64.
func ParseInt(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 20 {
		return 0, false
	}
	if len(b) == 1 && b[0] == '0' {
		return 0, true
	}
	i, neg := 0, b[0] == '-'
	if neg {
		i = 1
	}
	if i == len(b) || b[i] < '1' || b[i] > '9' {
		return 0, false
	}
	var v uint64
	for ; i < len(b); i++ {
		c := b[i]
		if c < '0' || c > '9' || v > (math.MaxUint64-9)/10 {
			return 0, false
		}
		v = v*10 + uint64(c-'0')
	}
	if neg {
		if v > 1<<63 {
			return 0, false
		}
		return -int64(v), true
	}
	if v > math.MaxInt64 {
		return 0, false
	}
	return int64(v), true
}

// parseFloat reads a float as Redis does: no spaces, not NaN.
func parseFloat(b []byte) (float64, bool) {
	if len(b) == 0 || len(b) > 5000 || b[0] == ' ' || b[len(b)-1] == ' ' {
		return 0, false
	}
	f, err := strconv.ParseFloat(string(b), 64)
	if err != nil && !strings.Contains(err.Error(), "range") || math.IsNaN(f) {
		return 0, false
	}
	return f, true
}

func eq(b []byte, s string) bool { return strings.EqualFold(string(b), s) }

// --- strings and counters ----------------------------------------------

// typed returns key's live value if it is of type t (nil when there is
// none), else WRONGTYPE.
func (tx *Tx) typed(t Type, key []byte) (*value, Reply, bool) {
	v := tx.get(key)
	if v != nil && v.typ != t {
		return nil, ErrWrongType, false
	}
	return v, Reply{}, true
}

func getCmd(tx *Tx, a [][]byte) Reply {
	v, e, ok := tx.typed(TypeString, a[1])
	switch {
	case !ok:
		return e
	case v == nil:
		return NilReply
	}
	return v.reply()
}

func setCmd(tx *Tx, a [][]byte) Reply {
	key := a[1]
	var nx, xx, get, keep bool
	var exp int64
	expSet := false
	kind := "" // the expiry option given: it may be given again (the last wins), not with another
	for i := 3; i < len(a); i++ {
		o := a[i]
		unit := int64(0)
		abs := false
		name := strings.ToUpper(string(o))
		free := !keep && (kind == "" || kind == name) && i+1 < len(a)
		switch {
		case name == "NX" && !xx:
			nx = true
		case name == "XX" && !nx:
			xx = true
		case name == "GET":
			get = true
		case name == "KEEPTTL" && !expSet:
			keep = true
		case name == "EX" && free:
			unit = 1000
		case name == "PX" && free:
			unit = 1
		case name == "EXAT" && free:
			unit, abs = 1000, true
		case name == "PXAT" && free:
			unit, abs = 1, true
		default:
			return ErrSyntax
		}
		if unit != 0 {
			kind = name
			i++
			n, ok := ParseInt(a[i])
			if !ok {
				return ErrNotInt
			}
			if n <= 0 || unit == 1000 && n > math.MaxInt64/1000 {
				return Errf("ERR invalid expire time in 'set' command")
			}
			n *= unit
			if !abs {
				if n > math.MaxInt64-tx.nowMs {
					return Errf("ERR invalid expire time in 'set' command")
				}
				n += tx.nowMs
			}
			exp, expSet = n, true
		}
	}
	old := tx.get(key)
	var prev Reply
	if get {
		switch {
		case old == nil:
			prev = NilReply
		case old.typ != TypeString:
			return ErrWrongType
		default:
			prev = old.reply()
		}
	}
	if nx && old != nil || xx && old == nil {
		if get {
			return prev
		}
		return NilReply
	}
	v := &value{typ: TypeString, str: append([]byte(nil), a[2]...), exp: exp}
	if keep && old != nil {
		v.exp = old.exp
	}
	if expSet && exp <= tx.nowMs {
		tx.del(key) // an expiry in the past: the key is gone at once
	} else if !tx.put(key, v) {
		return ErrOOM
	}
	if get {
		return prev
	}
	return OK
}

func setnxCmd(tx *Tx, a [][]byte) Reply {
	if tx.get(a[1]) != nil {
		return Zero
	}
	if !tx.put(a[1], &value{typ: TypeString, str: append([]byte(nil), a[2]...)}) {
		return ErrOOM
	}
	return One
}

func getsetCmd(tx *Tx, a [][]byte) Reply {
	v, e, ok := tx.typed(TypeString, a[1])
	if !ok {
		return e
	}
	prev := NilReply
	if v != nil {
		prev = v.reply()
	}
	if !tx.put(a[1], &value{typ: TypeString, str: append([]byte(nil), a[2]...)}) {
		return ErrOOM
	}
	return prev
}

// incrCmd is INCR and DECR (by is false: by sign) and INCRBY and DECRBY
// (the amount times sign).
func incrCmd(sign int64, by bool) func(tx *Tx, a [][]byte) Reply {
	return func(tx *Tx, a [][]byte) Reply {
		d := sign
		if by {
			n, ok := ParseInt(a[2])
			if !ok {
				return ErrNotInt
			}
			if sign < 0 {
				if n == math.MinInt64 {
					return Errf("ERR decrement would overflow")
				}
				n = -n
			}
			d = n
		}
		v, e, ok := tx.typed(TypeString, a[1])
		if !ok {
			return e
		}
		var cur int64
		switch {
		case v == nil:
		case v.isNum:
			cur = v.num
		default:
			if cur, ok = ParseInt(v.str); !ok {
				return ErrNotInt
			}
		}
		if d > 0 && cur > math.MaxInt64-d || d < 0 && cur < math.MinInt64-d {
			return ErrOverflow
		}
		cur += d
		if !tx.setNum(a[1], v, cur) {
			return ErrOOM
		}
		return IntReply(cur)
	}
}

func incrFloatCmd(tx *Tx, a [][]byte) Reply {
	v, e, ok := tx.typed(TypeString, a[1])
	if !ok {
		return e
	}
	var cur float64
	if v != nil {
		if cur, ok = parseFloat(v.text()); !ok {
			return ErrNotFloat
		}
	}
	d, ok := parseFloat(a[2])
	if !ok {
		return ErrNotFloat
	}
	cur += d
	if math.IsNaN(cur) || math.IsInf(cur, 0) {
		return Errf("ERR increment would produce NaN or Infinity")
	}
	s := []byte(formatFloat(cur))
	if !tx.setStr(a[1], v, s) {
		return ErrOOM
	}
	return BulkReply(s)
}

// setStr makes the string at key (v, nil when there is none) s, keeping
// its expiry, if the bounds allow.
func (tx *Tx) setStr(key []byte, v *value, s []byte) bool {
	if v == nil {
		return tx.put(key, &value{typ: TypeString, str: s})
	}
	old, oldNum, oldIs := v.str, v.num, v.isNum
	v.str, v.num, v.isNum = s, 0, false
	if !tx.resize(key, v) {
		v.str, v.num, v.isNum = old, oldNum, oldIs
		return false
	}
	return true
}

// setNum makes the string at key (v, nil when there is none) the integer
// n, keeping its expiry, if the bounds allow.
func (tx *Tx) setNum(key []byte, v *value, n int64) bool {
	if v == nil {
		return tx.put(key, &value{typ: TypeString, num: n, isNum: true})
	}
	old, oldNum, oldIs := v.str, v.num, v.isNum
	v.str, v.num, v.isNum = nil, n, true
	if !tx.resize(key, v) {
		v.str, v.num, v.isNum = old, oldNum, oldIs
		return false
	}
	return true
}

// --- keys ----------------------------------------------------------------

func delCmd(tx *Tx, a [][]byte) Reply {
	n := int64(0)
	for _, k := range a[1:] {
		if tx.del(k) {
			n++
		}
	}
	return IntReply(n)
}

func existsCmd(tx *Tx, a [][]byte) Reply {
	n := int64(0)
	for _, k := range a[1:] {
		if tx.get(k) != nil {
			n++
		}
	}
	return IntReply(n)
}

// expireCmd is EXPIRE, PEXPIRE, EXPIREAT and PEXPIREAT: unit ms per
// argument unit, abs for a Unix time rather than a delay.
func expireCmd(unit int64, abs bool, name string) func(tx *Tx, a [][]byte) Reply {
	return func(tx *Tx, a [][]byte) Reply {
		n, ok := ParseInt(a[2])
		if !ok {
			return ErrNotInt
		}
		var nx, xx, gt, lt bool
		for _, o := range a[3:] {
			switch {
			case eq(o, "NX"):
				nx = true
			case eq(o, "XX"):
				xx = true
			case eq(o, "GT"):
				gt = true
			case eq(o, "LT"):
				lt = true
			default:
				return Errf("ERR Unsupported option " + string(o))
			}
		}
		switch {
		case nx && (xx || gt || lt):
			return Errf("ERR NX and XX, GT or LT options at the same time are not compatible")
		case gt && lt:
			return Errf("ERR GT and LT options at the same time are not compatible")
		}
		invalid := Errf("ERR invalid expire time in '" + name + "' command")
		if unit == 1000 && (n > math.MaxInt64/1000 || n < math.MinInt64/1000) {
			return invalid
		}
		when := n * unit
		if !abs {
			if when > 0 && when > math.MaxInt64-tx.nowMs {
				return invalid
			}
			when += tx.nowMs
		}
		v := tx.get(a[1])
		if v == nil {
			return Zero
		}
		switch {
		case nx && v.exp != 0, xx && v.exp == 0:
			return Zero
		case gt && (v.exp == 0 || when <= v.exp):
			return Zero
		case lt && v.exp != 0 && when >= v.exp:
			return Zero
		}
		if when <= tx.nowMs {
			tx.del(a[1])
			return One
		}
		v.exp = when
		return One
	}
}

// ttlCmd is TTL (unit 1000: seconds, rounded) and PTTL.
func ttlCmd(unit int64) func(tx *Tx, a [][]byte) Reply {
	return func(tx *Tx, a [][]byte) Reply {
		v := tx.get(a[1])
		switch {
		case v == nil:
			return IntReply(-2)
		case v.exp == 0:
			return IntReply(-1)
		}
		ms := v.exp - tx.nowMs
		if unit == 1000 {
			return IntReply((ms + 500) / 1000)
		}
		return IntReply(ms)
	}
}

func typeCmd(tx *Tx, a [][]byte) Reply {
	v := tx.get(a[1])
	if v == nil {
		return Reply{Kind: Status, Str: "none"}
	}
	return Reply{Kind: Status, Str: v.typ.Name()}
}

// errKeysLate refuses a script's KEYS after its other commands (widen).
var errKeysLate = Errf("ERR KEYS must come before a script's other commands: from it on the script holds this node's whole keyspace, which it cannot take while holding its own keys' shards")

// keysCmd is a script's KEYS pattern: the names of this node's keys that
// match, in the order of their places (a client's KEYS is the server's
// own, which lists buckets too). From it on the script holds every shard
// (widen), as a script holds the whole of a Redis.
func keysCmd(tx *Tx, a [][]byte) Reply {
	if !tx.widen() {
		return errKeysLate
	}
	out := Reply{Kind: Array}
	all := glob.All(a[1])
	for i := range tx.s.shards {
		for _, m := range tx.s.shards[i].parts {
			tx.s.visit(m, tx.nowMs, func(k string, _ Type) {
				if all || glob.Match(a[1], k) {
					out.Elems = append(out.Elems, BulkString(k))
				}
			})
		}
	}
	return out
}

func persistCmd(tx *Tx, a [][]byte) Reply {
	v := tx.get(a[1])
	if v == nil || v.exp == 0 {
		return Zero
	}
	v.exp = 0
	return One
}

func renameCmd(tx *Tx, a [][]byte) Reply {
	v := tx.get(a[1])
	if v == nil {
		return ErrNoKey
	}
	if string(a[1]) == string(a[2]) {
		return OK
	}
	// The bounds are checked before anything moves: a refused RENAME
	// leaves both keys as they were.
	size := v.footprint(len(a[2]))
	freed := v.size
	if old := tx.get(a[2]); old != nil {
		freed += old.size
	}
	if !tx.room(false, size-freed) {
		return ErrOOM
	}
	tx.del(a[2])
	tx.del(a[1])
	tx.put(a[2], v) // fits: checked above
	return OK
}

// --- hashes --------------------------------------------------------------

func hgetCmd(tx *Tx, a [][]byte) Reply {
	v, e, ok := tx.typed(TypeHash, a[1])
	if !ok {
		return e
	}
	if v == nil {
		return NilReply
	}
	x, ok := v.hash[string(a[2])]
	if !ok {
		return NilReply
	}
	return BulkReply(x)
}

func hsetCmd(hmset bool) func(tx *Tx, a [][]byte) Reply {
	return func(tx *Tx, a [][]byte) Reply {
		if len(a)%2 != 0 {
			return WrongArity(map[bool]string{false: "hset", true: "hmset"}[hmset])
		}
		v, e, ok := tx.typed(TypeHash, a[1])
		if !ok {
			return e
		}
		created := v == nil
		if created {
			v = &value{typ: TypeHash, hash: map[string][]byte{}}
		}
		before := len(v.order)
		added := int64(0)
		type was struct {
			old []byte
			had bool
		}
		prev := map[string]was{}
		for i := 2; i+1 < len(a); i += 2 {
			f := string(a[i])
			if _, seen := prev[f]; !seen {
				old, had := v.hash[f]
				prev[f] = was{old, had}
				if !had {
					added++
					v.order = append(v.order, f)
				}
			}
			v.hash[f] = append([]byte(nil), a[i+1]...)
		}
		stored := false
		if created {
			stored = tx.put(a[1], v)
		} else {
			stored = tx.resize(a[1], v)
		}
		if !stored {
			for f, w := range prev { // undo
				if w.had {
					v.hash[f] = w.old
				} else {
					delete(v.hash, f)
				}
			}
			v.order = v.order[:before]
			return ErrOOM
		}
		if hmset {
			return OK
		}
		return IntReply(added)
	}
}

func hmgetCmd(tx *Tx, a [][]byte) Reply {
	v, e, ok := tx.typed(TypeHash, a[1])
	if !ok {
		return e
	}
	out := make([]Reply, len(a)-2)
	for i, f := range a[2:] {
		out[i] = NilReply
		if v != nil {
			if x, ok := v.hash[string(f)]; ok {
				out[i] = BulkReply(x)
			}
		}
	}
	return Reply{Kind: Array, Elems: out}
}

// hfield sets field f of the hash at key to s (creating both), within
// the bounds.
func (tx *Tx) hfield(key []byte, v *value, f string, s []byte) bool {
	if v == nil {
		return tx.put(key, &value{typ: TypeHash, hash: map[string][]byte{f: s}, order: []string{f}})
	}
	old, had := v.hash[f]
	v.hash[f] = s
	if !had {
		v.order = append(v.order, f)
	}
	if !tx.resize(key, v) {
		if had {
			v.hash[f] = old
		} else {
			delete(v.hash, f)
			v.order = v.order[:len(v.order)-1]
		}
		return false
	}
	return true
}

func hincrbyCmd(tx *Tx, a [][]byte) Reply {
	d, ok := ParseInt(a[3])
	if !ok {
		return ErrNotInt
	}
	v, e, ok := tx.typed(TypeHash, a[1])
	if !ok {
		return e
	}
	var cur int64
	if v != nil {
		if x, had := v.hash[string(a[2])]; had {
			if cur, ok = ParseInt(x); !ok {
				return Errf("ERR hash value is not an integer")
			}
		}
	}
	if d > 0 && cur > math.MaxInt64-d || d < 0 && cur < math.MinInt64-d {
		return ErrOverflow
	}
	cur += d
	if !tx.hfield(a[1], v, string(a[2]), strconv.AppendInt(nil, cur, 10)) {
		return ErrOOM
	}
	return IntReply(cur)
}

func hincrbyfloatCmd(tx *Tx, a [][]byte) Reply {
	d, ok := parseFloat(a[3])
	if !ok {
		return ErrNotFloat
	}
	if math.IsInf(d, 0) {
		return Errf("ERR value is NaN or Infinity")
	}
	v, e, ok := tx.typed(TypeHash, a[1])
	if !ok {
		return e
	}
	var cur float64
	if v != nil {
		if x, had := v.hash[string(a[2])]; had {
			if cur, ok = parseFloat(x); !ok {
				return Errf("ERR hash value is not a float")
			}
		}
	}
	cur += d
	if math.IsNaN(cur) || math.IsInf(cur, 0) {
		return Errf("ERR increment would produce NaN or Infinity")
	}
	s := []byte(formatFloat(cur))
	if !tx.hfield(a[1], v, string(a[2]), s) {
		return ErrOOM
	}
	return BulkReply(s)
}

func hdelCmd(tx *Tx, a [][]byte) Reply {
	v, e, ok := tx.typed(TypeHash, a[1])
	if !ok {
		return e
	}
	if v == nil {
		return Zero
	}
	n := int64(0)
	for _, f := range a[2:] {
		if _, had := v.hash[string(f)]; had {
			delete(v.hash, string(f))
			n++
		}
	}
	if n > 0 {
		kept := v.order[:0]
		for _, f := range v.order {
			if _, ok := v.hash[f]; ok {
				kept = append(kept, f)
			}
		}
		v.order = kept
	}
	if len(v.hash) == 0 {
		tx.del(a[1])
	} else {
		tx.resize(a[1], v) // smaller: always fits
	}
	return IntReply(n)
}

func hgetallCmd(tx *Tx, a [][]byte) Reply {
	v, e, ok := tx.typed(TypeHash, a[1])
	if !ok {
		return e
	}
	out := Reply{Kind: Map}
	if v == nil {
		return out
	}
	for _, f := range v.order {
		out.Elems = append(out.Elems, BulkString(f), BulkReply(v.hash[f]))
	}
	return out
}

func hexistsCmd(tx *Tx, a [][]byte) Reply {
	v, e, ok := tx.typed(TypeHash, a[1])
	switch {
	case !ok:
		return e
	case v == nil:
		return Zero
	}
	_, had := v.hash[string(a[2])]
	return boolReply(had)
}

func hlenCmd(tx *Tx, a [][]byte) Reply {
	v, e, ok := tx.typed(TypeHash, a[1])
	switch {
	case !ok:
		return e
	case v == nil:
		return Zero
	}
	return IntReply(int64(len(v.hash)))
}

// hkeysCmd is HKEYS (fields) and HVALS, in HGETALL's order.
func hkeysCmd(fields bool) func(tx *Tx, a [][]byte) Reply {
	return func(tx *Tx, a [][]byte) Reply {
		v, e, ok := tx.typed(TypeHash, a[1])
		if !ok {
			return e
		}
		out := Reply{Kind: Array}
		if v == nil {
			return out
		}
		for _, f := range v.order {
			if fields {
				out.Elems = append(out.Elems, BulkString(f))
			} else {
				out.Elems = append(out.Elems, BulkReply(v.hash[f]))
			}
		}
		return out
	}
}

// --- lists ---------------------------------------------------------------

func pushCmd(head bool) func(tx *Tx, a [][]byte) Reply {
	return func(tx *Tx, a [][]byte) Reply {
		v, e, ok := tx.typed(TypeList, a[1])
		if !ok {
			return e
		}
		add := make([][]byte, 0, len(a)-2)
		for _, x := range a[2:] {
			add = append(add, append([]byte(nil), x...))
		}
		if head {
			add = reversed(add)
		}
		if v == nil {
			nv := &value{typ: TypeList}
			nv.push(head, add)
			if !tx.put(a[1], nv) {
				return ErrOOM
			}
			return IntReply(int64(len(nv.list)))
		}
		undo := v.push(head, add)
		if !tx.resize(a[1], v) {
			undo()
			return ErrOOM
		}
		return IntReply(int64(len(v.list)))
	}
}

func reversed(a [][]byte) [][]byte {
	out := make([][]byte, len(a))
	for i, x := range a {
		out[len(a)-1-i] = x
	}
	return out
}

func popCmd(head bool) func(tx *Tx, a [][]byte) Reply {
	return func(tx *Tx, a [][]byte) Reply {
		if len(a) > 3 {
			return WrongArity(map[bool]string{true: "lpop", false: "rpop"}[head])
		}
		count, counted := int64(1), len(a) == 3
		if counted {
			n, ok := ParseInt(a[2])
			if !ok || n < 0 {
				return Errf("ERR value is out of range, must be positive")
			}
			count = n
		}
		v, e, ok := tx.typed(TypeList, a[1])
		if !ok {
			return e
		}
		if v == nil {
			if counted {
				return Reply{Kind: NilArray}
			}
			return NilReply
		}
		n := min(int(count), len(v.list))
		var got [][]byte
		if head {
			got = append([][]byte(nil), v.list[:n]...)
			v.cut(n, len(v.list)-1)
		} else {
			got = reversed(v.list[len(v.list)-n:])
			v.cut(0, len(v.list)-n-1)
		}
		if len(v.list) == 0 {
			tx.del(a[1])
		} else {
			tx.resize(a[1], v) // smaller: always fits
		}
		if !counted {
			return BulkReply(got[0])
		}
		out := Reply{Kind: Array, Elems: make([]Reply, len(got))}
		for i, x := range got {
			out.Elems[i] = BulkReply(x)
		}
		return out
	}
}

func llenCmd(tx *Tx, a [][]byte) Reply {
	v, e, ok := tx.typed(TypeList, a[1])
	if !ok {
		return e
	}
	if v == nil {
		return Zero
	}
	return IntReply(int64(len(v.list)))
}

func lindexCmd(tx *Tx, a [][]byte) Reply {
	i, ok := ParseInt(a[2])
	if !ok {
		return ErrNotInt
	}
	v, e, ok := tx.typed(TypeList, a[1])
	if !ok {
		return e
	}
	if v == nil {
		return NilReply
	}
	if i < 0 {
		i += int64(len(v.list))
	}
	if i < 0 || i >= int64(len(v.list)) {
		return NilReply
	}
	return BulkReply(v.list[i])
}

// span resolves Redis's start and stop (negative from the end, clamped)
// over n elements; empty when nothing is in range.
func span(start, stop int64, n int) (lo, hi int, empty bool) {
	if start < 0 {
		start += int64(n)
	}
	if stop < 0 {
		stop += int64(n)
	}
	start = max(start, 0)
	if start > stop || start >= int64(n) {
		return 0, 0, true
	}
	stop = min(stop, int64(n)-1)
	return int(start), int(stop), false
}

func lrangeCmd(tx *Tx, a [][]byte) Reply {
	start, ok1 := ParseInt(a[2])
	stop, ok2 := ParseInt(a[3])
	if !ok1 || !ok2 {
		return ErrNotInt
	}
	v, e, ok := tx.typed(TypeList, a[1])
	if !ok {
		return e
	}
	out := Reply{Kind: Array}
	if v == nil {
		return out
	}
	lo, hi, empty := span(start, stop, len(v.list))
	if empty {
		return out
	}
	for _, x := range v.list[lo : hi+1] {
		out.Elems = append(out.Elems, BulkReply(x))
	}
	return out
}

func ltrimCmd(tx *Tx, a [][]byte) Reply {
	start, ok1 := ParseInt(a[2])
	stop, ok2 := ParseInt(a[3])
	if !ok1 || !ok2 {
		return ErrNotInt
	}
	v, e, ok := tx.typed(TypeList, a[1])
	if !ok {
		return e
	}
	if v == nil {
		return OK
	}
	lo, hi, empty := span(start, stop, len(v.list))
	if empty {
		tx.del(a[1])
		return OK
	}
	v.cut(lo, hi)
	tx.resize(a[1], v) // smaller: always fits
	return OK
}
