// Package testpki makes certificate authorities and the certificates they
// sign for tests of TLS and mutual TLS: written as PEM files to a test's
// directory, and ready for a tls.Config. Certificates are valid from an
// hour before they are made to a day after, so that no test depends on
// the hour.
package testpki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// CA is a certificate authority of a test.
type CA struct {
	t    testing.TB
	dir  string
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// Pool holds the CA alone, to verify what it signs.
	Pool *x509.CertPool
	// File is the CA's certificate as a PEM file.
	File string
}

// Use is what a certificate is for.
type Use int

const (
	// Server: a server certificate for 127.0.0.1 (and the DNS names given).
	Server Use = iota
	// Client: a client certificate carrying the DNS names given.
	Client
	// Both: a node's certificate, presented as a server and as a client
	// (a cluster's peers dial each other), for 127.0.0.1.
	Both
)

// Pair is a certificate and its key: their PEM files and the loaded pair.
type Pair struct {
	Cert, Key string
	TLS       tls.Certificate
}

var serial atomic.Int64

// NewCA makes a CA named name and writes its certificate to dir/name.crt.
func NewCA(t testing.TB, dir, name string) *CA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial.Add(1)), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	ca := &CA{t: t, dir: dir, cert: cert, key: key, Pool: x509.NewCertPool()}
	ca.Pool.AddCert(cert)
	ca.File = filepath.Join(dir, name+".crt")
	writePEM(t, ca.File, "CERTIFICATE", der)
	return ca
}

// Issue signs a certificate with common name cn for use, carrying the DNS
// names sans, and writes it and its key to name.crt and name.key in the
// CA's directory.
func (ca *CA) Issue(name, cn string, use Use, sans ...string) Pair {
	t := ca.t
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial.Add(1)), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, DNSNames: sans}
	switch use {
	case Server:
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	case Client:
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	case Both:
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	}
	if use != Client {
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	p := Pair{Cert: filepath.Join(ca.dir, name+".crt"), Key: filepath.Join(ca.dir, name+".key")}
	writePEM(t, p.Cert, "CERTIFICATE", der)
	writePEM(t, p.Key, "EC PRIVATE KEY", keyDER)
	if p.TLS, err = tls.LoadX509KeyPair(p.Cert, p.Key); err != nil {
		t.Fatal(err)
	}
	return p
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}
