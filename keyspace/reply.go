package keyspace

import "strconv"

// Kind is a reply's type, as RESP has them.
type Kind uint8

const (
	Nil    Kind = iota // a null bulk string (RESP3: null)
	Status             // +OK
	Error              // -ERR …
	Int                // :n
	Bulk               // $n
	Array              // *n; a null array is Nil
	// Map is an array of field, value pairs, a map in RESP3 (HGETALL).
	Map
	// NilArray is a null array (*-1; RESP3: null), as LPOP key count
	// answers for a missing key.
	NilArray
	// Double is a RESP3 double (,1.5), Str its text; only Spec.RESP3
	// makes one, for a RESP3 client: every command answers a score as a
	// bulk string, as RESP2 has it and scripts and other nodes read it.
	Double
)

// Reply is a command's answer in Redis's types: what the RESP front
// writes and a script's redis.call converts, so both see one answer.
type Reply struct {
	Kind  Kind
	Str   string // Status, Error and Bulk text
	Int   int64
	Elems []Reply // Array and Map (field, value, field, value …)
}

// The replies every command shares.
var (
	OK        = Reply{Kind: Status, Str: "OK"}
	NilReply  = Reply{Kind: Nil}
	Zero, One = Reply{Kind: Int}, Reply{Kind: Int, Int: 1}
)

// Errors, in Redis's words.
var (
	ErrWrongType = Errf("WRONGTYPE Operation against a key holding the wrong kind of value")
	ErrSyntax    = Errf("ERR syntax error")
	ErrNotInt    = Errf("ERR value is not an integer or out of range")
	ErrNotFloat  = Errf("ERR value is not a valid float")
	ErrOverflow  = Errf("ERR increment or decrement would overflow")
	ErrNoKey     = Errf("ERR no such key")
	// ErrOOM refuses a write past the keyspace's bounds (--max-buckets
	// keys, --max-data-memory bytes), as Redis refuses one past maxmemory.
	ErrOOM = Errf("OOM command not allowed when used memory > 'maxmemory'.")
)

// Errf is an error reply with text msg ("CODE message").
func Errf(msg string) Reply { return Reply{Kind: Error, Str: msg} }

// IntReply is :n.
func IntReply(n int64) Reply { return Reply{Kind: Int, Int: n} }

// BulkReply is $n with b's bytes.
func BulkReply(b []byte) Reply { return Reply{Kind: Bulk, Str: string(b)} }

// BulkString is $n with s.
func BulkString(s string) Reply { return Reply{Kind: Bulk, Str: s} }

func boolReply(ok bool) Reply {
	if ok {
		return One
	}
	return Zero
}

// IsError reports whether r is an error reply.
func (r Reply) IsError() bool { return r.Kind == Error }

// formatFloat writes f as Redis writes INCRBYFLOAT's result, which it
// computes in long double and prints with 17 decimals, trailing zeros
// trimmed: in float64, rounding to 15 significant digits first gives the
// same text for the sums of short decimals libraries add (0.1 + 0.2 is
// 0.3, as Redis answers); no exponent.
func formatFloat(f float64) string {
	r, err := strconv.ParseFloat(strconv.FormatFloat(f, 'g', 15, 64), 64)
	if err != nil {
		r = f
	}
	return strconv.FormatFloat(r, 'f', -1, 64)
}
