package server

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"os"
	"strings"

	"github.com/sluice-rl/sluice/commands"
)

// LoadACL reads an ACL file: one user per line,
//
//	user <name> <limiter|admin> <sha256 hex of the password>
//
// with '#' comments. Only hashes are stored; `sluice hash-password` prints
// the hash of a password.
func LoadACL(path string) ([]commands.ACLUser, error) {
	if path == "" {
		return nil, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--acl-file: %v", err)
	}
	defer f.Close()
	var out []commands.ACLUser
	seen := map[string]bool{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 4 || fields[0] != "user" {
			return nil, fmt.Errorf("--acl-file %s line %d: want 'user <name> <limiter|admin> <sha256-hex>'", path, n)
		}
		role, ok := commands.ParseRole(fields[2])
		if !ok {
			return nil, fmt.Errorf("--acl-file %s line %d: role must be limiter or admin, got %q", path, n, fields[2])
		}
		h, err := hex.DecodeString(strings.TrimPrefix(fields[3], "sha256:"))
		if err != nil || len(h) != 32 {
			return nil, fmt.Errorf("--acl-file %s line %d: password hash must be 64 hex digits (SHA-256)", path, n)
		}
		if seen[fields[1]] {
			return nil, fmt.Errorf("--acl-file %s line %d: user %q defined twice", path, n, fields[1])
		}
		seen[fields[1]] = true
		u := commands.ACLUser{Name: fields[1], Role: role}
		copy(u.Hash[:], h)
		out = append(out, u)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("--acl-file: %v", err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--acl-file %s: no users", path)
	}
	return out, nil
}

// tlsConfig builds the server-side TLS configuration. The certificate is
// read at each handshake from s.certs, so that a reload (SIGHUP) takes
// effect for new connections. With --tls-ca, client certificates signed
// by it are verified when presented (clients still authenticate with a
// password), and Raft peers must present one.
func (s *Server) tlsConfig() (*tls.Config, error) {
	tc := &tls.Config{GetCertificate: s.certs.get, MinVersion: tls.VersionTLS12}
	if s.cfg.TLSCA != "" {
		pool, err := loadCA(s.cfg.TLSCA)
		if err != nil {
			return nil, err
		}
		tc.ClientCAs = pool
		tc.RootCAs = pool
		tc.ClientAuth = tls.VerifyClientCertIfGiven
	}
	return tc, nil
}

func loadCA(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--tls-ca: %v", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("--tls-ca %s: no PEM certificates", path)
	}
	return pool, nil
}
