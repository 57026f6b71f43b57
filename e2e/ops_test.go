package e2e

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestBadBudgetsFileStopsTheNode: a --budgets file that does not parse
// stops the node before it serves, naming the file, the place and the
// reason, instead of starting with an empty tree.
func TestBadBudgetsFileStopsTheNode(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ name, content, want string }{
		{"syntax.json", "{\"budgets\": {\n  \"api\": {\"rate\": 10,, \"window\": \"minute\"}\n}}\n", "syntax.json:2:22: invalid character ','"},
		{"field.json", `{"budgets": {"api": {"sustained": {"rate": 10, "window": "minute"}, "bogus": 1}}}`, `field.json: budget 'api': budget config: unknown field "bogus"`},
		{"shape.json", `{"tree": {}}`, `shape.json: budget import: unknown field "tree"`},
	} {
		file := filepath.Join(dir, c.name)
		if err := writeFile(file, c.content); err != nil {
			t.Fatal(err)
		}
		out, err := runBinary("--resp-addr", "127.0.0.1:0", "--http-addr", "", "--raft-addr", "127.0.0.1:0",
			"--data-dir", t.TempDir(), "--budgets", file)
		ee, ok := err.(*exec.ExitError)
		if !ok || ee.ExitCode() == 0 || !strings.Contains(out, "--budgets "+dir+"/"+c.want) || strings.Contains(out, "msg=listening") {
			t.Errorf("%s: exit %v, want non-zero naming %q:\n%s", c.name, err, c.want, out)
		}
	}
}
