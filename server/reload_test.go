package server

import (
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"

	"github.com/sluice-rl/sluice/testsupport/resptest"
)

// TestReloadACLFile: a reload puts the ACL file's new users in force for
// the next AUTH; a file that no longer parses leaves the users in force.
func TestReloadACLFile(t *testing.T) {
	hash := func(pw string) string { h := sha256.Sum256([]byte(pw)); return hex.EncodeToString(h[:]) }
	acl := filepath.Join(t.TempDir(), "users.acl")
	os.WriteFile(acl, []byte("user gateway limiter "+hash("gw-secret")+"\n"), 0o600)
	s := startServer(t, func(c *Config) { c.ACLFile = acl })
	auth := func(user, pw string) string { return resptest.Dial(t, s.RespAddr()).Do("AUTH", user, pw) }
	if got := auth("gateway", "gw-secret"); got != "+OK" {
		t.Fatalf("before the reload: %s", got)
	}
	os.WriteFile(acl, []byte("user ops admin "+hash("ops-secret")+"\n"), 0o600)
	s.Reload()
	if got := auth("ops", "ops-secret"); got != "+OK" {
		t.Fatalf("a user added by the reload: %s", got)
	}
	if got := auth("gateway", "gw-secret"); got != "-WRONGPASS invalid username-password pair or user is disabled." {
		t.Fatalf("a user removed by the reload: %s", got)
	}
	os.WriteFile(acl, []byte("user ops superuser "+hash("x")+"\n"), 0o600)
	s.Reload()
	if got := auth("ops", "ops-secret"); got != "+OK" {
		t.Fatalf("after a broken file: %s (the users in force must stay)", got)
	}
}

// TestReloadCertificate: a reload makes new connections get the new
// certificate; a pair that does not load leaves the one in force.
func TestReloadCertificate(t *testing.T) {
	cert, key, _, _ := testPKI(t)
	s := startServer(t, func(c *Config) { c.TLSCert, c.TLSKey, c.RequirePass = cert, key, "pw" })
	served := func() []byte {
		t.Helper()
		c, err := tls.Dial("tcp", s.RespAddr(), &tls.Config{InsecureSkipVerify: true})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].Raw
	}
	first := served()
	cert2, key2, _, _ := testPKI(t) // another CA, another key
	for _, f := range [][2]string{{cert2, cert}, {key2, key}} {
		b, _ := os.ReadFile(f[0])
		os.WriteFile(f[1], b, 0o600)
	}
	s.Reload()
	second := served()
	if bytes.Equal(first, second) {
		t.Fatal("the reload did not change the certificate served")
	}
	os.WriteFile(key, []byte("not a key"), 0o600)
	s.Reload()
	if !bytes.Equal(served(), second) {
		t.Fatal("a broken key replaced the certificate in force")
	}
}
