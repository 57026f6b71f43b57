package commands

import "strconv"

// RESP3 (after HELLO 3) differs from RESP2 only in some reply types: maps,
// sets, nulls and verbatim strings. Arrays, integers, bulk and simple
// strings and errors are the same bytes in both, so most handlers write
// through ctx.Conn (redcon's writer) whatever the protocol, and the hot
// replies (RL.ACQUIRE's six-array, CL.THROTTLE's five integers) allocate
// nothing in either. The types that differ go through the methods below,
// which read the session's protocol.

// Proto returns the connection's protocol version, 2 or 3.
func (s *Session) Proto() int {
	if s.resp3.Load() {
		return 3
	}
	return 2
}

// setProto switches the connection's protocol (HELLO, RESET).
func (s *Session) setProto(v int64) { s.resp3.Store(v == 3) }

// RESP3 reports whether the connection speaks RESP3.
func (ctx *Ctx) RESP3() bool { return ctx.S.resp3.Load() }

// header writes a RESP3 aggregate header such as %3 or ~2.
func (ctx *Ctx) header(kind byte, n int) {
	h := append(ctx.S.hdr[:0], kind)
	h = strconv.AppendInt(h, int64(n), 10)
	h = append(h, '\r', '\n')
	ctx.S.hdr = h
	ctx.Conn.WriteRaw(h)
}

// WriteMap starts a map of n key/value pairs: a RESP3 map, or in RESP2 an
// array of 2n elements (the flat pairs Redis sends there).
func (ctx *Ctx) WriteMap(n int) {
	if ctx.RESP3() {
		ctx.header('%', n)
		return
	}
	ctx.Conn.WriteArray(2 * n)
}

// WriteSet starts a set of n elements (an array in RESP2).
func (ctx *Ctx) WriteSet(n int) {
	if ctx.RESP3() {
		ctx.header('~', n)
		return
	}
	ctx.Conn.WriteArray(n)
}

var (
	resp3Null  = []byte("_\r\n")
	resp2Null  = []byte("$-1\r\n")
	resp2NullA = []byte("*-1\r\n")
)

// WriteNull writes a missing value: _ in RESP3, the null bulk string in RESP2.
func (ctx *Ctx) WriteNull() {
	if ctx.RESP3() {
		ctx.Conn.WriteRaw(resp3Null)
		return
	}
	ctx.Conn.WriteRaw(resp2Null)
}

// WriteNullArray writes a missing array: _ in RESP3, *-1 in RESP2.
func (ctx *Ctx) WriteNullArray() {
	if ctx.RESP3() {
		ctx.Conn.WriteRaw(resp3Null)
		return
	}
	ctx.Conn.WriteRaw(resp2NullA)
}

// WriteVerbatim writes text meant for people (INFO, CLIENT INFO, CLIENT
// LIST): a RESP3 verbatim string of format txt, or a bulk string in RESP2,
// as Redis does.
func (ctx *Ctx) WriteVerbatim(text string) {
	if !ctx.RESP3() {
		ctx.Conn.WriteBulkString(text)
		return
	}
	h := append(ctx.S.hdr[:0], '=')
	h = strconv.AppendInt(h, int64(len(text)+4), 10)
	h = append(h, "\r\ntxt:"...)
	h = append(h, text...)
	h = append(h, '\r', '\n')
	ctx.S.hdr = h
	ctx.Conn.WriteRaw(h)
}

// writeRelayed writes a reply another node sent (a forwarded command). The
// nodes talk RESP2; the only reply of a forwarded command that differs in
// RESP3 is a null (RL.BUDGET GET … CONSISTENT of a missing node).
func (ctx *Ctx) writeRelayed(raw []byte) {
	if ctx.RESP3() && (string(raw) == string(resp2Null) || string(raw) == string(resp2NullA)) {
		raw = resp3Null
	}
	ctx.Conn.WriteRaw(raw)
}
