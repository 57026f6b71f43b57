package server

import (
	"crypto/tls"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-rl/sluice/access"
	"github.com/sluice-rl/sluice/envoyrls"
)

// Reloading: on SIGHUP a node re-reads the files it was given — the Envoy
// rule file (--envoy-config), the ACL file (--acl-file) and the TLS
// certificates and keys (--tls-cert, --tls-key, --grpc-tls-cert,
// --grpc-tls-key) — and puts each in force if it parses; one that does
// not leaves the one in force and is logged at ERROR with the file and
// the reason. The Envoy rules and the certificates are also re-read when
// their files change on disk (envoyWatchInterval). Nothing stops the
// node, and its Raft role is untouched.

// envoyWatchInterval is how often the Envoy rule files are checked for a
// change: often enough that an update is in force within 2 s of its
// write (issue #23), rarely enough that reading small rule files costs
// nothing.
const envoyWatchInterval = 500 * time.Millisecond

// reloadState is what a reload compares against: the fingerprint of the
// Envoy rules in force, and the ACL users in force.
type reloadState struct {
	mu       sync.Mutex
	rls      *envoyrls.Server
	envoySum string
	aclUsers []string
}

// Reload re-reads every file the node was given (SIGHUP).
func (s *Server) Reload() {
	if s.cfg.EnvoyConfig != "" {
		s.reloadEnvoy("signal")
	}
	if s.cfg.ACLFile != "" {
		s.reloadACL()
	}
	for _, c := range s.certSources() {
		s.reloadCert(c, "signal")
	}
}

// reloadEnvoy loads the Envoy rules if their files changed since the
// rules in force were read; why says what prompted it.
func (s *Server) reloadEnvoy(why string) {
	r := &s.reload
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.rls == nil {
		return
	}
	path, o := s.cfg.EnvoyConfig, s.loadOptions()
	sum, err := envoyrls.FingerprintWith(path, o)
	if err == nil && sum == r.envoySum {
		if why == "signal" {
			s.log.Info("envoy configuration unchanged", "path", path)
		}
		return
	}
	var cfg *envoyrls.Config
	if err == nil {
		cfg, err = envoyrls.LoadConfigWith(path, o)
	}
	if err != nil {
		if r.envoySum != "bad:"+err.Error() || why == "signal" {
			s.log.Error("envoy configuration not reloaded: the rules in force stay", "path", path, "err", err, "trigger", why)
			s.envoyLoads(false)
		}
		r.envoySum = "bad:" + err.Error() // said once per distinct error while polling
		return
	}
	old := r.rls.Config().Domains()
	r.rls.SetConfig(cfg)
	r.envoySum = sum
	s.envoyLoads(true)
	s.warnEnvoy(cfg)
	added, removed := diff(old, cfg.Domains())
	s.log.Info("envoy configuration reloaded", "path", path, "trigger", why, "domains", strings.Join(cfg.Domains(), ","),
		"added", strings.Join(added, ","), "removed", strings.Join(removed, ","))
}

// watchEnvoy re-reads the Envoy rules when their files change, until the
// server shuts down. It polls (no file-notification dependency), stating
// the path each time, so that a file replaced by rename or a ConfigMap's
// symbolic link swap is seen.
func (s *Server) watchEnvoy() {
	t := time.NewTicker(envoyWatchInterval)
	defer t.Stop()
	for {
		select {
		case <-s.shutdown:
			return
		case <-t.C:
			s.reloadEnvoy("file change")
		}
	}
}

// reloadACL re-reads --acl-file and puts its users in force for the next
// authentication.
func (s *Server) reloadACL() {
	r := &s.reload
	r.mu.Lock()
	defer r.mu.Unlock()
	acl, err := access.LoadACL(s.cfg.ACLFile)
	if err != nil {
		s.log.Error("acl file not reloaded: the users in force stay", "path", s.cfg.ACLFile, "err", err)
		return
	}
	s.env.Auth.Replace(s.cfg.RequirePass, peerUser(s.cfg, acl))
	names := make([]string, len(acl))
	for i, u := range acl {
		names[i] = u.Name + ":" + u.Role.String()
	}
	sort.Strings(names)
	added, removed := diff(r.aclUsers, names)
	r.aclUsers = names
	s.log.Info("acl file reloaded", "path", s.cfg.ACLFile, "users", len(acl), "added", strings.Join(added, ","), "removed", strings.Join(removed, ","))
}

// aclNames records the users of the ACL file loaded at start, for the
// first reload's comparison.
func (s *Server) aclNames(acl []access.User) {
	for _, u := range acl {
		s.reload.aclUsers = append(s.reload.aclUsers, u.Name+":"+u.Role.String())
	}
	sort.Strings(s.reload.aclUsers)
}

// certSource holds the certificate a listener presents, replaced on a
// reload; handshakes read it through GetCertificate. certName and keyName
// are the settings that name its files, for messages.
type certSource struct {
	certFile, keyFile string
	certName, keyName string
	cert              atomic.Pointer[tls.Certificate]
	// seen is the content of both files when last read, so that polling
	// tries a file only once it changes (and says a bad one once).
	seen string
}

func newCertSource(certFile, keyFile, certName, keyName string) (*certSource, error) {
	c := &certSource{certFile: certFile, keyFile: keyFile, certName: certName, keyName: keyName}
	c.seen, _ = c.content()
	cert, err := c.read()
	if err != nil {
		return nil, err
	}
	c.cert.Store(cert)
	return c, nil
}

func (c *certSource) read() (*tls.Certificate, error) {
	cert, err := LoadKeyPair(c.certFile, c.keyFile)
	if err != nil {
		return nil, fmt.Errorf("%s/%s: %v", c.certName, c.keyName, err)
	}
	return cert, nil
}

// content is what both files hold now.
func (c *certSource) content() (string, error) {
	a, err := os.ReadFile(c.certFile)
	if err != nil {
		return "", err
	}
	b, err := os.ReadFile(c.keyFile)
	if err != nil {
		return "", err
	}
	return string(a) + "\x00" + string(b), nil
}

func (c *certSource) get(*tls.ClientHelloInfo) (*tls.Certificate, error) { return c.cert.Load(), nil }

// certSources are the certificates the node's listeners present: the
// RESP (and gRPC) one of --tls-cert, the gRPC one of --grpc-tls-cert.
func (s *Server) certSources() []*certSource {
	var out []*certSource
	for _, c := range []*certSource{s.certs, s.grpcCerts} {
		if c != nil {
			out = append(out, c)
		}
	}
	return out
}

// reloadCert re-reads the certificate and key a listener presents; why
// says what prompted it. On a file change, files that read as last time
// are not parsed again, and one that does not load is said once.
func (s *Server) reloadCert(c *certSource, why string) {
	s.reload.mu.Lock()
	defer s.reload.mu.Unlock()
	now, _ := c.content()
	if why != "signal" && now == c.seen {
		return
	}
	c.seen = now
	cert, err := c.read()
	if err != nil {
		s.log.Error("tls certificate not reloaded: the one in force stays", "cert", c.certFile, "key", c.keyFile, "err", err, "trigger", why)
		return
	}
	old := c.cert.Swap(cert)
	if old != nil && slices.EqualFunc(old.Certificate, cert.Certificate, func(a, b []byte) bool { return string(a) == string(b) }) {
		if why == "signal" {
			s.log.Info("tls certificate unchanged", "cert", c.certFile)
		}
		return
	}
	s.log.Info("tls certificate reloaded", "cert", c.certFile, "trigger", why, "subject", cert.Leaf.Subject.String(),
		"not_after", cert.Leaf.NotAfter.UTC().Format(time.RFC3339))
}

// watchCerts re-reads the certificates when their files change, until the
// server shuts down (as envoyproxy/ratelimit watches its certificate's
// directory): a renewal written in place, by rename or by a Kubernetes
// Secret's symbolic link swap is in force for the next handshake.
func (s *Server) watchCerts() {
	t := time.NewTicker(envoyWatchInterval)
	defer t.Stop()
	for {
		select {
		case <-s.shutdown:
			return
		case <-t.C:
			for _, c := range s.certSources() {
				s.reloadCert(c, "file change")
			}
		}
	}
}

// diff returns the names of b not in a, and of a not in b.
func diff(a, b []string) (added, removed []string) {
	for _, x := range b {
		if !slices.Contains(a, x) {
			added = append(added, x)
		}
	}
	for _, x := range a {
		if !slices.Contains(b, x) {
			removed = append(removed, x)
		}
	}
	return added, removed
}
