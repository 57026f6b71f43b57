package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"
)

// appendCommand appends args as one RESP multibulk command.
func appendCommand(b []byte, args ...string) []byte {
	b = appendHeader(b, '*', len(args))
	for _, a := range args {
		b = appendBulk(b, a)
	}
	return b
}

func appendHeader(b []byte, c byte, n int) []byte {
	b = append(b, c)
	b = strconv.AppendInt(b, int64(n), 10)
	return append(b, '\r', '\n')
}

func appendBulk(b []byte, s string) []byte {
	b = appendHeader(b, '$', len(s))
	b = append(b, s...)
	return append(b, '\r', '\n')
}

// appendBulkNum appends the bulk string prefix+n (such as "key:42")
// without allocating.
func appendBulkNum(b []byte, prefix string, n uint64) []byte {
	digits := 1
	for v := n; v >= 10; v /= 10 {
		digits++
	}
	b = appendHeader(b, '$', len(prefix)+digits)
	b = append(b, prefix...)
	b = strconv.AppendUint(b, n, 10)
	return append(b, '\r', '\n')
}

// reply is what the generator needs of one RESP2 reply: its type, its
// integer or length, and for an array the type and integer value of its
// first element. Everything else is read and skipped.
type reply struct {
	typ  byte   // '+', '-', ':', '$' or '*'
	n    int64  // ':' value; '$' and '*' length (-1 for nil)
	text []byte // '+' and '-' text, valid until the next read
	// An array's first element: its type and, for ':', its value.
	firstTyp byte
	first    int64
}

// errProtocol marks bytes that are not RESP2; the run cannot continue on
// that connection.
var errProtocol = errors.New("protocol error")

// maxLine bounds one reply line (simple string, error, header), so that a
// server that never sends CRLF cannot make the reader grow without end.
const maxLine = 1 << 20

// maxDepth bounds array nesting the reader follows.
const maxDepth = 16

// replyReader parses RESP2 replies from r into a reused buffer, allocating
// nothing per reply. at is when the read that completed the latest reply
// returned: the moment that reply arrived, as precisely as a user-space
// reader can tell, without a clock call per reply.
type replyReader struct {
	rd   io.Reader
	buf  []byte
	r, w int
	at   time.Time
}

func newReplyReader(rd io.Reader, size int) *replyReader {
	return &replyReader{rd: rd, buf: make([]byte, size)}
}

// fill reads at least one more byte, first moving unread bytes to the
// front, growing the buffer only when it is full of one unfinished line.
func (p *replyReader) fill() error {
	if p.r > 0 {
		p.w = copy(p.buf, p.buf[p.r:p.w])
		p.r = 0
	}
	if p.w == len(p.buf) {
		if len(p.buf) >= maxLine {
			return fmt.Errorf("%w: reply line longer than %d bytes", errProtocol, maxLine)
		}
		nb := make([]byte, 2*len(p.buf))
		copy(nb, p.buf[:p.w])
		p.buf = nb
	}
	for {
		n, err := p.rd.Read(p.buf[p.w:])
		if n > 0 {
			p.at = time.Now()
			p.w += n
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// line returns the next line without its CRLF; the slice is valid until
// the next read.
func (p *replyReader) line() ([]byte, error) {
	from := p.r
	for {
		if i := bytes.IndexByte(p.buf[from:p.w], '\n'); i >= 0 {
			end := from + i
			if end == p.r || p.buf[end-1] != '\r' {
				return nil, fmt.Errorf("%w: line not ended by CRLF", errProtocol)
			}
			l := p.buf[p.r : end-1]
			p.r = end + 1
			return l, nil
		}
		from = p.w - p.r // searched so far, relative to the start of the line
		if err := p.fill(); err != nil {
			return nil, err
		}
		from += p.r
	}
}

// discard skips n bytes.
func (p *replyReader) discard(n int64) error {
	for n > 0 {
		if p.r == p.w {
			if err := p.fill(); err != nil {
				return err
			}
		}
		k := int64(p.w - p.r)
		if k > n {
			k = n
		}
		p.r += int(k)
		n -= k
	}
	return nil
}

// read parses the next reply into rp.
func (p *replyReader) read(rp *reply) error {
	typ, n, text, err := p.value(0)
	if err != nil {
		return err
	}
	*rp = reply{typ: typ, n: n, text: text}
	if typ != '*' {
		return nil
	}
	for i := int64(0); i < n; i++ {
		t, v, _, err := p.value(1)
		if err != nil {
			return err
		}
		if i == 0 {
			rp.firstTyp, rp.first = t, v
		}
	}
	return nil
}

// value reads one value. For an array it reads only the header when depth
// is 0 (read walks the elements); deeper arrays are skipped whole.
func (p *replyReader) value(depth int) (typ byte, n int64, text []byte, err error) {
	l, err := p.line()
	if err != nil {
		return 0, 0, nil, err
	}
	if len(l) == 0 {
		return 0, 0, nil, fmt.Errorf("%w: empty line", errProtocol)
	}
	typ = l[0]
	switch typ {
	case '+', '-':
		return typ, 0, l[1:], nil
	case ':', '$', '*':
		var ok bool
		if n, ok = parseInt(l[1:]); !ok || (typ != ':' && n < -1) {
			return 0, 0, nil, fmt.Errorf("%w: bad number %q", errProtocol, l)
		}
	default:
		return 0, 0, nil, fmt.Errorf("%w: unknown reply type %q", errProtocol, typ)
	}
	switch {
	case typ == '$' && n >= 0:
		err = p.discard(n + 2)
	case typ == '*' && depth > 0:
		if depth >= maxDepth {
			return 0, 0, nil, fmt.Errorf("%w: arrays nested deeper than %d", errProtocol, maxDepth)
		}
		for i := int64(0); i < n && err == nil; i++ {
			_, _, _, err = p.value(depth + 1)
		}
	}
	return typ, n, nil, err
}

// parseInt parses a base-10 int64 without allocating.
func parseInt(b []byte) (int64, bool) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	if len(b) == 0 || len(b) > 19 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
		if n < 0 {
			return 0, false
		}
	}
	if neg {
		n = -n
	}
	return n, true
}
