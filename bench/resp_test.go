package main

import (
	"bytes"
	"errors"
	"io"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
)

func TestAppendCommand(t *testing.T) {
	got := string(appendCommand(nil, "AUTH", "", "pässword"))
	want := "*3\r\n$4\r\nAUTH\r\n$0\r\n\r\n$9\r\npässword\r\n"
	if got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	for _, n := range []uint64{0, 9, 10, 99999, 18446744073709551615} {
		got := string(appendBulkNum(nil, "key:", n))
		want := "$" + strconv.Itoa(4+len(strconv.FormatUint(n, 10))) + "\r\nkey:" + strconv.FormatUint(n, 10) + "\r\n"
		if got != want {
			t.Errorf("appendBulkNum(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestEncoderCommands(t *testing.T) {
	c := Config{Rate: 100, Burst: 50, Per: "minute", Algo: "gcra", Partners: 3, Tenants: 4,
		ThrottlePer: 60, EvalSHA: strings.Repeat("ab", 20)}
	e := newEncoder(&c)
	cases := []struct {
		k    kind
		n    uint64
		want []string
	}{
		{kindAcquire, 7, []string{"RL.ACQUIRE", "key:7", "RATE", "100", "BURST", "50", "PER", "minute", "ALGO", "gcra"}},
		{kindThrottle, 0, []string{"CL.THROTTLE", "key:0", "50", "100", "60"}},
		// 29 mod 12 = 5: partner 1, tenant 1.
		{kindBudget, 29, []string{"RL.ACQUIRE", "system/p1/t1", "KEY", "u29"}},
		{kindBudgetWrite, 11, []string{"RL.BUDGET", "SET", "system/p2/t3", "RATE", "1000", "SCOPE", "user"}},
		{kindIncr, 123, []string{"INCR", "counter:123"}},
		{kindEvalSHA, 5, []string{"EVALSHA", c.EvalSHA, "1", "key:5", "100", "50"}},
	}
	var all []byte
	for _, tc := range cases {
		got := string(e.append(nil, tc.k, tc.n))
		want := string(appendCommand(nil, tc.want...))
		if got != want {
			t.Errorf("%s %d:\n got %q\nwant %q", tc.k, tc.n, got, want)
		}
		all = e.append(all, tc.k, tc.n)
	}
	// Commands appended one after another stay intact (shared scratch).
	var want []byte
	for _, tc := range cases {
		want = appendCommand(want, tc.want...)
	}
	if !bytes.Equal(all, want) {
		t.Errorf("batch:\n got %q\nwant %q", all, want)
	}

	// Without PER and ALGO, acquire sends neither.
	plain := newEncoder(&Config{Rate: 100, Burst: 100, Partners: 1, Tenants: 1, ThrottlePer: 1})
	if got, want := string(plain.append(nil, kindAcquire, 1)), string(appendCommand(nil, "RL.ACQUIRE", "key:1", "RATE", "100", "BURST", "100")); got != want {
		t.Errorf("plain acquire %q, want %q", got, want)
	}
}

func TestEncoderAllocatesNothing(t *testing.T) {
	e := newEncoder(&Config{Rate: 100, Burst: 100, Partners: 10, Tenants: 10, ThrottlePer: 1})
	buf := make([]byte, 0, 4096)
	e.append(buf, kindBudget, 1) // sizes the scratch buffer
	n := testing.AllocsPerRun(100, func() {
		b := buf[:0]
		for k := kind(0); k < numKinds; k++ {
			b = e.append(b, k, 123456)
		}
	})
	if n != 0 {
		t.Errorf("%.0f allocations per batch, want 0", n)
	}
}

// readAll parses every reply in s, reading one byte at a time so that each
// reply arrives split across reads.
func readAll(t *testing.T, s string, bufSize int) []reply {
	t.Helper()
	p := newReplyReader(iotest.OneByteReader(strings.NewReader(s)), bufSize)
	var out []reply
	for {
		var rp reply
		err := p.read(&rp)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("read %q: %v", s, err)
		}
		rp.text = append([]byte(nil), rp.text...) // valid until the next read
		out = append(out, rp)
	}
}

func TestReplyReader(t *testing.T) {
	in := "+OK\r\n" +
		"-ERR unknown command 'x'\r\n" +
		":-42\r\n" +
		"$5\r\nhello\r\n" +
		"$-1\r\n" +
		"*6\r\n:1\r\n:99\r\n:100\r\n:0\r\n:10\r\n$7\r\nkey:123\r\n" +
		"*5\r\n:1\r\n:16\r\n:0\r\n:3\r\n:4\r\n" +
		"*-1\r\n" +
		"*0\r\n" +
		"*2\r\n*2\r\n:7\r\n$1\r\nx\r\n$3\r\nabc\r\n" + // nested array first
		"$300\r\n" + strings.Repeat("z", 300) + "\r\n" + // longer than the buffer
		":7\r\n"
	want := []reply{
		{typ: '+', text: []byte("OK")},
		{typ: '-', text: []byte("ERR unknown command 'x'")},
		{typ: ':', n: -42},
		{typ: '$', n: 5},
		{typ: '$', n: -1},
		{typ: '*', n: 6, firstTyp: ':', first: 1},
		{typ: '*', n: 5, firstTyp: ':', first: 1},
		{typ: '*', n: -1},
		{typ: '*', n: 0},
		{typ: '*', n: 2, firstTyp: '*', first: 2},
		{typ: '$', n: 300},
		{typ: ':', n: 7},
	}
	for _, size := range []int{16, 4096} {
		got := readAll(t, in, size)
		if len(got) != len(want) {
			t.Fatalf("buffer %d: %d replies, want %d: %+v", size, len(got), len(want), got)
		}
		for i := range want {
			g, w := got[i], want[i]
			if g.typ != w.typ || g.n != w.n || g.firstTyp != w.firstTyp || g.first != w.first || string(g.text) != string(w.text) {
				t.Errorf("buffer %d, reply %d: got %+v, want %+v", size, i, g, w)
			}
		}
	}
}

func TestReplyReaderProtocolErrors(t *testing.T) {
	for _, in := range []string{
		"hello\r\n", // no type byte
		"+OK\n",     // LF without CR
		":12x\r\n",  // not a number
		":99999999999999999999\r\n",
		"$-2\r\n",     // negative length
		"\r\n",        // empty line
		"*1\r\n?\r\n", // bad element
		strings.Repeat("*1\r\n", maxDepth+2) + ":1\r\n",
	} {
		p := newReplyReader(strings.NewReader(in), 64)
		var rp reply
		if err := p.read(&rp); !errors.Is(err, errProtocol) {
			t.Errorf("%q: error %v, want a protocol error", in, err)
		}
	}
	// A line that never ends is refused once it outgrows maxLine.
	endless := io.MultiReader(strings.NewReader("+"), zeros{})
	var rp reply
	if err := newReplyReader(endless, 4096).read(&rp); !errors.Is(err, errProtocol) {
		t.Errorf("endless line: error %v, want a protocol error", err)
	}
	// A reply cut short is an I/O error, not a reply.
	if err := newReplyReader(strings.NewReader("*6\r\n:1\r\n"), 64).read(&rp); !errors.Is(err, io.EOF) {
		t.Errorf("truncated: error %v, want EOF", err)
	}
}

type zeros struct{}

func (zeros) Read(b []byte) (int, error) {
	for i := range b {
		b[i] = 'a'
	}
	return len(b), nil
}

// repeat yields the same bytes for ever.
type repeat struct {
	b []byte
	i int
}

func (r *repeat) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		c := copy(p[n:], r.b[r.i:])
		n += c
		r.i = (r.i + c) % len(r.b)
	}
	return n, nil
}

func TestReplyReaderAllocatesNothing(t *testing.T) {
	acquire := "*6\r\n:1\r\n:99\r\n:100\r\n:0\r\n:10\r\n$7\r\nkey:123\r\n"
	p := newReplyReader(&repeat{b: []byte(acquire + "-NOBUDGET no budget node on path 'x'\r\n+OK\r\n")}, 4096)
	var rp reply
	n := testing.AllocsPerRun(1000, func() {
		for i := 0; i < 3; i++ {
			if err := p.read(&rp); err != nil {
				t.Fatal(err)
			}
		}
	})
	if n != 0 {
		t.Errorf("%.1f allocations per three replies, want 0", n)
	}
}

// The reader meets whatever a server sends: it must return an error, never
// panic or loop, on any bytes.
func FuzzReplyReader(f *testing.F) {
	for _, s := range []string{
		"*6\r\n:1\r\n:99\r\n:100\r\n:0\r\n:10\r\n$7\r\nkey:123\r\n",
		"*5\r\n:0\r\n:16\r\n:15\r\n:-1\r\n:2\r\n", "+OK\r\n", "-ERR x\r\n", "$-1\r\n",
		"*2\r\n*1\r\n$3\r\nabc\r\n:1\r\n", "$5\r\nab", ":9223372036854775807\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		p := newReplyReader(bytes.NewReader(in), 16)
		var rp reply
		for i := 0; i < 64; i++ {
			if p.read(&rp) != nil {
				return
			}
			classify(kind(i%int(numKinds)), &rp)
		}
	})
}
