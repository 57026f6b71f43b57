package glob

import (
	"strings"
	"testing"
)

func TestMatch(t *testing.T) {
	for _, tc := range []struct {
		p, s string
		ok   bool
	}{
		{"*", "system/p/t", true}, {"system/*", "system/p/t#alice", true}, {"a?c", "abc", true}, {"a?c", "ac", false},
		{"[abc]x", "bx", true}, {"[^abc]x", "bx", false}, {"[a-c]x", "cx", true}, {"[c-a]x", "bx", true}, {`\*`, "*", true}, {`\*`, "a", false},
		{`[\]]`, "]", true}, {"[abc", "b", true}, {"[abc", "d", false}, {`a\`, `a\`, true},
		// Redis reads [a-] as the range from ']' to 'a', the class left open.
		{"[a-]", "_", true}, {"[a-]", "-", false},
		// A pathological pattern ends: at most the product of the lengths.
		{"*a*a*a*a*a*a*a*a*b", strings.Repeat("a", 200), false}, {"k*", "k", true}, {"", "", true}, {"", "a", false},
		// As Redis's stringmatchlen: an empty name matches the empty pattern alone.
		{"*", "", false}, {"**", "", false},
	} {
		if got := Match([]byte(tc.p), []byte(tc.s)); got != tc.ok {
			t.Errorf("Match(%q, %q) = %v", tc.p, tc.s, got)
		}
	}
	if !All([]byte("*")) || All([]byte("**")) {
		t.Error("All")
	}
}
