package keyspace

import (
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
)

// Sorted sets, as sliding-log rate limiters keep them: each member has a
// score, and members are ordered by score, then by their bytes, as Redis
// orders them.
//
// A sorted set is Redis's skip list — nodes on levels drawn with
// probability 1/4 each, each link carrying its span (how many members it
// passes over) — beside a map from member to score. Adding, removing or
// rescoring a member, the rank of a member and the member at a rank are
// O(log n); ZSCORE and ZCARD O(1); a range of m members O(log n + m);
// removing m members by range O(log n + m). A sliding log of 10,000
// members costs O(log n) per ZADD, never a copy of the set.

// zMaxLevel bounds a node's levels: 4^32 members.
const zMaxLevel = 32

// zMemberOverhead is what a member costs besides its bytes, charged
// against the memory bound: its node (the member's header, its score,
// the back link, the levels' links and spans) and its entry in the map.
const zMemberOverhead = 96

type zlevel struct {
	next *znode
	span int // members from this node to next on this level
}

type znode struct {
	member string
	score  float64
	back   *znode
	lv     []zlevel
}

type zset struct {
	scores map[string]float64
	head   *znode // no member: its levels are the list's starts
	tail   *znode
	level  int
	n      int
	// bytes is what the members are charged, kept as they come and go so
	// that footprint need not walk them.
	bytes int64
}

func newZset() *zset {
	return &zset{scores: map[string]float64{}, head: &znode{lv: make([]zlevel, zMaxLevel)}, level: 1}
}

func memberSize(m string) int64 { return int64(len(m) + zMemberOverhead) }

// before reports whether (s1, m1) comes before (s2, m2).
func before(s1 float64, m1 string, s2 float64, m2 string) bool {
	return s1 < s2 || s1 == s2 && m1 < m2
}

func zRandomLevel() int {
	l := 1
	for l < zMaxLevel && rand.Uint32()&3 == 0 {
		l++
	}
	return l
}

// add adds member (not in the set) with score.
func (z *zset) add(member string, score float64) {
	z.scores[member] = score
	z.bytes += memberSize(member)
	z.insert(score, member)
}

// remove removes member, if it is in the set.
func (z *zset) remove(member string) bool {
	score, ok := z.scores[member]
	if !ok {
		return false
	}
	z.delete(score, member)
	delete(z.scores, member)
	z.bytes -= memberSize(member)
	return true
}

// rescore moves member from score old to score new.
func (z *zset) rescore(member string, old, new float64) {
	z.delete(old, member)
	z.insert(new, member)
	z.scores[member] = new
}

func (z *zset) insert(score float64, member string) {
	var update [zMaxLevel]*znode
	var rank [zMaxLevel]int
	x := z.head
	for i := z.level - 1; i >= 0; i-- {
		if i < z.level-1 {
			rank[i] = rank[i+1]
		}
		for x.lv[i].next != nil && before(x.lv[i].next.score, x.lv[i].next.member, score, member) {
			rank[i] += x.lv[i].span
			x = x.lv[i].next
		}
		update[i] = x
	}
	level := zRandomLevel()
	if level > z.level {
		for i := z.level; i < level; i++ {
			rank[i] = 0
			update[i] = z.head
			z.head.lv[i].span = z.n
		}
		z.level = level
	}
	x = &znode{member: member, score: score, lv: make([]zlevel, level)}
	for i := range level {
		x.lv[i].next = update[i].lv[i].next
		update[i].lv[i].next = x
		x.lv[i].span = update[i].lv[i].span - (rank[0] - rank[i])
		update[i].lv[i].span = rank[0] - rank[i] + 1
	}
	for i := level; i < z.level; i++ {
		update[i].lv[i].span++
	}
	if update[0] != z.head {
		x.back = update[0]
	}
	if x.lv[0].next != nil {
		x.lv[0].next.back = x
	} else {
		z.tail = x
	}
	z.n++
}

// unlink takes x out of the list; update holds, on each level, the last
// node before x.
func (z *zset) unlink(x *znode, update *[zMaxLevel]*znode) {
	for i := range z.level {
		if update[i].lv[i].next == x {
			update[i].lv[i].span += x.lv[i].span - 1
			update[i].lv[i].next = x.lv[i].next
		} else {
			update[i].lv[i].span--
		}
	}
	if x.lv[0].next != nil {
		x.lv[0].next.back = x.back
	} else {
		z.tail = x.back
	}
	for z.level > 1 && z.head.lv[z.level-1].next == nil {
		z.level--
	}
	z.n--
}

func (z *zset) delete(score float64, member string) {
	var update [zMaxLevel]*znode
	x := z.head
	for i := z.level - 1; i >= 0; i-- {
		for x.lv[i].next != nil && before(x.lv[i].next.score, x.lv[i].next.member, score, member) {
			x = x.lv[i].next
		}
		update[i] = x
	}
	if x = x.lv[0].next; x != nil && x.score == score && x.member == member {
		z.unlink(x, &update)
	}
}

// rank is member's rank, 1 for the first; 0 when it is not in the set.
func (z *zset) rank(member string) int {
	score, ok := z.scores[member]
	if !ok {
		return 0
	}
	r, x := 0, z.head
	for i := z.level - 1; i >= 0; i-- {
		for x.lv[i].next != nil && !before(score, member, x.lv[i].next.score, x.lv[i].next.member) {
			r += x.lv[i].span
			x = x.lv[i].next
		}
		if x != z.head && x.member == member {
			return r
		}
	}
	return 0
}

// at returns the member at rank r (1 for the first), nil past the ends.
func (z *zset) at(r int) *znode {
	if r < 1 || r > z.n {
		return nil
	}
	seen, x := 0, z.head
	for i := z.level - 1; i >= 0; i-- {
		for x.lv[i].next != nil && seen+x.lv[i].span <= r {
			seen += x.lv[i].span
			x = x.lv[i].next
		}
		if seen == r {
			return x
		}
	}
	return nil
}

// removeRanks removes the members of ranks lo to hi (1 for the first)
// and returns how many it removed.
func (z *zset) removeRanks(lo, hi int) int {
	var update [zMaxLevel]*znode
	seen, x := 0, z.head
	for i := z.level - 1; i >= 0; i-- {
		for x.lv[i].next != nil && seen+x.lv[i].span < lo {
			seen += x.lv[i].span
			x = x.lv[i].next
		}
		update[i] = x
	}
	seen++
	x = x.lv[0].next
	removed := 0
	for x != nil && seen <= hi {
		next := x.lv[0].next
		z.unlink(x, &update)
		delete(z.scores, x.member)
		z.bytes -= memberSize(x.member)
		removed++
		seen++
		x = next
	}
	return removed
}

// A span of the order: by score (scoreSpan) or, for members of one
// score, by their bytes (lexSpan).
type zspan interface {
	// below: the member comes before the span; above: after it.
	below(x *znode) bool
	above(x *znode) bool
}

// first returns the span's first member and its rank; nil when the span
// holds none.
func (z *zset) first(sp zspan) (*znode, int) {
	seen, x := 0, z.head
	for i := z.level - 1; i >= 0; i-- {
		for x.lv[i].next != nil && sp.below(x.lv[i].next) {
			seen += x.lv[i].span
			x = x.lv[i].next
		}
	}
	if x = x.lv[0].next; x == nil || sp.above(x) {
		return nil, 0
	}
	return x, seen + 1
}

// last returns the span's last member and its rank; nil when the span
// holds none.
func (z *zset) last(sp zspan) (*znode, int) {
	seen, x := 0, z.head
	for i := z.level - 1; i >= 0; i-- {
		for x.lv[i].next != nil && !sp.above(x.lv[i].next) {
			seen += x.lv[i].span
			x = x.lv[i].next
		}
	}
	if x == z.head || sp.below(x) {
		return nil, 0
	}
	return x, seen
}

// ranks returns the ranks of the span's first and last members; lo 0
// when it holds none.
func (z *zset) ranks(sp zspan) (lo, hi int) {
	if _, lo = z.first(sp); lo == 0 {
		return 0, 0
	}
	_, hi = z.last(sp)
	return lo, hi
}

// scoreSpan is a range of scores, each end in it or not ("(1.5").
type scoreSpan struct {
	min, max     float64
	minEx, maxEx bool
}

func (r scoreSpan) below(x *znode) bool {
	return x.score < r.min || r.minEx && x.score == r.min
}

func (r scoreSpan) above(x *znode) bool {
	return x.score > r.max || r.maxEx && x.score == r.max
}

// lexEnd is an end of a range of members: s, in it or not ("[a", "(a"),
// or the least ("-": inf -1) or greatest ("+": inf 1) of all.
type lexEnd struct {
	s   string
	inf int
	ex  bool
}

// cmp compares member m with the end.
func (e lexEnd) cmp(m string) int {
	if e.inf != 0 {
		return -e.inf
	}
	return strings.Compare(m, e.s)
}

type lexSpan struct{ min, max lexEnd }

func (r lexSpan) below(x *znode) bool {
	c := r.min.cmp(x.member)
	return c < 0 || c == 0 && r.min.ex
}

func (r lexSpan) above(x *znode) bool {
	c := r.max.cmp(x.member)
	return c > 0 || c == 0 && r.max.ex
}

// --- numbers -------------------------------------------------------------

// cFloat reads all of s as C's strtod reads a number: decimal or
// hexadecimal ("0x1p3", "0x10"), inf and infinity in any case, with a
// sign; not NaN. over: past the largest double (±inf); under: not zero,
// yet nearer zero than any double (0).
func cFloat(s string) (f float64, over, under, ok bool) {
	body := s
	if body != "" && (body[0] == '+' || body[0] == '-') {
		body = body[1:]
	}
	if l := strings.ToLower(body); l == "inf" || l == "infinity" {
		f = math.Inf(1)
		if s[0] == '-' {
			f = math.Inf(-1)
		}
		return f, false, false, true
	}
	hex := len(body) > 2 && body[0] == '0' && (body[1] == 'x' || body[1] == 'X')
	digit, exp := isDigit, byte('e')
	if hex {
		body, digit, exp = body[2:], isHexDigit, 'p'
	}
	// digits [. digits] | . digits, then an exponent of decimal digits
	i, mant, nonzero := 0, 0, false
	for ; i < len(body) && digit(body[i]); i++ {
		mant++
		nonzero = nonzero || body[i] != '0'
	}
	if i < len(body) && body[i] == '.' {
		for i++; i < len(body) && digit(body[i]); i++ {
			mant++
			nonzero = nonzero || body[i] != '0'
		}
	}
	if mant == 0 {
		return 0, false, false, false
	}
	hasExp := false
	if i < len(body) && (body[i]|0x20) == exp {
		j := i + 1
		if j < len(body) && (body[j] == '+' || body[j] == '-') {
			j++
		}
		k := j
		for k < len(body) && isDigit(body[k]) {
			k++
		}
		if k == j {
			return 0, false, false, false // strtod stops before the 'e': not all of s
		}
		i, hasExp = k, true
	}
	if i != len(body) {
		return 0, false, false, false
	}
	text := s
	if hex && !hasExp {
		text += "p0" // Go's hexadecimal floats need their exponent
	}
	f, err := strconv.ParseFloat(text, 64)
	if err != nil && !math.IsInf(f, 0) {
		return 0, false, false, false
	}
	return f, math.IsInf(f, 0), f == 0 && nonzero, true
}

func isDigit(c byte) bool    { return '0' <= c && c <= '9' }
func isHexDigit(c byte) bool { return isDigit(c) || 'a' <= c|0x20 && c|0x20 <= 'f' }

// parseScore reads a score as ZADD does (Redis's string2d): all of it a
// number, no space before, neither past the doubles' range nor lost to
// zero. -0 is 0, as Redis keeps a small set's scores.
func parseScore(b []byte) (float64, bool) {
	f, over, under, ok := cFloat(string(b))
	if !ok || over || under {
		return 0, false
	}
	return f + 0, true // -0 + 0 is 0
}

// parseEnd reads an end of a score range as Redis's zslParseRange does:
// "(" first for an end not in the range, then what strtod reads up to a
// NUL byte, spaces before it allowed, a number past the range taken as
// ±inf; an empty text is 0.
func parseEnd(b []byte) (f float64, ex, ok bool) {
	s := string(b)
	if s != "" && s[0] == '(' {
		s, ex = s[1:], true
	}
	if i := strings.IndexByte(s, 0); i >= 0 {
		s = s[:i]
	}
	if s == "" {
		return 0, ex, true
	}
	t := strings.TrimLeft(s, " \t\n\v\f\r")
	f, _, _, ok = cFloat(t)
	return f + 0, ex, ok && t != ""
}

var errNotFloatRange = Errf("ERR min or max is not a float")

// parseSpan reads ZCOUNT's, ZRANGEBYSCORE's and ZREMRANGEBYSCORE's min and
// max.
func parseSpan(min, max []byte) (scoreSpan, bool) {
	var r scoreSpan
	var ok1, ok2 bool
	r.min, r.minEx, ok1 = parseEnd(min)
	r.max, r.maxEx, ok2 = parseEnd(max)
	return r, ok1 && ok2
}

// parseLexEnd reads an end of a range of members: "[a", "(a", "-", "+".
func parseLexEnd(b []byte) (lexEnd, bool) {
	switch {
	case len(b) == 0:
		return lexEnd{}, false
	case b[0] == '+' || b[0] == '-':
		// Redis reads "+" and "-" up to a NUL byte.
		if len(b) > 1 && b[1] != 0 {
			return lexEnd{}, false
		}
		if b[0] == '+' {
			return lexEnd{inf: 1, ex: true}, true
		}
		return lexEnd{inf: -1, ex: true}, true
	case b[0] == '(':
		return lexEnd{s: string(b[1:]), ex: true}, true
	case b[0] == '[':
		return lexEnd{s: string(b[1:])}, true
	}
	return lexEnd{}, false
}

// formatScore writes a score as Redis 7.0 writes a double (printf's
// %.17g; inf and -inf).
func formatScore(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	}
	e := strconv.FormatFloat(f, 'e', 16, 64) // 17 digits: d.dddddddddddddddde±XX
	at := strings.IndexByte(e, 'e')
	x, _ := strconv.Atoi(e[at+1:])
	if x < -4 || x >= 17 {
		return trimFraction(e[:at]) + e[at:]
	}
	return trimFraction(strconv.FormatFloat(f, 'f', 16-x, 64))
}

// trimFraction drops the trailing zeros of a fraction, and its point if
// nothing is left after it, as %g does.
func trimFraction(s string) string {
	if !strings.Contains(s, ".") {
		return s
	}
	s = strings.TrimRight(s, "0")
	return strings.TrimSuffix(s, ".")
}

func scoreReply(f float64) Reply { return BulkString(formatScore(f)) }

// --- commands ------------------------------------------------------------

var (
	errNaNScore = Errf("ERR resulting score is not a number (NaN)")
	errLexRange = Errf("ERR min or max not valid string range item")
)

// zaddCmd is ZADD key [NX | XX] [GT | LT] [CH] [INCR] score member …, and
// ZINCRBY key increment member (incr), which Redis runs as ZADD INCR,
// reading the same options.
func zaddCmd(incr bool) func(tx *Tx, a [][]byte) Reply {
	return func(tx *Tx, a [][]byte) Reply {
		var nx, xx, gt, lt, ch bool
		incr := incr
		i := 2
	options:
		for ; i < len(a); i++ {
			switch o := a[i]; {
			case eq(o, "NX"):
				nx = true
			case eq(o, "XX"):
				xx = true
			case eq(o, "CH"):
				ch = true
			case eq(o, "INCR"):
				incr = true
			case eq(o, "GT"):
				gt = true
			case eq(o, "LT"):
				lt = true
			default:
				break options
			}
		}
		pairs := len(a) - i
		switch {
		case pairs == 0 || pairs%2 != 0:
			return ErrSyntax
		case nx && xx:
			return Errf("ERR XX and NX options at the same time are not compatible")
		case gt && nx || lt && nx || gt && lt:
			return Errf("ERR GT, LT, and/or NX options at the same time are not compatible")
		case incr && pairs > 2:
			return Errf("ERR INCR option supports a single increment-element pair")
		}
		scores := make([]float64, pairs/2)
		for j := range scores {
			f, ok := parseScore(a[i+2*j])
			if !ok {
				return ErrNotFloat
			}
			scores[j] = f
		}
		member := func(j int) string { return string(a[i+2*j+1]) }
		v, e, ok := tx.typed(TypeZSet, a[1])
		if !ok {
			return e
		}
		if v == nil && xx {
			if incr {
				return NilReply
			}
			return Zero
		}
		created := v == nil
		if created {
			v = &value{typ: TypeZSet, zs: newZset()}
		} else {
			// The bounds are checked before anything changes: a refused
			// ZADD leaves the set as it was.
			grow := int64(0)
			var fresh map[string]bool
			for j := range scores {
				m := member(j)
				if _, had := v.zs.scores[m]; !had && !xx && !fresh[m] {
					if fresh == nil {
						fresh = map[string]bool{}
					}
					fresh[m] = true
					grow += memberSize(m)
				}
			}
			if !tx.room(false, grow) {
				return ErrOOM
			}
		}
		z := v.zs
		added, updated, done := int64(0), int64(0), 0
		var score float64
		for j, sc := range scores {
			m := member(j)
			cur, had := z.scores[m]
			switch {
			case had && nx, !had && xx:
				continue
			case had:
				if incr {
					if sc += cur; math.IsNaN(sc) {
						return errNaNScore // INCR has one member: nothing changed
					}
				}
				if lt && sc >= cur || gt && sc <= cur {
					continue
				}
				if sc != cur {
					z.rescore(m, cur, sc)
					updated++
				}
			default:
				z.add(m, sc)
				added++
			}
			score = sc
			done++
		}
		if created {
			if !tx.put(a[1], v) {
				return ErrOOM
			}
		} else {
			tx.recharge(a[1], v)
		}
		switch {
		case incr && done == 0:
			return NilReply
		case incr:
			return scoreReply(score)
		case ch:
			return IntReply(added + updated)
		}
		return IntReply(added)
	}
}

// zsetOf returns the sorted set at key, nil when there is none, or
// WRONGTYPE.
func (tx *Tx) zsetOf(key []byte) (*zset, Reply, bool) {
	v, e, ok := tx.typed(TypeZSet, key)
	if !ok || v == nil {
		return nil, e, ok
	}
	return v.zs, Reply{}, true
}

// shrunk recharges the sorted set at key after members left it, and
// removes the key when none is left, as Redis does.
func (tx *Tx) shrunk(key []byte) {
	v := tx.get(key)
	if v.zs.n == 0 {
		tx.del(key)
		return
	}
	tx.recharge(key, v)
}

func zremCmd(tx *Tx, a [][]byte) Reply {
	z, e, ok := tx.zsetOf(a[1])
	if !ok || z == nil {
		return orZero(e, ok)
	}
	n := int64(0)
	for _, m := range a[2:] {
		if z.remove(string(m)) {
			n++
		}
	}
	tx.shrunk(a[1])
	return IntReply(n)
}

// orZero is the reply of a command on a missing key (ok) that answers 0,
// or the error e.
func orZero(e Reply, ok bool) Reply {
	if !ok {
		return e
	}
	return Zero
}

func zcardCmd(tx *Tx, a [][]byte) Reply {
	z, e, ok := tx.zsetOf(a[1])
	if !ok || z == nil {
		return orZero(e, ok)
	}
	return IntReply(int64(z.n))
}

func zscoreCmd(tx *Tx, a [][]byte) Reply {
	z, e, ok := tx.zsetOf(a[1])
	switch {
	case !ok:
		return e
	case z == nil:
		return NilReply
	}
	f, had := z.scores[string(a[2])]
	if !had {
		return NilReply
	}
	return scoreReply(f)
}

// zrankCmd is ZRANK and ZREVRANK (rev): a member's rank from 0.
func zrankCmd(rev bool) func(tx *Tx, a [][]byte) Reply {
	return func(tx *Tx, a [][]byte) Reply {
		z, e, ok := tx.zsetOf(a[1])
		switch {
		case !ok:
			return e
		case z == nil:
			return NilReply
		}
		r := z.rank(string(a[2]))
		switch {
		case r == 0:
			return NilReply
		case rev:
			return IntReply(int64(z.n - r))
		}
		return IntReply(int64(r - 1))
	}
}

func zcountCmd(tx *Tx, a [][]byte) Reply {
	r, ok := parseSpan(a[2], a[3])
	if !ok {
		return errNotFloatRange
	}
	z, e, ok := tx.zsetOf(a[1])
	if !ok || z == nil {
		return orZero(e, ok)
	}
	lo, hi := z.ranks(r)
	if lo == 0 {
		return Zero
	}
	return IntReply(int64(hi - lo + 1))
}

// zremrangeCmd is ZREMRANGEBYSCORE (byScore) and ZREMRANGEBYRANK.
func zremrangeCmd(byScore bool) func(tx *Tx, a [][]byte) Reply {
	return func(tx *Tx, a [][]byte) Reply {
		var r scoreSpan
		var start, stop int64
		if byScore {
			var ok bool
			if r, ok = parseSpan(a[2], a[3]); !ok {
				return errNotFloatRange
			}
		} else {
			var ok1, ok2 bool
			start, ok1 = ParseInt(a[2])
			stop, ok2 = ParseInt(a[3])
			if !ok1 || !ok2 {
				return ErrNotInt
			}
		}
		z, e, ok := tx.zsetOf(a[1])
		if !ok || z == nil {
			return orZero(e, ok)
		}
		var lo, hi int
		if byScore {
			if lo, hi = z.ranks(r); lo == 0 {
				return Zero
			}
		} else {
			l, h, empty := span(start, stop, z.n)
			if empty {
				return Zero
			}
			lo, hi = l+1, h+1
		}
		n := z.removeRanks(lo, hi)
		tx.shrunk(a[1])
		return IntReply(int64(n))
	}
}

// How a range command reads its range: by index (rank), by score or by
// member (lex).
type zby uint8

const (
	zbyAny zby = iota // ZRANGE: BYSCORE or BYLEX may say, else by index
	zbyRank
	zbyScore
	zbyLex
)

// zrangeCmd is ZRANGE key start stop [BYSCORE | BYLEX] [REV] [LIMIT offset
// count] [WITHSCORES] (by zbyAny, rev false: they may be given) and the
// older commands it stands for: ZRANGEBYSCORE, ZREVRANGE and
// ZREVRANGEBYSCORE, as Redis's zrangeGenericCommand reads them all.
func zrangeCmd(by zby, rev bool) func(tx *Tx, a [][]byte) Reply {
	return func(tx *Tx, a [][]byte) Reply {
		by, rev := by, rev
		auto := by == zbyAny // ZRANGE reads REV, BYSCORE and BYLEX
		withScores := false
		offset, limit := int64(0), int64(-1)
		for j := 4; j < len(a); j++ {
			switch o := a[j]; {
			case eq(o, "WITHSCORES"):
				withScores = true
			case eq(o, "LIMIT") && len(a)-j-1 >= 2:
				var ok bool
				if offset, ok = ParseInt(a[j+1]); !ok {
					return ErrNotInt
				}
				if limit, ok = ParseInt(a[j+2]); !ok {
					return ErrNotInt
				}
				j += 2
			case eq(o, "REV") && auto && !rev:
				rev = true
			case eq(o, "BYLEX") && by == zbyAny:
				by = zbyLex
			case eq(o, "BYSCORE") && by == zbyAny:
				by = zbyScore
			default:
				return ErrSyntax
			}
		}
		if by == zbyAny {
			by = zbyRank
		}
		switch {
		case limit != -1 && by == zbyRank:
			return Errf("ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX")
		case withScores && by == zbyLex:
			return Errf("ERR syntax error, WITHSCORES not supported in combination with BYLEX")
		}
		lo, hi := a[2], a[3]
		if rev && by != zbyRank {
			lo, hi = hi, lo // the range is given as max, min
		}
		var start, stop int64
		var sp zspan
		switch by {
		case zbyRank:
			var ok1, ok2 bool
			start, ok1 = ParseInt(lo)
			stop, ok2 = ParseInt(hi)
			if !ok1 || !ok2 {
				return ErrNotInt
			}
		case zbyScore:
			r, ok := parseSpan(lo, hi)
			if !ok {
				return errNotFloatRange
			}
			sp = r
		case zbyLex:
			min, ok1 := parseLexEnd(lo)
			max, ok2 := parseLexEnd(hi)
			if !ok1 || !ok2 {
				return errLexRange
			}
			sp = lexSpan{min, max}
		}
		out := Reply{Kind: Array}
		z, e, ok := tx.zsetOf(a[1])
		switch {
		case !ok:
			return e
		case z == nil:
			return out
		}
		emit := func(x *znode) {
			out.Elems = append(out.Elems, BulkString(x.member))
			if withScores {
				out.Elems = append(out.Elems, scoreReply(x.score))
			}
		}
		if by == zbyRank {
			l, h, empty := span(start, stop, z.n)
			if empty {
				return out
			}
			x := z.at(l + 1)
			if rev {
				x = z.at(z.n - l)
			}
			for n := h - l + 1; n > 0 && x != nil; n-- {
				emit(x)
				if rev {
					x = x.back
				} else {
					x = x.lv[0].next
				}
			}
			return out
		}
		// By score or member: from the span's first (last, reversed)
		// member, offset on, at most limit (all when negative); a
		// negative offset gives none, as in Redis.
		if offset < 0 || offset > 0 && offset >= int64(z.n) {
			return out
		}
		var x *znode
		if rev {
			if _, r := z.last(sp); r > 0 && int64(r) > offset {
				x = z.at(r - int(offset))
			}
		} else if _, r := z.first(sp); r > 0 && int64(r)+offset <= int64(z.n) {
			x = z.at(r + int(offset))
		}
		for ; x != nil && limit != 0; limit-- {
			if rev && sp.below(x) || !rev && sp.above(x) {
				break
			}
			emit(x)
			if rev {
				x = x.back
			} else {
				x = x.lv[0].next
			}
		}
		return out
	}
}

// --- RESP3 ---------------------------------------------------------------

// resp3Shape says how a command's RESP2 reply becomes Redis 7's RESP3 one.
type resp3Shape uint8

const (
	// asScore: a score (a bulk string in RESP2) is a double.
	asScore resp3Shape = iota + 1
	// asPairs: a range WITHSCORES (member, score, member, score … in
	// RESP2) is an array of [member, score] pairs, scores as doubles.
	asPairs
)

// RESP3 returns r, the reply of the command to arguments a as every
// command returns it (RESP2's, which scripts and other nodes read), as
// Redis 7 answers a RESP3 client: ZSCORE, ZINCRBY and ZADD INCR answer a
// double, and a range WITHSCORES an array of [member, score] pairs.
func (sp *Spec) RESP3(a [][]byte, r Reply) Reply {
	switch {
	case sp.resp3 == asScore && r.Kind == Bulk:
		return Reply{Kind: Double, Str: r.Str}
	case sp.resp3 == asPairs && r.Kind == Array && withScores(a):
		out := Reply{Kind: Array, Elems: make([]Reply, 0, len(r.Elems)/2)}
		for i := 0; i+1 < len(r.Elems); i += 2 {
			out.Elems = append(out.Elems, Reply{Kind: Array, Elems: []Reply{r.Elems[i], {Kind: Double, Str: r.Elems[i+1].Str}}})
		}
		return out
	}
	return r
}

// withScores reports whether a range command's arguments ask WITHSCORES
// (LIMIT's are integers, so the word is the option).
func withScores(a [][]byte) bool {
	for _, x := range a[min(4, len(a)):] {
		if eq(x, "WITHSCORES") {
			return true
		}
	}
	return false
}
