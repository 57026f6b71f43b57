package main

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// testingImporters are the packages outside this module that the binary
// builds and that import "testing" themselves: hashicorp/raft ships its
// cluster helpers (testing.go) in the raft package. The linker keeps none
// of them, only the testing package's initialisation.
var testingImporters = []string{"github.com/hashicorp/raft"}

// The shipped binary builds no test helper: no package of this module in
// its build imports "testing" (test helpers live under testsupport/,
// which only tests import), and no dependency does beyond the known ones.
func TestBinaryBuildsNoTestHelpers(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", `{{.ImportPath}} {{if .Module}}{{.Module.Main}}{{end}} {{join .Imports " "}}`, ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var importers []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || !slices.Contains(f[2:], "testing") {
			continue
		}
		importers = append(importers, f[0])
		if f[1] == "true" {
			t.Errorf("%s imports testing and is built into the binary: move test helpers to a package only tests import", f[0])
		} else if !slices.Contains(testingImporters, f[0]) {
			t.Errorf("dependency %s imports testing and is built into the binary", f[0])
		}
	}
	for _, p := range testingImporters {
		if !slices.Contains(importers, p) {
			t.Errorf("%s no longer imports testing: drop it from testingImporters", p)
		}
	}
}
