package access

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// Nodes open connections to each other (forwarded writes, joins, RL.SYNC,
// RL.LEASE) as the user "sluice-peer:<node-id>", with a password derived
// from the cluster secret (--peer-password, else --requirepass) and the
// node id: HMAC-SHA256(secret, node id), in hex. A caller that
// authenticates so is that node's: the internal commands take the node
// they act for from the connection, never from their arguments alone, and
// refuse every other caller, admins included.

// PeerUserPrefix starts the user name a node authenticates as.
const PeerUserPrefix = "sluice-peer:"

// PeerToken returns the password node id presents with the cluster
// secret.
func PeerToken(secret, id string) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(id))
	return hex.EncodeToString(m.Sum(nil))
}

// PeerAuth checks node credentials.
type PeerAuth struct {
	secret string
	on     bool
}

// NewPeerAuth returns the check of node credentials for the cluster
// secret. With no secret, a node whose clients must authenticate accepts
// no node credentials (a secret nobody set cannot be proven); one without
// any password accepts them on the empty secret, since there every
// client is trusted alike.
func NewPeerAuth(secret string, authRequired bool) *PeerAuth {
	return &PeerAuth{secret: secret, on: secret != "" || !authRequired}
}

// Check reports whether user names a node (isPeer) and, if so, whether
// pass proves it, and which node.
func (p *PeerAuth) Check(user, pass []byte) (id string, isPeer, ok bool) {
	rest, found := strings.CutPrefix(string(user), PeerUserPrefix)
	if p == nil || !found {
		return "", false, false
	}
	want := PeerToken(p.secret, rest)
	ok = hmac.Equal([]byte(want), pass) && p.on && rest != ""
	return rest, true, ok
}
