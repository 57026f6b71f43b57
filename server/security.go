package server

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
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
		pool, err := loadCA("--tls-ca", s.cfg.TLSCA)
		if err != nil {
			return nil, err
		}
		tc.ClientCAs = pool
		tc.RootCAs = pool
		tc.ClientAuth = tls.VerifyClientCertIfGiven
	}
	return tc, nil
}

// grpcTLSConfig is the TLS of --grpc-addr, nil for none: the certificate
// of --grpc-tls-cert (else --tls-cert's, with --tls-ca's optional client
// certificates), and, with --grpc-tls-client-ca, a client certificate
// required and verified against that CA, carrying --grpc-tls-client-san
// when given (as envoyproxy/ratelimit's GRPC_CLIENT_TLS_CACERT and
// GRPC_CLIENT_TLS_SAN).
func (s *Server) grpcTLSConfig() (*tls.Config, error) {
	var tc *tls.Config
	switch {
	case s.grpcCerts != nil:
		tc = &tls.Config{GetCertificate: s.grpcCerts.get, MinVersion: tls.VersionTLS12}
	case s.certs != nil:
		var err error
		if tc, err = s.tlsConfig(); err != nil {
			return nil, err
		}
	default:
		return nil, nil
	}
	if ca := s.cfg.GRPCTLSClientCA; ca != "" {
		pool, err := loadCA("--grpc-tls-client-ca", ca)
		if err != nil {
			return nil, err
		}
		tc.ClientCAs, tc.ClientAuth = pool, tls.RequireAndVerifyClientCert
		if san := s.cfg.GRPCTLSClientSAN; san != "" {
			// After the chain is verified, and on a resumed session too.
			tc.VerifyConnection = func(cs tls.ConnectionState) error {
				if len(cs.PeerCertificates) == 0 {
					return errors.New("no client certificate")
				}
				if err := cs.PeerCertificates[0].VerifyHostname(san); err != nil {
					return fmt.Errorf("client certificate refused: %v", err)
				}
				return nil
			}
		}
	}
	return tc, nil
}

// grpcTLSMode names the TLS of --grpc-addr for the listening line: off,
// tls, or mtls (client certificates required).
func (s *Server) grpcTLSMode() string {
	switch {
	case s.grpcCerts == nil && s.certs == nil:
		return "off"
	case s.cfg.GRPCTLSClientCA != "":
		return "mtls"
	}
	return "tls"
}

func loadCA(setting, path string) (*x509.CertPool, error) {
	pool, err := LoadCAPool(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", setting, err)
	}
	return pool, nil
}

// LoadCAPool reads a PEM bundle of CA certificates; the error names the
// file and says why (for the caller to prefix with its setting).
func LoadCAPool(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: no PEM certificates", path)
	}
	return pool, nil
}

// LoadKeyPair reads a PEM certificate (chain) and its private key, with
// the leaf parsed; the error says why (for the caller to prefix with its
// settings).
func LoadKeyPair(certFile, keyFile string) (*tls.Certificate, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	if cert.Leaf == nil {
		if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return nil, err
		}
	}
	return &cert, nil
}
