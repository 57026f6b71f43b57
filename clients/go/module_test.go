package client

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A module of its own that requires the client module through a replace
// vendors it with go-redis, the protocol module (standard library only)
// and nothing of the server, and builds with -mod=vendor; offline, from
// the module cache this test's build used.
func TestVendorsWithoutTheServer(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the go command")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	src, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	// go mod tidy below reads the go.mod files of go-redis's own test
	// dependencies too: bring the client module's whole graph into the
	// module cache first (nothing is fetched when it is there already).
	fill := exec.Command(gobin, "mod", "download", "all")
	fill.Dir = src
	if out, err := fill.CombinedOutput(); err != nil {
		t.Fatalf("go mod download all: %v\n%s", err, out)
	}
	dir := t.TempDir()
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The protocol module (window syntax, rate-limit headers) is the
	// client's one dependency in this repository; the app replaces it too,
	// as docs/clients.md says.
	write("go.mod", "module example.com/app\n\ngo 1.22\n\nrequire github.com/sluice-rl/sluice/clients/go v0.0.0\n\n"+
		"replace github.com/sluice-rl/sluice/clients/go => "+src+"\n\n"+
		"replace github.com/sluice-rl/sluice/protocol => "+filepath.Join(src, "..", "..", "protocol")+"\n")
	write("main.go", `package main

import (
	"net/http"

	"github.com/redis/go-redis/v9"
	client "github.com/sluice-rl/sluice/clients/go"
	"github.com/sluice-rl/sluice/clients/go/cooperate"
	"github.com/sluice-rl/sluice/clients/go/httplimit"
)

func main() {
	sl := client.New(redis.NewClient(&redis.Options{}), client.OnFailure(client.FailOpen))
	_ = httplimit.New(sl, httplimit.Path("api"))
	_ = &http.Client{Transport: &cooperate.Transport{}}
}
`)
	run := func(env []string, args ...string) string {
		cmd := exec.Command(gobin, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), append([]string{"GOPROXY=off", "GOSUMDB=off", "GOTOOLCHAIN=local", "GOWORK=off"}, env...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	run([]string{"GOFLAGS=-mod=mod"}, "mod", "tidy")
	run([]string{"GOFLAGS=-mod=mod"}, "mod", "vendor")
	run([]string{"GOFLAGS=-mod=vendor"}, "build", "-o", filepath.Join(dir, "app"), ".")
	modules, err := os.ReadFile(filepath.Join(dir, "vendor", "modules.txt"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(modules), "\n") {
		if strings.HasPrefix(line, "github.com/sluice-rl/sluice/") && !strings.HasPrefix(line, "github.com/sluice-rl/sluice/clients/go") &&
			!strings.HasPrefix(line, "github.com/sluice-rl/sluice/protocol/") {
			t.Errorf("vendored a server package: %s", line)
		}
		if strings.HasPrefix(line, "# ") && !strings.HasPrefix(line, "# github.com/sluice-rl/sluice/clients/go ") &&
			!strings.HasPrefix(line, "# github.com/sluice-rl/sluice/protocol ") &&
			!strings.HasPrefix(line, "# github.com/redis/go-redis/") && !strings.HasPrefix(line, "# github.com/cespare/xxhash/") &&
			!strings.HasPrefix(line, "# github.com/dgryski/go-rendezvous ") && !strings.HasPrefix(line, "# go.uber.org/atomic ") {
			t.Errorf("vendored a module beyond go-redis, the protocol module and the client's own: %s", line)
		}
	}
	if gomod, _ := os.ReadFile(filepath.Join(dir, "go.mod")); !strings.Contains(string(gomod), "\ngo 1.22\n") {
		t.Errorf("the app's go line moved:\n%s", gomod)
	}
}
