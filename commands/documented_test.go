package commands

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// Every command the server registers is named in docs/commands.md: in a
// heading, or as a code span of its own or starting one (`RL.ACQUIRE key
// …`). A command added without its documentation fails here.
func TestEveryCommandIsDocumented(t *testing.T) {
	b, err := os.ReadFile("../docs/commands.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	for _, c := range NewRegistry().Commands() {
		heading := regexp.MustCompile(`(?m)^#+ (?:.*[ ,])?` + regexp.QuoteMeta(c.Name) + `(?:[ ,].*)?$`)
		if !strings.Contains(doc, "`"+c.Name+"`") && !strings.Contains(doc, "`"+c.Name+" ") && !heading.MatchString(doc) {
			t.Errorf("%s is registered but docs/commands.md never names it", c.Name)
		}
	}
}
