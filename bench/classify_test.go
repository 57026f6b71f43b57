package main

import (
	"strings"
	"testing"
)

func TestClassify(t *testing.T) {
	acq := func(allowed string) string {
		return "*6\r\n:" + allowed + "\r\n:0\r\n:100\r\n:10\r\n:1000\r\n$5\r\nkey:1\r\n"
	}
	thr := func(limited string) string {
		return "*5\r\n:" + limited + "\r\n:16\r\n:15\r\n:-1\r\n:2\r\n"
	}
	cases := []struct {
		k        kind
		in       string
		want     outcome
		wantText string // substring of the error text, for outError
	}{
		{kindAcquire, acq("1"), outAdmitted, ""},
		{kindAcquire, acq("0"), outDenied, ""},
		{kindAcquire, acq("2"), outDegraded, ""},
		{kindAcquire, acq("3"), outError, "unexpected reply to acquire: array of 6 starting with 3"},
		{kindBudget, acq("1"), outAdmitted, ""},
		{kindBudget, acq("0"), outDenied, ""},
		{kindBudget, "-NOBUDGET no budget node on path 'system/p0/t0'\r\n", outError, "NOBUDGET no budget node"},
		{kindBudget, "-ERR budget 'system/p0/t0' has scope user: KEY required\r\n", outError, "KEY required"},
		{kindEvalSHA, acq("1"), outAdmitted, ""},
		{kindEvalSHA, "-NOSCRIPT No matching script.\r\n", outError, "NOSCRIPT"},
		{kindThrottle, thr("0"), outAdmitted, ""},
		{kindThrottle, thr("1"), outDenied, ""},
		{kindThrottle, thr("2"), outError, "five-element"},
		{kindThrottle, acq("1"), outError, "array of 6"}, // a six-array is not CL.THROTTLE's reply
		{kindAcquire, thr("0"), outError, "array of 5"},
		{kindAcquire, "*6\r\n$1\r\n1\r\n:0\r\n:100\r\n:10\r\n:1000\r\n$5\r\nkey:1\r\n", outError, "starting with a '$' value"},
		{kindAcquire, ":1\r\n", outError, "integer 1"},
		{kindAcquire, "-ERR unknown command 'RL.ACQUIRE', with args beginning with: \r\n", outError, "ERR unknown command"},
		{kindBudgetWrite, "+OK\r\n", outOK, ""},
		{kindBudgetWrite, "+OK WARN overcommitted\r\n", outOK, ""},
		{kindBudgetWrite, "-TRYAGAIN no leader\r\n", outError, "TRYAGAIN"},
		{kindBudgetWrite, ":1\r\n", outError, "want +OK"},
		{kindIncr, ":17\r\n", outOK, ""},
		{kindIncr, "+QUEUED\r\n", outError, `status "QUEUED"`},
		{kindIncr, "$-1\r\n", outError, "bulk string of -1 bytes"},
	}
	for _, tc := range cases {
		p := newReplyReader(strings.NewReader(tc.in), 64)
		var rp reply
		if err := p.read(&rp); err != nil {
			t.Fatalf("%q: %v", tc.in, err)
		}
		got, text := classify(tc.k, &rp)
		if got != tc.want {
			t.Errorf("%s %q: outcome %d, want %d", tc.k, tc.in, got, tc.want)
		}
		if tc.want == outError && !strings.Contains(string(text), tc.wantText) {
			t.Errorf("%s %q: text %q, want it to contain %q", tc.k, tc.in, text, tc.wantText)
		}
		if tc.want != outError && text != nil {
			t.Errorf("%s %q: text %q for a non-error", tc.k, tc.in, text)
		}
	}
}

func TestErrorCode(t *testing.T) {
	for in, want := range map[string]string{
		"NOBUDGET no budget node on path 'x'": "NOBUDGET",
		"ERR syntax error":                    "ERR",
		"CLUSTERDOWN":                         "CLUSTERDOWN",
		"unexpected reply to acquire: …":      "unexpected",
	} {
		if got := string(errorCode([]byte(in))); got != want {
			t.Errorf("errorCode(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestGroupText(t *testing.T) {
	for in, want := range map[string]string{
		"ERR unknown command 'RL.ACQUIRE', with args beginning with: 'key:1' 'RATE' ": "ERR unknown command 'RL.ACQUIRE'",
		"NOBUDGET no budget node on path 'x'":                                         "NOBUDGET no budget node on path 'x'",
	} {
		if got := string(groupText([]byte(in))); got != want {
			t.Errorf("groupText(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestTallyBoundsDistinctTexts(t *testing.T) {
	ty := newTally(4)
	for i := 0; i < 10; i++ {
		ty.add([]byte("ERR " + string(rune('a'+i))))
	}
	ty.add([]byte("ERR a"))
	if len(ty.m) != 4 {
		t.Fatalf("%d distinct keys, want 4 (3 texts and the rest)", len(ty.m))
	}
	if *ty.m["ERR a"] != 2 || *ty.m[otherErrors] != 7 {
		t.Errorf("ERR a %d (want 2), others %d (want 7)", *ty.m["ERR a"], *ty.m[otherErrors])
	}
}
