package access

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"sort"
	"sync/atomic"
)

// Auth holds the credentials clients may present.
type Auth struct {
	// users is replaced whole when the ACL file is reloaded; readers see
	// the old set or the new one, never a mix.
	users atomic.Pointer[map[string]credential]
}

type credential struct {
	hash [32]byte
	role Role
}

// User is one user of the ACL file.
type User struct {
	Name string
	Role Role
	Hash [32]byte // SHA-256 of the password
}

// NewAuth returns credentials: requirepass (if not empty) for the user
// "default" as admin, plus the ACL users (name → role and SHA-256 of the
// password).
func NewAuth(requirepass string, users []User) *Auth {
	a := &Auth{}
	a.Replace(requirepass, users)
	return a
}

// Replace puts new credentials in force for the next authentication;
// callers already authenticated keep their user and role.
func (a *Auth) Replace(requirepass string, acl []User) {
	users := map[string]credential{}
	if requirepass != "" {
		users["default"] = credential{hash: sha256.Sum256([]byte(requirepass)), role: RoleAdmin}
	}
	for _, u := range acl {
		users[u.Name] = credential{hash: u.Hash, role: u.Role}
	}
	a.users.Store(&users)
}

func (a *Auth) current() map[string]credential { return *a.users.Load() }

// Required reports whether clients must authenticate.
func (a *Auth) Required() bool { return a != nil && len(a.current()) > 0 }

// Check verifies a password in constant time (for a known user) and
// returns the user's role.
func (a *Auth) Check(user, pass []byte) (Role, bool) {
	c, ok := a.current()[string(user)]
	h := sha256.Sum256(pass)
	if !ok {
		// Compare anyway so that unknown users cost the same time.
		subtle.ConstantTimeCompare(h[:], make([]byte, 32))
		return RoleNone, false
	}
	if subtle.ConstantTimeCompare(h[:], c.hash[:]) != 1 {
		return RoleNone, false
	}
	return c.role, true
}

// Listed is one user as the ACL commands show it.
type Listed struct {
	Name string
	Role Role
	Hash string // hex SHA-256 of the password, "" for none (nopass)
}

// List returns the users, sorted by name. Without credentials every
// caller is the user default, admin, without password.
func (a *Auth) List() []Listed {
	if !a.Required() {
		return []Listed{{Name: "default", Role: RoleAdmin}}
	}
	users := a.current()
	out := make([]Listed, 0, len(users))
	for n, c := range users {
		out = append(out, Listed{Name: n, Role: c.role, Hash: hex.EncodeToString(c.hash[:])})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
