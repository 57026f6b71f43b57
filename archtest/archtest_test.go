package archtest

import (
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/sluice-rl/sluice"

// layers places every package of the module that the binary or a tool
// builds, bottom first. A package may import packages of its own layer or
// below, and the libraries; never one above.
var layers = [][]string{
	{"bounds", "engine"},
	{"fault", "budget", "quota", "reserve", "usage", "access", "keyspace", "script"},
	{"limiter", "raftfsm", "peer"},
	{"commands", "httpapi", "envoyrls", "console"}, // the fronts
	{"server"},
	{"cmd/sluice", "bench", "bench/accuracy", "bench/libcalls", "bench/writes"},
}

// fronts speak one protocol each to callers; none imports another.
var fronts = []string{"commands", "httpapi", "envoyrls", "console"}

// libraries (internal/…) import nothing of the module, so that any layer
// may use them; so are the two modules of their own in this repository:
// the protocol module (protocol/…: the window syntax and the rate-limit
// headers, which the server and the SDKs write alike; the standard library
// alone) and the Go SDK (clients/go/…), which only tests may import (sdk).
var libraries = []string{"internal/", "protocol/", sdk}

// sdk is the Go SDK, a module of its own: programs that call sluice import
// it, and so do tests (testsupport/clienttest, e2e); no production package
// of the server does, so that the binary never builds an SDK and what the
// two share is protocol/'s.
const sdk = "clients/go"

func isSDK(p string) bool { return p == sdk || strings.HasPrefix(p, sdk+"/") }

// Test helpers (testsupport/…) and test suites, which only tests build.
const helpers = "testsupport"

var suites = []string{"e2e", "robust", "hostile", "deploy", "archtest"}

// engineMay lists what engine, at the bottom, imports of this repository:
// the window syntax (protocol/window, in the protocol module) and the
// bounds of a call's arguments (package bounds, which imports only that
// window syntax), nothing else.
var engineMay = []string{"protocol/window", "bounds"}

// boundsMay is what bounds imports of this repository: the window syntax.
var boundsMay = []string{"protocol/window"}

type pkg struct {
	ImportPath   string
	Imports      []string
	TestImports  []string
	XTestImports []string
}

// list returns the module's packages from go list, by path relative to
// the module.
func list(t *testing.T) map[string]pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-json", "./...")
	cmd.Dir = ".."
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("go list: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("go list: %v", err)
	}
	pkgs := map[string]pkg{}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		pkgs[rel(p.ImportPath)] = p
	}
	return pkgs
}

// rel returns path relative to the module, or "" for a package outside it.
func rel(path string) string {
	if path == module {
		return "."
	}
	r, ok := strings.CutPrefix(path, module+"/")
	if !ok {
		return ""
	}
	return r
}

// ours returns the imports of the module, relative to it.
func ours(imports []string) []string {
	var out []string
	for _, i := range imports {
		if r := rel(i); r != "" {
			out = append(out, r)
		}
	}
	return out
}

func layerOf(p string) int {
	for i, l := range layers {
		if slices.Contains(l, p) {
			return i
		}
	}
	return -1
}

func isLibrary(p string) bool {
	return slices.ContainsFunc(libraries, func(l string) bool { return strings.HasPrefix(p, l) })
}

func isTestOnly(p string) bool {
	return p == helpers || strings.HasPrefix(p, helpers+"/") || slices.Contains(suites, p)
}

// TestImportGraph checks the module's imports against the layers and the
// rules above, naming each offending import.
func TestImportGraph(t *testing.T) {
	pkgs := list(t)
	for _, l := range layers {
		for _, p := range l {
			if _, ok := pkgs[p]; !ok {
				t.Errorf("layers lists %s, which is not a package of the module: drop it from archtest's table", p)
			}
		}
	}
	for p, info := range pkgs {
		switch {
		case isTestOnly(p):
			// Tests and their helpers may import anything below them.
		case isLibrary(p):
			for _, q := range ours(info.Imports) {
				t.Errorf("%s imports %s: a library in internal/ imports no other package of this module", p, q)
			}
		case layerOf(p) < 0:
			t.Errorf("%s is in no layer: place it in archtest's layers table (or under internal/ or testsupport/)", p)
		default:
			checkProduction(t, p, ours(info.Imports))
		}
		if p != "commands" && p != "server" {
			for _, q := range ours(append(slices.Clone(info.TestImports), info.XTestImports...)) {
				if q == "commands" {
					t.Errorf("tests of %s import commands: only server and commands' own tests may", p)
				}
			}
		}
	}
}

// checkProduction checks the imports of a package the binary or a tool
// builds.
func checkProduction(t *testing.T, p string, imports []string) {
	for _, q := range imports {
		switch {
		case isTestOnly(q):
			t.Errorf("%s imports %s: production packages never import test helpers or suites", p, q)
		case isSDK(q):
			t.Errorf("%s imports %s: production packages never import the Go SDK (only tests do); take what the server shares with it from protocol/", p, q)
		case p == "engine" && !slices.Contains(engineMay, q):
			t.Errorf("engine imports %s: engine, at the bottom, imports nothing of the module", q)
		case p == "bounds" && !slices.Contains(boundsMay, q):
			t.Errorf("bounds imports %s: the bounds of a call import nothing of the module but the window syntax", q)
		case isLibrary(q):
		case q == "commands" && p != "server":
			t.Errorf("%s imports commands: only server (the node's wiring) may import the RESP front", p)
		case slices.Contains(fronts, p) && slices.Contains(fronts, q):
			t.Errorf("front %s imports front %s: fronts share what they need through the layers below", p, q)
		case layerOf(q) > layerOf(p):
			t.Errorf("%s (layer %d: %s) imports %s (layer %d: %s): an import back up the layers",
				p, layerOf(p), strings.Join(layers[layerOf(p)], " "), q, layerOf(q), strings.Join(layers[layerOf(q)], " "))
		}
	}
}
