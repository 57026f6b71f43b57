// Package access decides who may do what, for every front alike: the
// roles, the users (--requirepass and the ACL file) and the check of their
// passwords, the credentials nodes present to each other, and the check of
// a caller of the HTTP and gRPC fronts (protected mode, the authorization
// header, the role a call needs). The RESP front (commands) keeps only how
// a connection presents credentials (AUTH, HELLO) and what it replies.
package access

import "strings"

// Role is what an authenticated user may do.
type Role uint8

// The roles, in increasing power. RoleNone is a caller that has not
// authenticated where a password is required.
const (
	RoleNone Role = iota
	RoleLimiter
	RoleAdmin
)

// String returns "none", "limiter" or "admin".
func (r Role) String() string {
	switch r {
	case RoleLimiter:
		return "limiter"
	case RoleAdmin:
		return "admin"
	}
	return "none"
}

// ParseRole parses "limiter" or "admin", in any case.
func ParseRole(s string) (Role, bool) {
	switch strings.ToLower(s) {
	case "limiter":
		return RoleLimiter, true
	case "admin":
		return RoleAdmin, true
	}
	return RoleNone, false
}
