package access

import (
	"encoding/base64"
	"fmt"
	"net"
	"strings"
)

// ProtectedMode is why a node without any password refuses a caller that
// is not on the loopback interface (the RESP front prefixes DENIED).
const ProtectedMode = "sluice is running in protected mode because no password is set: only loopback clients are accepted. Set --requirepass (or --acl-file), or start with --protected-mode=false if this network is trusted."

// IsLoopback reports whether addr (host:port) is on the loopback
// interface.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Refusal is why a caller is refused, or Allowed.
type Refusal uint8

// The outcomes of CheckCaller.
const (
	Allowed Refusal = iota
	Unauthenticated
	Forbidden
)

// CheckCaller checks a caller of the HTTP or gRPC front as the RESP
// listener checks a connection: protected mode (when protected) from its
// address, credentials from its authorization header ("Bearer <password>"
// or "Basic …"), and that its role is at least need. It returns why it
// refuses and the message to send.
func (a *Auth) CheckCaller(addr, authz string, need Role, protected bool) (Refusal, string) {
	if !a.Required() {
		if protected && !IsLoopback(addr) {
			return Forbidden, ProtectedMode
		}
		return Allowed, ""
	}
	user, pass, ok := ParseAuthorization(authz)
	if !ok {
		return Unauthenticated, "authentication required: send the authorization header as 'Bearer <password>' or 'Basic base64(user:password)'"
	}
	role, ok := a.Check([]byte(user), []byte(pass))
	if !ok {
		return Unauthenticated, "invalid username-password pair or user is disabled"
	}
	if role < need {
		return Forbidden, fmt.Sprintf("this user has role %s; the call needs %s", role, need)
	}
	return Allowed, ""
}

// ParseAuthorization reads "Bearer <password>" (user default) or "Basic
// base64(user:password)".
func ParseAuthorization(v string) (user, pass string, ok bool) {
	scheme, rest, found := strings.Cut(v, " ")
	if !found {
		return "", "", false
	}
	switch strings.ToLower(scheme) {
	case "bearer":
		return "default", rest, true
	case "basic":
		b, err := base64.StdEncoding.DecodeString(rest)
		if err != nil {
			return "", "", false
		}
		return strings.Cut(string(b), ":")
	}
	return "", "", false
}
