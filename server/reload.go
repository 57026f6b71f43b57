package server

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
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
// certificate and key (--tls-cert, --tls-key) — and puts each in force if
// it parses; one that does not leaves the one in force and is logged at
// ERROR with the file and the reason. The Envoy rules are also re-read
// when their files change on disk (envoyWatchInterval). Nothing stops the
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
	if s.certs != nil {
		s.reloadCert()
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

// certSource holds the certificate the listeners present, replaced on a
// reload; handshakes read it through GetCertificate.
type certSource struct {
	certFile, keyFile string
	cert              atomic.Pointer[tls.Certificate]
}

func newCertSource(certFile, keyFile string) (*certSource, error) {
	c := &certSource{certFile: certFile, keyFile: keyFile}
	cert, err := c.read()
	if err != nil {
		return nil, err
	}
	c.cert.Store(cert)
	return c, nil
}

func (c *certSource) read() (*tls.Certificate, error) {
	cert, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert/--tls-key: %v", err)
	}
	if cert.Leaf == nil {
		if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return nil, fmt.Errorf("--tls-cert: %v", err)
		}
	}
	return &cert, nil
}

func (c *certSource) get(*tls.ClientHelloInfo) (*tls.Certificate, error) { return c.cert.Load(), nil }

// reloadCert re-reads the certificate and key the listeners present.
func (s *Server) reloadCert() {
	cert, err := s.certs.read()
	if err != nil {
		s.log.Error("tls certificate not reloaded: the one in force stays", "cert", s.certs.certFile, "key", s.certs.keyFile, "err", err)
		return
	}
	old := s.certs.cert.Swap(cert)
	if old != nil && slices.EqualFunc(old.Certificate, cert.Certificate, func(a, b []byte) bool { return string(a) == string(b) }) {
		s.log.Info("tls certificate unchanged", "cert", s.certs.certFile)
		return
	}
	s.log.Info("tls certificate reloaded", "cert", s.certs.certFile, "subject", cert.Leaf.Subject.String(),
		"not_after", cert.Leaf.NotAfter.UTC().Format(time.RFC3339))
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
