package envoyrls

// The xDS client of the drop-in (CONFIG_TYPE=GRPC_XDS_SOTW): as
// envoyproxy/ratelimit does, the node subscribes to every
// RateLimitConfig resource of a management server over the Aggregated
// Discovery Service, state of the world. Each response is the whole rule
// set: it is loaded as a set of rule files is and put in force at once
// (one pointer swap), then ACKed; one that does not decode or load is
// NACKed with the reason and the rules in force stay. When the stream
// ends the client reconnects after a backoff, subscribing again with the
// version in force, so that a server with nothing newer sends nothing.

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"
)

// RateLimitConfigType is the type URL of the rule resources.
const RateLimitConfigType = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig"

// XDSBackoff is the wait before connecting again after the stream to the
// management server ended, computed as envoyproxy/ratelimit computes it
// (XDS_CLIENT_BACKOFF_*): Initial × Factor^attempt, with Jitter a random
// point between Initial and that, never below Initial nor above Max. A
// Factor below 1 (the peer's default, 0.5) keeps every wait at Initial.
type XDSBackoff struct {
	Initial, Max time.Duration
	Factor       float64
	Jitter       bool
}

// Delay is the wait before reconnection number attempt (0 the first);
// rnd returns a number in [0, 1).
func (b XDSBackoff) Delay(attempt int, rnd func() float64) time.Duration {
	lo, hi := b.Initial, b.Max
	if lo <= 0 {
		lo = 100 * time.Millisecond
	}
	if hi <= 0 {
		hi = 10 * time.Second
	}
	if lo >= hi {
		return hi
	}
	f := b.Factor
	if f <= 0 {
		f = 2
	}
	d := float64(lo) * math.Pow(f, float64(attempt))
	if b.Jitter {
		d = rnd()*(d-float64(lo)) + float64(lo)
	}
	switch {
	case d < float64(lo):
		return lo
	case d > float64(hi):
		return hi
	}
	return time.Duration(d)
}

// XDSSettings are the client's settings (the peer's CONFIG_GRPC_XDS_*,
// XDS_CLIENT_* variables).
type XDSSettings struct {
	// ServerURL is the management server's gRPC target (host:port).
	ServerURL string
	// NodeID and NodeMetadata identify this node to the server, which
	// keys its snapshots by the node ID.
	NodeID       string
	NodeMetadata map[string]string
	// Headers are added to the stream's gRPC metadata.
	Headers map[string]string
	// TLS, when set, secures the connection; nil: plaintext.
	TLS *tls.Config
	// ConnectRetry is the interval between two connection attempts while
	// the server cannot be reached (±50 %); 0: gRPC's default backoff.
	ConnectRetry time.Duration
	// MaxRecvMsgSize bounds a response; 0: gRPC's default (4 MiB).
	MaxRecvMsgSize int
	// Backoff is the wait before reconnecting after the stream ended.
	Backoff XDSBackoff
	// Load says how the pushed rules load (MergeDomains, QuotaMode).
	Load LoadOptions
}

// XDSClient keeps the node subscribed to the management server's rules.
type XDSClient struct {
	s        XDSSettings
	log      *slog.Logger
	onConfig func(cfg *Config, version string, err error)
	node     *corev3.Node

	mu    sync.Mutex
	acked string // version_info of the last response put in force
	// refused is the version and reason of the last response refused:
	// the same again is answered after nackRepeatDelay and not reported.
	refused string
}

// nackRepeatDelay paces the NACKs of a response sent again unchanged: a
// management server that resends what was refused until it changes (as
// go-control-plane's snapshot cache does) gets one NACK a second, not a
// loop as fast as the network goes. A new version waits at most this long.
const nackRepeatDelay = time.Second

// NewXDSClient returns a client that calls onConfig with each response's
// rules and version (err set, cfg nil, when they are refused: the caller
// keeps the rules in force). onConfig is called from Run's goroutine, one
// call at a time.
func NewXDSClient(s XDSSettings, log *slog.Logger, onConfig func(cfg *Config, version string, err error)) *XDSClient {
	md := map[string]*structpb.Value{}
	for k, v := range s.NodeMetadata {
		md[k] = structpb.NewStringValue(v)
	}
	return &XDSClient{s: s, log: log, onConfig: onConfig,
		node: &corev3.Node{Id: s.NodeID, Metadata: &structpb.Struct{Fields: md}, UserAgentName: "sluice"}}
}

// AckedVersion returns the version_info of the rules in force, "" before
// any.
func (c *XDSClient) AckedVersion() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.acked
}

// Run keeps a stream open to the server until ctx is done, reconnecting
// after the backoff whenever it ends.
func (c *XDSClient) Run(ctx context.Context) {
	attempt := 0
	for {
		received, err := c.session(ctx)
		if ctx.Err() != nil {
			return
		}
		if received {
			attempt = 0 // the server answered: start the backoff over
		}
		d := c.s.Backoff.Delay(attempt, rand.Float64)
		attempt++
		c.log.Warn("xds: stream to the management server ended: the rules in force stay; reconnecting", "server", c.s.ServerURL, "err", err, "retry_in", d)
		select {
		case <-ctx.Done():
			return
		case <-time.After(d):
		}
	}
}

// session runs one stream: subscribe, then load and answer each response
// until the stream fails. received says whether a response came.
func (c *XDSClient) session(ctx context.Context) (received bool, err error) {
	creds := insecure.NewCredentials()
	if c.s.TLS != nil {
		creds = credentials.NewTLS(c.s.TLS)
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(creds)}
	if c.s.ConnectRetry > 0 {
		bc := backoff.Config{BaseDelay: c.s.ConnectRetry, Multiplier: 1, Jitter: 0.5, MaxDelay: c.s.ConnectRetry}
		opts = append(opts, grpc.WithConnectParams(grpc.ConnectParams{Backoff: bc, MinConnectTimeout: 20 * time.Second}))
	}
	if c.s.MaxRecvMsgSize > 0 {
		opts = append(opts, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(c.s.MaxRecvMsgSize)))
	}
	conn, err := grpc.NewClient(c.s.ServerURL, opts...)
	if err != nil {
		return false, err
	}
	defer conn.Close()
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if len(c.s.Headers) > 0 {
		sctx = metadata.NewOutgoingContext(sctx, metadata.New(c.s.Headers))
	}
	// WaitForReady: while the server cannot be reached, the stream waits
	// for it, the connection retried every ConnectRetry.
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(sctx, grpc.WaitForReady(true))
	if err != nil {
		return false, err
	}
	// A new stream starts with the version in force and no nonce (nonces
	// belong to a stream).
	if err := stream.Send(c.request(c.AckedVersion(), "", nil)); err != nil {
		return false, recvErr(stream, err)
	}
	c.log.Info("xds: subscribed to the management server", "server", c.s.ServerURL, "node_id", c.s.NodeID, "type", RateLimitConfigType)
	for {
		resp, err := stream.Recv()
		if err != nil {
			return received, err
		}
		received = true
		req, repeated := c.handle(resp)
		if repeated {
			select {
			case <-ctx.Done():
				return received, ctx.Err()
			case <-time.After(nackRepeatDelay):
			}
		}
		if err := stream.Send(req); err != nil {
			return received, recvErr(stream, err)
		}
	}
}

// recvErr is the stream's own error when a Send failed with io.EOF (the
// reason is read with Recv).
func recvErr(stream grpc.ClientStream, err error) error {
	if rerr := stream.RecvMsg(new(discoveryv3.DiscoveryResponse)); rerr != nil {
		return rerr
	}
	return err
}

// handle loads a response's rules and returns the request that answers
// it: an ACK (its version), or a NACK (the version in force and the
// reason). repeated says the response is one refused just before, sent
// again: it is not reported again, and its NACK waits nackRepeatDelay.
func (c *XDSClient) handle(resp *discoveryv3.DiscoveryResponse) (req *discoveryv3.DiscoveryRequest, repeated bool) {
	cfg, err := c.decode(resp)
	version := resp.GetVersionInfo()
	if err != nil {
		key := version + "\x00" + err.Error()
		c.mu.Lock()
		repeated, c.refused = c.refused == key, key
		acked := c.acked
		c.mu.Unlock()
		if !repeated {
			c.onConfig(nil, version, err)
		}
		return c.request(acked, resp.GetNonce(), &rpcstatus.Status{Code: int32(codes.InvalidArgument), Message: err.Error()}), repeated
	}
	c.onConfig(cfg, version, nil)
	c.mu.Lock()
	c.acked, c.refused = version, ""
	c.mu.Unlock()
	return c.request(version, resp.GetNonce(), nil), false
}

// decode reads a response's resources as RateLimitConfigs and loads them.
func (c *XDSClient) decode(resp *discoveryv3.DiscoveryResponse) (*Config, error) {
	if t := resp.GetTypeUrl(); t != RateLimitConfigType {
		return nil, fmt.Errorf("response of type %q: subscribed to %s only", t, RateLimitConfigType)
	}
	list := make([]*rlsconfv3.RateLimitConfig, 0, len(resp.GetResources()))
	var errs []string
	for i, a := range resp.GetResources() {
		var r rlsconfv3.RateLimitConfig
		if err := a.UnmarshalTo(&r); err != nil {
			errs = append(errs, fmt.Sprintf("resource %d (%s): %v", i, a.GetTypeUrl(), err))
			continue
		}
		list = append(list, &r)
	}
	if len(errs) > 0 {
		return nil, errors.New(strings.Join(errs, "; "))
	}
	return ConfigFromXDS(list, c.s.Load)
}

func (c *XDSClient) request(version, nonce string, nack *rpcstatus.Status) *discoveryv3.DiscoveryRequest {
	return &discoveryv3.DiscoveryRequest{Node: c.node, TypeUrl: RateLimitConfigType, VersionInfo: version,
		ResponseNonce: nonce, ErrorDetail: nack}
}
