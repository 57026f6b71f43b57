package e2e

// The drop-in's gRPC TLS (SPEC §11, issue #36): the peer's
// GRPC_SERVER_USE_TLS, GRPC_SERVER_TLS_CERT/KEY, GRPC_CLIENT_TLS_CACERT and
// GRPC_CLIENT_TLS_SAN, as its GrpcServerTlsConfig and verifyClient read
// them, against the binary run as `ratelimit`; certificates made here,
// written to t.TempDir().

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	grpcpeer "google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/sluice-rl/sluice/testsupport/testpki"
)

// issue signs a certificate named cn with ca: a server one for 127.0.0.1,
// or a client one carrying the DNS names sans. It writes name.crt and
// name.key and returns their paths and the certificate for a tls.Config.
func issue(ca *testpki.CA, name, cn string, server bool, sans ...string) (certFile, keyFile string, kp tls.Certificate) {
	use := testpki.Client
	if server {
		use = testpki.Server
	}
	p := ca.Issue(name, cn, use, sans...)
	return p.Cert, p.Key, p.TLS
}

// dialTLS is a gRPC client of addr over TLS, verifying the server against
// roots, presenting certs (none: no client certificate).
func dialTLS(t *testing.T, addr string, roots *x509.CertPool, certs ...tls.Certificate) (rlsv3.RateLimitServiceClient, healthpb.HealthClient) {
	t.Helper()
	creds := credentials.NewTLS(&tls.Config{RootCAs: roots, Certificates: certs, MinVersion: tls.VersionTLS12})
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return rlsv3.NewRateLimitServiceClient(conn), healthpb.NewHealthClient(conn)
}

// callOnce is one ShouldRateLimit of domain checkout (the peer's runtime
// files) within a deadline.
func callOnce(c rlsv3.RateLimitServiceClient) (*rlsv3.RateLimitResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "checkout", Descriptors: []*rlcommon.RateLimitDescriptor{desc("cart", "c-1")}})
}

// refused checks that a call fails as a connection the server would not
// have fails: UNAVAILABLE, never an answer.
func refused(t *testing.T, what string, c rlsv3.RateLimitServiceClient) {
	t.Helper()
	resp, err := callOnce(c)
	if err == nil {
		t.Fatalf("%s: answered %v, want the connection refused", what, resp)
	}
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("%s: %v, want UNAVAILABLE (the handshake refused)", what, err)
	}
}

// TestRatelimitGRPCServerTLS: GRPC_SERVER_USE_TLS with the server's
// certificate; a client verifying it against the CA is answered (calls and
// health), a plaintext one is not.
func TestRatelimitGRPCServerTLS(t *testing.T) {
	dir := t.TempDir()
	ca := testpki.NewCA(t, dir, "ca")
	cert, key, _ := issue(ca, "server", "ratelimit server", true)
	p, _ := startRatelimit(t, nil, append(peerRuntime(t), "GRPC_SERVER_USE_TLS=true",
		"GRPC_SERVER_TLS_CERT="+cert, "GRPC_SERVER_TLS_KEY="+key)...)
	if !strings.Contains(p.Log(), "grpc_tls=tls") {
		t.Fatalf("the listening line does not say grpc_tls=tls:\n%s", p.Log())
	}
	c, h := dialTLS(t, p.GRPC, ca.Pool)
	if resp, err := callOnce(c); err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("over TLS: %v %v", resp, err)
	}
	eventually(t, 30*time.Second, "health ratelimit SERVING over TLS", func() bool {
		r, err := h.Check(context.Background(), &healthpb.HealthCheckRequest{Service: "ratelimit"})
		return err == nil && r.Status == healthpb.HealthCheckResponse_SERVING
	})
	// Plaintext on the TLS port.
	conn, err := grpc.NewClient(p.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	refused(t, "plaintext client", rlsv3.NewRateLimitServiceClient(conn))
	// A client trusting another CA refuses the server.
	other := testpki.NewCA(t, dir, "other-ca")
	oc, _ := dialTLS(t, p.GRPC, other.Pool)
	refused(t, "client trusting another CA", oc)
}

// TestRatelimitGRPCMutualTLS: with GRPC_CLIENT_TLS_CACERT a client must
// present a certificate signed by that CA, and with GRPC_CLIENT_TLS_SAN
// carry that name (the peer's verifyClient: the DNS name checked as a
// host name against the certificate).
func TestRatelimitGRPCMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca := testpki.NewCA(t, dir, "ca")
	cert, key, _ := issue(ca, "server", "ratelimit server", true)
	clients := testpki.NewCA(t, dir, "clients-ca")
	_, _, envoy := issue(clients, "envoy", "envoy", false, "envoy.internal")
	_, _, wrongSAN := issue(clients, "intruder", "intruder", false, "intruder.internal")
	stranger := testpki.NewCA(t, dir, "stranger-ca")
	_, _, unsigned := issue(stranger, "stranger", "envoy", false, "envoy.internal")
	for _, san := range []string{"", "envoy.internal"} {
		t.Run("san="+san, func(t *testing.T) {
			env := append(peerRuntime(t), "GRPC_SERVER_USE_TLS=true", "GRPC_SERVER_TLS_CERT="+cert,
				"GRPC_SERVER_TLS_KEY="+key, "GRPC_CLIENT_TLS_CACERT="+clients.File)
			if san != "" {
				env = append(env, "GRPC_CLIENT_TLS_SAN="+san)
			}
			p, _ := startRatelimit(t, nil, env...)
			if !strings.Contains(p.Log(), "grpc_tls=mtls") {
				t.Fatalf("the listening line does not say grpc_tls=mtls:\n%s", p.Log())
			}
			c, h := dialTLS(t, p.GRPC, ca.Pool, envoy)
			if resp, err := callOnce(c); err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
				t.Fatalf("with the client certificate: %v %v", resp, err)
			}
			eventually(t, 30*time.Second, "health SERVING over mutual TLS", func() bool {
				r, err := h.Check(context.Background(), &healthpb.HealthCheckRequest{Service: "ratelimit"})
				return err == nil && r.Status == healthpb.HealthCheckResponse_SERVING
			})
			none, noneHealth := dialTLS(t, p.GRPC, ca.Pool)
			refused(t, "client without a certificate", none)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err := noneHealth.Check(ctx, &healthpb.HealthCheckRequest{Service: "ratelimit"})
			cancel()
			if status.Code(err) != codes.Unavailable {
				t.Fatalf("health check without a client certificate: %v, want UNAVAILABLE", err)
			}
			us, _ := dialTLS(t, p.GRPC, ca.Pool, unsigned)
			refused(t, "client certificate of another CA", us)
			ws, _ := dialTLS(t, p.GRPC, ca.Pool, wrongSAN)
			if san == "" {
				// Without GRPC_CLIENT_TLS_SAN any certificate of the CA passes.
				if _, err := callOnce(ws); err != nil {
					t.Fatalf("another name, no SAN set: %v", err)
				}
			} else {
				refused(t, "client certificate without "+san, ws)
			}
		})
	}
}

// TestRatelimitGRPCCertReload: the gRPC port's certificate is re-read
// when its files change (as the peer's CertProvider watches their
// directory) and on SIGHUP; a file that does not load keeps the one in
// force.
func TestRatelimitGRPCCertReload(t *testing.T) {
	dir := t.TempDir()
	ca := testpki.NewCA(t, dir, "ca")
	cert, key, _ := issue(ca, "server", "first", true)
	p, _ := startRatelimit(t, nil, append(peerRuntime(t), "GRPC_SERVER_USE_TLS=true",
		"GRPC_SERVER_TLS_CERT="+cert, "GRPC_SERVER_TLS_KEY="+key)...)
	presented := func() string {
		d := &net.Dialer{Timeout: 10 * time.Second}
		conn, err := tls.DialWithDialer(d, "tcp", p.GRPC, &tls.Config{RootCAs: ca.Pool, NextProtos: []string{"h2"}})
		if err != nil {
			t.Fatalf("handshake: %v", err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].Subject.CommonName
	}
	if got := presented(); got != "first" {
		t.Fatalf("presents %q, want first", got)
	}
	// A renewal written over the files (cert, then key).
	n2, k2, _ := issue(ca, "renewed", "second", true)
	replace := func(from, to string) {
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(to+".tmp", b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(to+".tmp", to); err != nil {
			t.Fatal(err)
		}
	}
	replace(n2, cert)
	replace(k2, key)
	eventually(t, 30*time.Second, "the renewed certificate presented", func() bool { return presented() == "second" })
	if !strings.Contains(p.Log(), "tls certificate reloaded") || !strings.Contains(p.Log(), "trigger=\"file change\"") {
		t.Fatalf("no reload logged:\n%s", p.Log())
	}
	// A broken file: the one in force stays, the reason is logged once.
	if err := os.WriteFile(cert, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the bad file reported", func() bool {
		return strings.Contains(p.Log(), "tls certificate not reloaded: the one in force stays")
	})
	if got := presented(); got != "second" {
		t.Fatalf("after a bad file, presents %q, want second", got)
	}
	// SIGHUP re-reads the files whatever the poll saw.
	n3, k3, _ := issue(ca, "third", "third", true)
	replace(n3, cert)
	replace(k3, key)
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the third certificate presented", func() bool { return presented() == "third" })
	if resp, err := callOnce(func() rlsv3.RateLimitServiceClient { c, _ := dialTLS(t, p.GRPC, ca.Pool); return c }()); err != nil {
		t.Fatalf("a call after the reloads: %v %v", resp, err)
	}
}

// TestRatelimitTLSSettingsRefused: a TLS setting the node cannot honour
// stops it at start, with one line naming the setting and why — never
// plaintext instead.
func TestRatelimitTLSSettingsRefused(t *testing.T) {
	dir := t.TempDir()
	ca := testpki.NewCA(t, dir, "ca")
	cert, key, _ := issue(ca, "server", "ratelimit server", true)
	garbage := filepath.Join(dir, "garbage.pem")
	if err := os.WriteFile(garbage, []byte("not PEM\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.pem")
	on := []string{"GRPC_SERVER_USE_TLS=true", "GRPC_SERVER_TLS_CERT=" + cert, "GRPC_SERVER_TLS_KEY=" + key}
	for _, c := range []struct {
		env  []string
		want string
	}{
		{[]string{"GRPC_SERVER_USE_TLS=true"}, "GRPC_SERVER_USE_TLS=true needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY"},
		{[]string{"GRPC_SERVER_USE_TLS=true", "GRPC_SERVER_TLS_CERT=" + cert}, "GRPC_SERVER_USE_TLS=true needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY"},
		{[]string{"GRPC_SERVER_USE_TLS=yes"}, `GRPC_SERVER_USE_TLS="yes": must be true or false`},
		{[]string{"GRPC_SERVER_USE_TLS=true", "GRPC_SERVER_TLS_CERT=" + missing, "GRPC_SERVER_TLS_KEY=" + key}, "GRPC_SERVER_TLS_CERT=\"" + missing + "\""},
		{[]string{"GRPC_SERVER_USE_TLS=true", "GRPC_SERVER_TLS_CERT=" + cert, "GRPC_SERVER_TLS_KEY=" + garbage}, "GRPC_SERVER_TLS_KEY=\"" + garbage + "\""},
		{append(on, "GRPC_CLIENT_TLS_CACERT="+missing), "GRPC_CLIENT_TLS_CACERT=\"" + missing + "\": open " + missing + ": no such file or directory"},
		{append(on, "GRPC_CLIENT_TLS_CACERT="+garbage), "GRPC_CLIENT_TLS_CACERT=\"" + garbage + "\": " + garbage + ": no PEM certificates"},
		{append(on, "GRPC_CLIENT_TLS_SAN=envoy.internal"), "GRPC_CLIENT_TLS_SAN needs GRPC_CLIENT_TLS_CACERT"},
	} {
		out, code := runRatelimit(t, append(peerRuntime(t), c.env...)...)
		lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
		if code != 2 || len(lines) != 1 || !strings.HasPrefix(lines[0], "sluice ratelimit: ") || !strings.Contains(lines[0], c.want) {
			t.Errorf("%v: exit %d, printed\n%s\nwant exit 2 and one line with %q", c.env, code, out, c.want)
		}
	}
	// Without GRPC_SERVER_USE_TLS the peer ignores its certificate
	// settings: so does this, saying so.
	p, _ := startRatelimit(t, nil, append(peerRuntime(t), "GRPC_SERVER_TLS_CERT="+cert, "GRPC_SERVER_TLS_KEY="+key)...)
	if !strings.Contains(p.Log(), "GRPC_SERVER_TLS_CERT, GRPC_SERVER_TLS_KEY set without GRPC_SERVER_USE_TLS=true") || !strings.Contains(p.Log(), "grpc_tls=off") {
		t.Fatalf("certificate settings without GRPC_SERVER_USE_TLS not reported:\n%s", p.Log())
	}
}

// runRatelimit runs the binary as `sluice ratelimit` with env until it
// stops on its own (a refused setting), returning what it printed and its
// exit status.
func runRatelimit(t *testing.T, env ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(binary, "ratelimit", "--resp-addr", "127.0.0.1:0", "--raft-addr", "127.0.0.1:0", "--data-dir", t.TempDir())
	cmd.Env = append(os.Environ(), append([]string{"HOST=127.0.0.1", "PORT=0", "GRPC_HOST=127.0.0.1", "GRPC_PORT=0",
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT=0"}, env...)...)
	timer := time.AfterFunc(60*time.Second, func() { cmd.Process.Kill() })
	defer timer.Stop()
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(out), ee.ExitCode()
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(out), 0
}

// TestRatelimitXDSMutualTLS: CONFIG_GRPC_XDS_SERVER_USE_TLS with the
// peer's client certificate, CA and SAN settings takes the rules from a
// management server that requires a client certificate.
func TestRatelimitXDSMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca := testpki.NewCA(t, dir, "ca")
	_, _, srvKP := issue(ca, "xds", "xds", true, "xds.internal")
	nodeCert, nodeKey, _ := issue(ca, "node", "ratelimit node", false)
	var clientCN atomic.Value
	x := &xdsServer{cache: cachev3.NewSnapshotCache(false, cachev3.IDHash{}, nil)}
	cb := serverv3.CallbackFuncs{StreamOpenFunc: func(ctx context.Context, id int64, typ string) error {
		if p, ok := grpcpeer.FromContext(ctx); ok {
			if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(ti.State.PeerCertificates) > 0 {
				clientCN.Store(ti.State.PeerCertificates[0].Subject.CommonName)
			}
		}
		return nil
	}}
	ctx, cancel := context.WithCancel(context.Background())
	g := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{srvKP},
		ClientCAs: ca.Pool, ClientAuth: tls.RequireAndVerifyClientCert})))
	discoverygrpc.RegisterAggregatedDiscoveryServiceServer(g, serverv3.NewServer(ctx, x.cache, cb))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	x.addr = ln.Addr().String()
	go g.Serve(ln)
	t.Cleanup(func() { g.Stop(); cancel() })
	x.push(t, "rl-tls", "v1", rlConfig("shop", map[string]uint32{"user": 3}))
	p := startXDSRatelimit(t, xdsEnv(x.addr, "rl-tls", "CONFIG_GRPC_XDS_SERVER_USE_TLS=true",
		"CONFIG_GRPC_XDS_CLIENT_TLS_CERT="+nodeCert, "CONFIG_GRPC_XDS_CLIENT_TLS_KEY="+nodeKey,
		"CONFIG_GRPC_XDS_SERVER_TLS_CACERT="+ca.File, "CONFIG_GRPC_XDS_SERVER_TLS_SAN=xds.internal")...)
	waitXDSServing(t, p)
	c := dialRLS(t, p.GRPC)
	if got := codeList(c.sequence(4, "shop", desc("user", "a"))...); got != "[OK OK OK OVER_LIMIT]" {
		t.Fatalf("rules over mutual TLS, 3 an hour: %s", got)
	}
	if cn, _ := clientCN.Load().(string); cn != "ratelimit node" {
		t.Fatalf("the management server saw client certificate %q, want the node's", cn)
	}
}
