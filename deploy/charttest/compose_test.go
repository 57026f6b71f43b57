package charttest

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
)

// Compose v2 (`docker compose`) loads docker-compose.yml with
// compose-go, whose loader validates the file against the Compose
// Specification's schema and resolves it as `docker compose config` does.
// The file must load with every profile, with SLUICE_PASSWORD set and
// without it (only starting a node needs it: deploy's
// TestComposeNeedsPasswordOnlyToStart), and keep the three nodes and the
// monitoring services (docker-compose v1, Debian's 1.29, is checked in
// deploy/TestComposeV1Config).
func TestComposeLoadsInComposeV2(t *testing.T) {
	dir, err := filepath.Abs(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, env := range [][]string{{"SLUICE_PASSWORD=a-test-password"}, {}} {
		opts, err := cli.NewProjectOptions([]string{filepath.Join(dir, "docker-compose.yml")},
			cli.WithWorkingDirectory(dir), cli.WithName("sluice"), cli.WithProfiles([]string{"monitoring"}),
			cli.WithEnv(env))
		if err != nil {
			t.Fatal(err)
		}
		p, err := opts.LoadProject(context.Background())
		if err != nil {
			t.Fatalf("compose v2 refuses docker-compose.yml (environment %q): %v", env, err)
		}
		for _, s := range []string{"sluice1", "sluice2", "sluice3", "prometheus", "grafana"} {
			if _, err := p.GetService(s); err != nil {
				t.Errorf("service %s: %v", s, err)
			}
		}
		if len(p.Services) != 5 {
			t.Errorf("%d services, want the three nodes, prometheus and grafana: %v", len(p.Services), p.ServiceNames())
		}
	}
}
