package server

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
)

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
