package archtest

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/engine"
)

// The lists of algorithms written outside the engine follow its registry:
// adding an algorithm to engine/algos.go without the OpenAPI enum, the
// Node and Python SDKs' types, docs/algorithms.md's table and
// docs/commands.md's ALGO row fails here, as does a list that names one
// the engine does not have.
func TestAlgorithmListsFollowTheRegistry(t *testing.T) {
	want := engine.AlgoNames()
	slices.Sort(want)
	read := func(path string) string {
		b, err := os.ReadFile("../" + path)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	// names returns the quoted or backquoted words of s that look like
	// algorithm names (lower case and underscores).
	names := func(s string) []string {
		var out []string
		for _, m := range regexp.MustCompile("[\"`]?\\b([a-z]+(?:_[a-z]+)*)\\b[\"`]?").FindAllStringSubmatch(s, -1) {
			out = append(out, m[1])
		}
		slices.Sort(out)
		return slices.Compact(out)
	}
	check := func(where, list string) {
		t.Helper()
		if got := names(list); !slices.Equal(got, want) {
			t.Errorf("%s lists %v; the engine's registry has %v", where, got, want)
		}
	}
	lists := func(where, text string, re *regexp.Regexp) {
		t.Helper()
		found := re.FindAllStringSubmatch(text, -1)
		if len(found) == 0 {
			t.Errorf("%s: no list of algorithms found (%s)", where, re)
		}
		for _, m := range found {
			check(where, m[1])
		}
	}

	// Every enum that names token_bucket is an algorithm enum.
	lists("docs/openapi.yaml", read("docs/openapi.yaml"), regexp.MustCompile(`enum: \[([^\]]*token_bucket[^\]]*)\]`))
	lists("clients/node/index.d.ts", read("clients/node/index.d.ts"), regexp.MustCompile(`algo\?: ((?:"[a-z_]+"(?: \| )?)+);`))
	lists("clients/python/src/sluice/_core.py", read("clients/python/src/sluice/_core.py"), regexp.MustCompile(`Algo = Literal\[([^\]]*)\]`))
	commands := read("docs/commands.md")
	lists("docs/commands.md (ALGO)", commands, regexp.MustCompile("\\| `ALGO name` \\| ([^|]*) \\|"))
	lists("docs/commands.md (errors)", commands, regexp.MustCompile("`ERR ALGO must be one of ([a-z_, ]+)`"))

	// docs/algorithms.md's first table has a row per algorithm ALGO names.
	doc := read("docs/algorithms.md")
	head := strings.Index(doc, "| `ALGO` |")
	if head < 0 {
		t.Fatal("docs/algorithms.md: no table headed | `ALGO` |")
	}
	table, _, _ := strings.Cut(doc[head+1:], "\n\n")
	var rows []string
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z_]+)`").FindAllStringSubmatch(table, -1) {
		rows = append(rows, m[1])
	}
	check("docs/algorithms.md's table", strings.Join(rows, " "))
}
