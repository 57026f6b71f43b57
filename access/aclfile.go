package access

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
)

// LoadACL reads an ACL file: one user per line,
//
//	user <name> <limiter|admin> <sha256 hex of the password>
//
// with '#' comments. Only hashes are stored; `sluice hash-password` prints
// the hash of a password. An empty path is no file and no users.
func LoadACL(path string) ([]User, error) {
	if path == "" {
		return nil, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--acl-file: %v", err)
	}
	defer f.Close()
	var out []User
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
		role, ok := ParseRole(fields[2])
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
		u := User{Name: fields[1], Role: role}
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
