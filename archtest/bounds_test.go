package archtest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// boundWords are the texts of package bounds's messages: a production file
// elsewhere that writes one is writing a bound's message a second time.
var boundWords = []string{
	"must be an integer between",
	"week or a duration such as",
	"between 1ms and 3650d",
	"must be yes or no",
}

// boundsWrittenElsewhere are the lines that may still write such a text,
// each with the reason: a line of the file that contains the substring is
// let through, any other line of the file is not.
var boundsWrittenElsewhere = []struct{ file, line, why string }{
	{"internal/flagx/flagx.go", "must be an integer between %d and %d", "a command-line flag's range; internal/ imports nothing of the module"},
	{"bench/config.go", "port must be an integer between 1 and 65535", "a tool's flag, not a call's argument"},
	{"bench/mix.go", "weight of %s must be an integer between", "a tool's flag, not a call's argument"},
}

// TestBoundsAreWrittenOnce: the message of a call's bound is package
// bounds's; no other production file writes it (the fronts ask bounds for
// it), save the lines listed above with their reasons.
func TestBoundsAreWrittenOnce(t *testing.T) {
	for p := range list(t) {
		if p == "bounds" || isTestOnly(p) || isSDK(p) {
			continue
		}
		dir := "../" + p
		if p == "." {
			dir = ".."
		}
		files, _ := filepath.Glob(dir + "/*.go")
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			rel := strings.TrimPrefix(f, "../")
			for i, line := range strings.Split(string(b), "\n") {
				if strings.HasPrefix(strings.TrimSpace(line), "//") {
					continue
				}
				for _, w := range boundWords {
					if strings.Contains(line, w) && !allowed(rel, line) {
						t.Errorf("%s:%d writes %q: take the bound's message from package bounds (or list the line, with why, in boundsWrittenElsewhere)", rel, i+1, w)
					}
				}
			}
		}
	}
}

func allowed(file, line string) bool {
	for _, a := range boundsWrittenElsewhere {
		if a.file == file && strings.Contains(line, a.line) {
			return true
		}
	}
	return false
}
