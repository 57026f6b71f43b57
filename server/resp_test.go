package server

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/tidwall/redcon"
)

var testLimits = limits{maxArgs: 64, maxBulk: 1024}

// parseAll parses every complete command of b, the way a connection does
// with all of b buffered; it returns the commands (copied) and the error.
func parseAll(b []byte) ([][]string, error) {
	out, _, err := parseAllKinds(b)
	return out, err
}

// parseAllKinds is parseAll that also says whether every command was a
// non-empty multibulk one (the form redcon parses as Redis does).
func parseAllKinds(b []byte) ([][]string, bool, error) {
	buf := append([]byte(nil), b...)
	var out [][]string
	var args [][]byte
	multibulk := true
	for len(buf) > 0 {
		if buf[0] != '*' {
			multibulk = false
		}
		a, n, _, err := parseCommand(buf, args, testLimits)
		if err != nil {
			return out, multibulk, err
		}
		if n == 0 {
			break
		}
		if len(a) > 0 {
			cmd := make([]string, len(a))
			for i, x := range a {
				cmd[i] = string(x)
			}
			out = append(out, cmd)
		} else {
			multibulk = false
		}
		buf = buf[n:]
	}
	return out, multibulk, nil
}

func TestParseCommand(t *testing.T) {
	cases := []struct {
		in   string
		want string
		err  string
	}{
		{"*2\r\n$4\r\nECHO\r\n$3\r\na b\r\n", "[[ECHO a b]]", ""},
		{"*1\r\n$0\r\n\r\n", "[[]]", ""},
		{"*0\r\n*-1\r\n*1\r\n$4\r\nPING\r\n", "[[PING]]", ""},
		{"PING\r\n\r\n  ECHO   x  \n", "[[PING] [ECHO x]]", ""},
		{`SET "a\x41\n" 'it\'s' "q\"q"` + "\r\n", `[[SET aA` + "\n" + ` it's q"q]]`, ""},
		{"*2\r\n$4\r\nECHO\r\n$3\r\nab", "[]", ""}, // incomplete
		{"*65\r\n", "[]", "invalid multibulk length (at most 64 arguments, --max-args)"},
		{"*1\r\n$1025\r\n", "[]", "invalid bulk length (at most 1024 bytes, --max-bulk-len)"},
		{"*1\r\n$-1\r\n", "[]", "invalid bulk length"},
		{"*x\r\n", "[]", "invalid multibulk length"},
		{"*1\r\n:1\r\n", "[]", "expected ':', got ':'"[:0] + "expected '$', got ':'"},
		{"*1\r\n$3\r\nabcd\r\n", "[]", "invalid bulk length"},
		{`ECHO "open` + "\r\n", "[]", "unbalanced quotes in request"},
		{`ECHO "a"b` + "\r\n", "[]", "unbalanced quotes in request"},
		{"*99999999999999999999\r\n", "[]", "invalid multibulk length"},
		// An inline line of more words than --max-args is refused too.
		{strings.Repeat("x ", 64) + "\r\n", "[[" + strings.TrimSpace(strings.Repeat("x ", 64)) + "]]", ""},
		{strings.Repeat("x ", 65) + "\r\n", "[]", "invalid inline request (at most 64 arguments, --max-args)"},
	}
	for _, c := range cases {
		got, err := parseAll([]byte(c.in))
		if fmt.Sprint(got) != c.want || (err == nil) != (c.err == "") || (err != nil && err.Error() != c.err) {
			t.Errorf("%q: got %v %v, want %s %q", c.in, got, err, c.want, c.err)
		}
	}
	// An incomplete command reports the size it needs.
	if _, n, need, _ := parseCommand([]byte("*1\r\n$100\r\nabc"), nil, testLimits); n != 0 || need != 112 {
		t.Fatalf("need %d", need)
	}
}

func TestParseCommandAllocatesNothing(t *testing.T) {
	pipeline := bytes.Repeat([]byte("*6\r\n$10\r\nRL.ACQUIRE\r\n$10\r\nkey:012345\r\n$4\r\nRATE\r\n$3\r\n100\r\n$5\r\nBURST\r\n$3\r\n100\r\n"), 16)
	args := make([][]byte, 0, 16)
	allocs := testing.AllocsPerRun(100, func() {
		b := pipeline
		for len(b) > 0 {
			a, n, _, _ := parseCommand(b, args, testLimits)
			args = a[:0]
			b = b[n:]
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per 16-command pipeline", allocs)
	}
}

func BenchmarkParse16(b *testing.B) {
	pipeline := bytes.Repeat([]byte("*6\r\n$10\r\nRL.ACQUIRE\r\n$10\r\nkey:012345\r\n$4\r\nRATE\r\n$3\r\n100\r\n$5\r\nBURST\r\n$3\r\n100\r\n"), 16)
	args := make([][]byte, 0, 16)
	b.ReportAllocs()
	b.SetBytes(int64(len(pipeline)))
	for i := 0; i < b.N; i++ {
		p := pipeline
		for len(p) > 0 {
			a, n, _, _ := parseCommand(p, args, testLimits)
			args = a[:0]
			p = p[n:]
		}
	}
}

// FuzzParseCommand checks the parser on arbitrary bytes: no panic; where
// it parses multibulk commands, redcon's own parser reads the same
// arguments; and splitting the input into reads changes nothing.
func FuzzParseCommand(f *testing.F) {
	for _, s := range []string{
		"*1\r\n$4\r\nPING\r\n", "*2\r\n$3\r\nGET\r\n$1\r\nk\r\n*1\r\n$4\r\nPING\r\n", "PING\r\n",
		`ECHO "a\x41" 'b\'c'` + "\n", "*0\r\n", "*-1\r\n", "*1\r\n$-1\r\n", "\r\n\r\n", "*\x00\r\n",
	} {
		f.Add([]byte(s), uint8(3))
	}
	f.Fuzz(func(t *testing.T, in []byte, step uint8) {
		whole, multibulk, werr := parseAllKinds(in)
		if werr == nil && multibulk && len(whole) > 0 {
			rd := redcon.NewReader(bytes.NewReader(in))
			var theirs [][]string
			for {
				cmd, err := rd.ReadCommand()
				if err != nil {
					break
				}
				c := make([]string, len(cmd.Args))
				for i, a := range cmd.Args {
					c[i] = string(a)
				}
				theirs = append(theirs, c)
			}
			if fmt.Sprint(theirs) != fmt.Sprint(whole) {
				t.Fatalf("redcon reads %q, sluice %q", theirs, whole)
			}
		}
		// Feed the same bytes in reads of step bytes through a growing
		// buffer, as a connection does.
		k := max(int(step), 1)
		var got [][]string
		var gerr error
		buf := []byte{}
		for off := 0; off < len(in) && gerr == nil; off += k {
			buf = append(buf, in[off:min(off+k, len(in))]...)
			for len(buf) > 0 {
				a, n, _, err := parseCommand(buf, nil, testLimits)
				if err != nil {
					gerr = err
					break
				}
				if n == 0 {
					break
				}
				if len(a) > 0 {
					c := make([]string, len(a))
					for i, x := range a {
						c[i] = string(x)
					}
					got = append(got, c)
				}
				buf = buf[n:]
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(whole) || (gerr == nil) != (werr == nil) {
			t.Fatalf("split by %d: %q %v; whole: %q %v", k, got, gerr, whole, werr)
		}
	})
}
