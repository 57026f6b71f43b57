package access

import (
	"crypto/sha256"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseRole(t *testing.T) {
	for s, want := range map[string]Role{"limiter": RoleLimiter, "ADMIN": RoleAdmin} {
		if r, ok := ParseRole(s); !ok || r != want || !strings.EqualFold(r.String(), s) {
			t.Errorf("ParseRole(%q) = %v, %v", s, r, ok)
		}
	}
	if r, ok := ParseRole("root"); ok || r != RoleNone || r.String() != "none" {
		t.Errorf("ParseRole(root) = %v, %v", r, ok)
	}
}

func TestAuthCheck(t *testing.T) {
	a := NewAuth("secret", []User{{Name: "app", Role: RoleLimiter, Hash: sha256.Sum256([]byte("app-pass"))}})
	if !a.Required() {
		t.Fatal("a password is set: authentication is required")
	}
	for _, c := range []struct {
		user, pass string
		role       Role
		ok         bool
	}{{"default", "secret", RoleAdmin, true}, {"app", "app-pass", RoleLimiter, true}, {"app", "secret", RoleNone, false}, {"nobody", "x", RoleNone, false}} {
		if r, ok := a.Check([]byte(c.user), []byte(c.pass)); r != c.role || ok != c.ok {
			t.Errorf("Check(%s, %s) = %v, %v; want %v, %v", c.user, c.pass, r, ok, c.role, c.ok)
		}
	}
	if l := a.List(); len(l) != 2 || l[0].Name != "app" || l[1].Name != "default" || len(l[0].Hash) != 64 {
		t.Errorf("List = %+v", l)
	}
	a.Replace("", nil)
	if a.Required() || len(a.List()) != 1 || a.List()[0].Hash != "" {
		t.Errorf("no credentials: Required %v, List %+v", a.Required(), a.List())
	}
}

func TestPeerAuth(t *testing.T) {
	p := NewPeerAuth("s", true)
	if id, isPeer, ok := p.Check([]byte(PeerUserPrefix+"n1"), []byte(PeerToken("s", "n1"))); id != "n1" || !isPeer || !ok {
		t.Errorf("the node's own token: %q %v %v", id, isPeer, ok)
	}
	if _, isPeer, ok := p.Check([]byte(PeerUserPrefix+"n1"), []byte(PeerToken("s", "n2"))); !isPeer || ok {
		t.Errorf("another node's token: %v %v", isPeer, ok)
	}
	if _, isPeer, _ := p.Check([]byte("default"), []byte("s")); isPeer {
		t.Error("default is not a node")
	}
	if _, _, ok := NewPeerAuth("", true).Check([]byte(PeerUserPrefix+"n1"), []byte(PeerToken("", "n1"))); ok {
		t.Error("no secret where clients must authenticate: no node credentials")
	}
}

func TestCheckCaller(t *testing.T) {
	open := NewAuth("", nil)
	if r, _ := open.CheckCaller("10.0.0.1:5", "", RoleAdmin, true); r != Forbidden {
		t.Errorf("protected mode, remote caller: %v", r)
	}
	if r, _ := open.CheckCaller("127.0.0.1:5", "", RoleAdmin, true); r != Allowed {
		t.Errorf("protected mode, loopback caller: %v", r)
	}
	a := NewAuth("", []User{{Name: "app", Role: RoleLimiter, Hash: sha256.Sum256([]byte("pw"))}})
	basic := "Basic " + base64.StdEncoding.EncodeToString([]byte("app:pw"))
	for _, c := range []struct {
		authz string
		need  Role
		want  Refusal
	}{{"", RoleLimiter, Unauthenticated}, {"Bearer pw", RoleLimiter, Unauthenticated}, {basic, RoleLimiter, Allowed}, {basic, RoleAdmin, Forbidden}} {
		if r, msg := a.CheckCaller("10.0.0.1:5", c.authz, c.need, true); r != c.want {
			t.Errorf("CheckCaller(%q, %v) = %v (%s), want %v", c.authz, c.need, r, msg, c.want)
		}
	}
}

func TestLoadACL(t *testing.T) {
	dir := t.TempDir()
	h := strings.Repeat("ab", 32)
	write := func(body string) string {
		p := filepath.Join(dir, "acl")
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	users, err := LoadACL(write("# users\nuser app limiter " + h + "\nuser ops admin sha256:" + h + "\n"))
	if err != nil || len(users) != 2 || users[0].Role != RoleLimiter || users[1].Role != RoleAdmin || users[1].Hash[0] != 0xab {
		t.Fatalf("LoadACL = %+v, %v", users, err)
	}
	for body, want := range map[string]string{
		"user app root " + h + "\n":                              "role must be limiter or admin",
		"user app limiter abc\n":                                 "64 hex digits",
		"user app limiter " + h + "\nuser app admin " + h + "\n": "defined twice",
		"# nothing\n":             "no users",
		"app limiter " + h + "\n": "want 'user <name>",
	} {
		if _, err := LoadACL(write(body)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("LoadACL(%q) = %v, want %q", body, err, want)
		}
	}
	if users, err := LoadACL(""); users != nil || err != nil {
		t.Errorf("no file: %v, %v", users, err)
	}
}
