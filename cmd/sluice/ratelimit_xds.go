package main

// The peer's xDS settings (CONFIG_TYPE=GRPC_XDS_SOTW): CONFIG_GRPC_XDS_*
// and XDS_CLIENT_* with envoyproxy/ratelimit's defaults.

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-rl/sluice/envoyrls"
)

func (e *peerEnv) duration(name, def string) time.Duration {
	v := e.str(name, def)
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		e.errs = append(e.errs, fmt.Sprintf("%s=%q: must be a duration such as 500ms, 10s or 1m", name, v))
	}
	return d
}

// peerXDS reads the xDS client's settings, and notes what is accepted but
// ignored.
func peerXDS(e *peerEnv) (*envoyrls.XDSSettings, []string) {
	var notes []string
	x := &envoyrls.XDSSettings{
		ServerURL:    e.str("CONFIG_GRPC_XDS_SERVER_URL", "localhost:18000"),
		NodeID:       e.str("CONFIG_GRPC_XDS_NODE_ID", "default"),
		NodeMetadata: map[string]string{},
		ConnectRetry: e.duration("CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "3s"),
		Backoff: envoyrls.XDSBackoff{
			Initial: e.duration("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "10s"),
			Max:     e.duration("XDS_CLIENT_BACKOFF_MAX_INTERVAL", "60s"),
			Jitter:  e.flag("XDS_CLIENT_BACKOFF_JITTER", true),
		},
	}
	if v := e.str("XDS_CLIENT_BACKOFF_RANDOM_FACTOR", "0.5"); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f <= 0 {
			e.errs = append(e.errs, fmt.Sprintf("XDS_CLIENT_BACKOFF_RANDOM_FACTOR=%q: must be a number above 0", v))
		}
		x.Backoff.Factor = f
	}
	if v := e.get("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			e.errs = append(e.errs, fmt.Sprintf("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES=%q: must be a number of bytes", v))
		}
		x.MaxRecvMsgSize = n
	}
	// key=value,key=value; as the peer, an entry without '=' is dropped.
	var dropped []string
	for _, kv := range strings.Split(e.get("CONFIG_GRPC_XDS_NODE_METADATA"), ",") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			x.NodeMetadata[k] = v
		} else if strings.TrimSpace(kv) != "" {
			dropped = append(dropped, kv)
		}
	}
	if len(dropped) > 0 {
		notes = append(notes, fmt.Sprintf("CONFIG_GRPC_XDS_NODE_METADATA: entries without '=' are ignored, as by envoyproxy/ratelimit (the form is key=value,key=value): %s", strings.Join(dropped, ",")))
	}
	// key:value,key:value, as the peer's settings read a map.
	if v := e.get("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS"); strings.TrimSpace(v) != "" {
		x.Headers = map[string]string{}
		for i, kv := range strings.Split(v, ",") {
			k, val, ok := strings.Cut(kv, ":")
			if !ok || strings.TrimSpace(k) == "" {
				// Not the entry itself: a header may carry a credential.
				e.errs = append(e.errs, fmt.Sprintf("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS: entry %d has no header name before a ':' (the form is name:value,name:value)", i+1))
				continue
			}
			x.Headers[strings.ToLower(strings.TrimSpace(k))] = val
		}
	}
	if e.flag("CONFIG_GRPC_XDS_SERVER_USE_TLS", false) {
		x.TLS = peerXDSTLS(e)
	}
	return x, notes
}

// peerXDSTLS is the TLS of the connection to the management server: the
// client certificate (CONFIG_GRPC_XDS_CLIENT_TLS_CERT and _KEY), the CA
// that signs the server's, added to the system's
// (CONFIG_GRPC_XDS_SERVER_TLS_CACERT), and the name it must carry
// (CONFIG_GRPC_XDS_SERVER_TLS_SAN, else the URL's host).
func peerXDSTLS(e *peerEnv) *tls.Config {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: e.get("CONFIG_GRPC_XDS_SERVER_TLS_SAN")}
	cert, key := e.get("CONFIG_GRPC_XDS_CLIENT_TLS_CERT"), e.get("CONFIG_GRPC_XDS_CLIENT_TLS_KEY")
	switch {
	case cert != "" && key != "":
		kp, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			e.errs = append(e.errs, fmt.Sprintf("CONFIG_GRPC_XDS_CLIENT_TLS_CERT=%q, CONFIG_GRPC_XDS_CLIENT_TLS_KEY=%q: %v", cert, key, err))
		}
		tc.Certificates = []tls.Certificate{kp}
	case cert != "" || key != "":
		e.errs = append(e.errs, "CONFIG_GRPC_XDS_CLIENT_TLS_CERT and CONFIG_GRPC_XDS_CLIENT_TLS_KEY: set both (a PEM certificate and its key) or neither")
	}
	if ca := e.get("CONFIG_GRPC_XDS_SERVER_TLS_CACERT"); ca != "" {
		pool, err := x509.SystemCertPool()
		if err != nil || pool == nil {
			pool = x509.NewCertPool()
		}
		b, err := os.ReadFile(ca)
		if err == nil && !pool.AppendCertsFromPEM(b) {
			err = fmt.Errorf("no PEM certificate in the file")
		}
		if err != nil {
			e.errs = append(e.errs, fmt.Sprintf("CONFIG_GRPC_XDS_SERVER_TLS_CACERT=%q: %v", ca, err))
		}
		tc.RootCAs = pool
	}
	return tc
}
