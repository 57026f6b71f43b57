package archtest

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
)

// deps returns the packages outside the standard library that the
// packages of the module in dir (relative to the repository) and their
// tests build.
func deps(t *testing.T, dir string) []string {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps", "-test", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", "./...")
	cmd.Dir = "../" + dir
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("go list in %s: %v\n%s", dir, err, ee.Stderr)
		}
		t.Fatalf("go list in %s: %v", dir, err)
	}
	var pkgs []string
	for _, p := range strings.Fields(string(out)) {
		// A test binary is listed as "p.test" and a package recompiled
		// for its tests as "p [p.test]".
		if strings.HasSuffix(p, ".test") || strings.HasPrefix(p, "[") {
			continue
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

// TestModulesOfTheirOwn: the protocol module (the window syntax and the
// rate-limit headers the server and the Go SDK share) builds from the
// standard library alone, and the Go SDK from go-redis, the protocol
// module and its own packages, nothing of the server.
func TestModulesOfTheirOwn(t *testing.T) {
	for _, p := range deps(t, "protocol") {
		if !strings.HasPrefix(p, module+"/protocol/") {
			t.Errorf("the protocol module builds %s: it depends on the standard library alone", p)
		}
	}
	for _, p := range deps(t, sdk) {
		if r := rel(p); r != "" && !isSDK(r) && !strings.HasPrefix(r, "protocol/") {
			t.Errorf("the Go SDK builds %s: it takes from this repository only the protocol module", p)
		}
	}
}
