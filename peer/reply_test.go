package peer

import (
	"testing"

	"github.com/sluice-rl/sluice/fault"
)

// A member's reply is read whole or refused: its fields, its error with
// its code, and nothing else.
func TestParseReply(t *testing.T) {
	rep, err := ParseReply([]byte("*6\r\n:1\r\n:2990\r\n:3000\r\n:0\r\n:287998\r\n$9\r\nhttp:acme\r\n"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := outcome(rep, 6)
	if err != nil || out.Allowed != 1 || out.Result.Remaining != 2990 || out.Result.Limit != 3000 ||
		out.Result.ResetAfter != 287998e6 || string(out.LimitedBy) != "http:acme" {
		t.Fatalf("six fields: %+v %v", out, err)
	}
	if _, err := outcome(rep, 7); fault.Code(err) != "ERR" {
		t.Fatalf("six fields read as seven: %v", err)
	}
	for _, null := range []string{"$-1\r\n", "*-1\r\n"} {
		if rep, err := ParseReply([]byte(null)); err != nil || !rep.Null {
			t.Fatalf("%q → %+v %v", null, rep, err)
		}
	}
	if rep, err := ParseReply([]byte(":0\r\n")); err != nil || rep.Kind != ':' || rep.Int != 0 {
		t.Fatalf(":0 → %+v %v", rep, err)
	}
	rep, err = ParseReply([]byte("-NORESERVATION no open reservation 'x'\r\n"))
	if err != nil || fault.Code(rep.Err()) != "NORESERVATION" || rep.Err().Error() != "NORESERVATION no open reservation 'x'" {
		t.Fatalf("error reply: %+v %v", rep, err)
	}
	if e := (Reply{Kind: '-', Str: "TRYAGAIN not the leader"}).Err().(*fault.Error); !e.Retry {
		t.Fatal("TRYAGAIN is worth retrying")
	}
	if rep, err := ParseReply([]byte("*2\r\n$2\r\nab\r\n+cd\r\n")); err != nil {
		t.Fatal(err)
	} else if s, ok := rep.Strings(); !ok || len(s) != 2 || s[0] != "ab" || s[1] != "cd" {
		t.Fatalf("strings: %q %v", s, ok)
	}
	if rep, err := ParseReply([]byte("*1\r\n:1\r\n")); err != nil {
		t.Fatal(err)
	} else if _, ok := rep.Strings(); ok {
		t.Fatal("an integer read as a string")
	}
	for _, bad := range []string{"", "\r\n", ":\r\n", ":1", ":1\r\n:2\r\n", "$5\r\nab\r\n", "$2\r\nabcd\r\n", "$-2\r\n", "*2\r\n:1\r\n",
		"*99\r\n", "*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n", "?x\r\n", "*-2\r\n"} {
		if rep, err := ParseReply([]byte(bad)); fault.Code(err) != "ERR" {
			t.Errorf("%q: %+v %v, want an ERR", bad, rep, err)
		}
	}
}
