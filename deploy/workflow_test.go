package deploy_test

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The release workflow (.github/workflows/release.yml) passes actionlint,
// the linter for GitHub Actions workflows: its syntax, the expressions,
// the inputs of the actions it uses, the job graph and, where shellcheck
// is installed, its shell steps. Without actionlint on PATH the test is
// skipped, and fails when SLUICE_REQUIRE_TOOLS is set (.ci/run installs
// it: go install github.com/rhysd/actionlint/cmd/actionlint@v1.7.12).
func TestReleaseWorkflowLints(t *testing.T) {
	bin := requireTool(t, "actionlint", "go install github.com/rhysd/actionlint/cmd/actionlint@v1.7.12")
	path := filepath.Join(root, ".github", "workflows", "release.yml")
	out, err := exec.Command(bin, "-no-color", path).CombinedOutput()
	if err != nil {
		t.Fatalf("actionlint %s: %v\n%s", path, err, out)
	}
	if s := strings.TrimSpace(string(out)); s != "" {
		t.Errorf("actionlint printed:\n%s", s)
	}
	// The workflow builds the release and tests its artifacts as this
	// repository's CI does, and publishes what it checked.
	wf := read(t, ".github/workflows/release.yml")
	for _, want := range []string{"make release", "-run '^TestReleaseArtifacts$'", "SLUICE_REQUIRE_TOOLS", "sha256sum -c SHA256SUMS"} {
		if !strings.Contains(wf, want) {
			t.Errorf(".github/workflows/release.yml does not run %q", want)
		}
	}
}

// scripts/release.sh (make release) passes shellcheck. Without shellcheck
// the test is skipped, and fails when SLUICE_REQUIRE_TOOLS is set.
func TestReleaseScriptShellcheck(t *testing.T) {
	bin := requireTool(t, "shellcheck", "apt-get install shellcheck")
	path := filepath.Join(root, "scripts", "release.sh")
	if out, err := exec.Command(bin, path).CombinedOutput(); err != nil {
		t.Errorf("shellcheck %s: %v\n%s", path, err, out)
	}
}
