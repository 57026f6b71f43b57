package httpapi

import (
	"fmt"
	"testing"

	"github.com/sluice-rl/sluice/fault"
)

// A relayed reply is read whole or refused: the member's fields, its
// error with its code, and nothing else.
func TestParseReply(t *testing.T) {
	v, err := parseReply([]byte("*6\r\n:1\r\n:2990\r\n:3000\r\n:0\r\n:287998\r\n$9\r\nhttp:acme\r\n"))
	if err != nil || fmt.Sprint(v) != "[1 2990 3000 0 287998 http:acme]" {
		t.Fatalf("six fields: %v %v", v, err)
	}
	if v, err := parseReply([]byte(":0\r\n")); err != nil || v != int64(0) {
		t.Fatalf(":0 → %v %v", v, err)
	}
	_, err = parseReply([]byte("-NORESERVATION no open reservation 'x'\r\n"))
	if fault.Code(err) != "NORESERVATION" || err.Error() != "NORESERVATION no open reservation 'x'" {
		t.Fatalf("error reply: %v (code %q)", err, fault.Code(err))
	}
	for _, bad := range []string{"", "\r\n", ":\r\n", ":1", ":1\r\n:2\r\n", "$5\r\nab\r\n", "$-2\r\n", "*2\r\n:1\r\n",
		"*99\r\n", "*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n", "?x\r\n", "*-1\r\n"} {
		if v, err := parseReply([]byte(bad)); fault.Code(err) != "ERR" {
			t.Errorf("%q: %v %v, want an ERR", bad, v, err)
		}
	}
}
