package archtest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestNodeTrafficIsPeers checks that node-to-node traffic has one home:
// only server (the node's wiring) imports peer, which holds the one RESP
// client the nodes dial each other with and the one parser of another
// member's replies; the fronts reach other members only through the
// limiter's Service (Forward to the leader; limiter.Relays, which peer
// implements, for the rest), never with an address of their own.
func TestNodeTrafficIsPeers(t *testing.T) {
	pkgs := list(t)
	if _, ok := pkgs["peer"]; !ok {
		t.Fatal("no package peer")
	}
	for p, info := range pkgs {
		if isTestOnly(p) {
			continue
		}
		for _, q := range ours(info.Imports) {
			if q == "peer" && p != "server" {
				t.Errorf("%s imports peer: only server, which wires the node, may", p)
			}
		}
	}
	// Nothing outside peer reads a member's reply: no production code
	// declares a RESP reply reader of the names it had before peer.
	banned := []string{"parseReply", "ParseReply", "bulkBody", "replyError", "relayedOutcome", "relayedDone", "ReadRaw"}
	for p := range pkgs {
		if p == "peer" || isTestOnly(p) || strings.HasPrefix(p, "bench") {
			continue
		}
		for name, f := range parseDir(t, p) {
			ast.Inspect(f, func(n ast.Node) bool {
				if fd, ok := n.(*ast.FuncDecl); ok && slices.Contains(banned, fd.Name.Name) {
					t.Errorf("%s (%s) declares %s: replies of other members are read in peer alone", p, name, fd.Name.Name)
				}
				return true
			})
		}
	}
	// The fronts' view of the cluster sends nothing to another member:
	// commands.Cluster has no RelayTo and no Forward (the service
	// forwards to the leader, and runs the rest where it belongs).
	for name, f := range parseDir(t, "commands") {
		ast.Inspect(f, func(n ast.Node) bool {
			if ts, ok := n.(*ast.TypeSpec); ok && ts.Name.Name == "Cluster" {
				if it, ok := ts.Type.(*ast.InterfaceType); ok {
					for _, m := range it.Methods.List {
						for _, id := range m.Names {
							if strings.HasPrefix(id.Name, "Relay") || id.Name == "Forward" {
								t.Errorf("commands.Cluster (%s) has %s: a front relays through the limiter's Service", name, id.Name)
							}
						}
					}
				}
			}
			return true
		})
	}
}

// parseDir parses the non-test Go files of package p (relative to the
// module).
func parseDir(t *testing.T, p string) map[string]*ast.File {
	t.Helper()
	dir := filepath.Join("..", p)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*ast.File{}
	fset := token.NewFileSet()
	for _, e := range ents {
		n := e.Name()
		if !strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, n), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		out[n] = f
	}
	return out
}
