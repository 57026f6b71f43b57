package deploy_test

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"
)

// dockerignore returns whether .dockerignore leaves a path (slash
// separated, relative to the build context) out, matched by the code
// Docker and BuildKit use.
func dockerignore(t *testing.T) func(rel string) bool {
	t.Helper()
	patterns, err := ignorefile.ReadAll(strings.NewReader(read(t, ".dockerignore")))
	if err != nil {
		t.Fatalf(".dockerignore: %v", err)
	}
	pm, err := patternmatcher.New(patterns)
	if err != nil {
		t.Fatalf(".dockerignore: %v", err)
	}
	return func(rel string) bool {
		ignored, err := pm.MatchesOrParentMatches(filepath.FromSlash(rel))
		if err != nil {
			t.Fatalf(".dockerignore against %s: %v", rel, err)
		}
		return ignored
	}
}

func TestDockerignore(t *testing.T) {
	ignored := dockerignore(t)
	for _, sanity := range []string{".git/HEAD", "sluice-data/raft/raft.db"} {
		if !ignored(sanity) {
			t.Errorf(".dockerignore: %s should stay out of the build context", sanity)
		}
	}
	cmd := exec.Command("go", "list", "-deps", "-json", "./cmd/sluice")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		t.Fatal(err)
	}
	needed := []string{"go.mod", "go.sum"}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for dec.More() {
		var p struct {
			Dir                 string
			GoFiles, EmbedFiles []string
			Module              *struct{ Main bool }
		}
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		if p.Module == nil || !p.Module.Main {
			continue
		}
		dir, err := filepath.Rel(abs, p.Dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range append(p.GoFiles, p.EmbedFiles...) {
			needed = append(needed, filepath.ToSlash(filepath.Join(dir, f)))
		}
	}
	if len(needed) < 4 {
		t.Fatalf("go list found no packages of the module: %q", needed)
	}
	for _, f := range needed {
		if ignored(f) {
			t.Errorf(".dockerignore leaves out %s, which the build of cmd/sluice needs", f)
		}
	}
}
