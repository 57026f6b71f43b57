package envoyrls

import (
	"context"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// PeerHealthName is the service name envoyproxy/ratelimit's health
// service answers for (its HealthChecker's), which probes and Envoy
// health checks written for it name.
const PeerHealthName = "ratelimit"

// healthWatchInterval is how often a Watch stream looks at the node's
// health for a change to send (readiness follows Raft and the rules,
// which say nothing when they change); the start of a drain is sent at
// once.
const healthWatchInterval = 250 * time.Millisecond

// Health answers grpc.health.v1.Health for the server as a whole
// (service ""), for the rate limit service by its full name and by the
// peer's name ("ratelimit"): SERVING while Ready, NOT_SERVING otherwise.
type Health struct {
	healthpb.UnimplementedHealthServer
	Ready func() bool
	// Stop, closed when the node begins to drain (Ready is false by
	// then), ends Watch streams once they have said NOT_SERVING, so that
	// they do not hold the server's graceful stop.
	Stop <-chan struct{}
}

func knownHealth(service string) bool {
	switch service {
	case "", PeerHealthName, rlsv3.RateLimitService_ServiceDesc.ServiceName:
		return true
	}
	return false
}

func (h *Health) status() healthpb.HealthCheckResponse_ServingStatus {
	if h.Ready != nil && !h.Ready() {
		return healthpb.HealthCheckResponse_NOT_SERVING
	}
	return healthpb.HealthCheckResponse_SERVING
}

// Check reports the serving status of a service.
func (h *Health) Check(ctx context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	if !knownHealth(req.GetService()) {
		return nil, status.Errorf(codes.NotFound, "unknown service %q: this server has \"\", %q and %q", req.GetService(),
			PeerHealthName, rlsv3.RateLimitService_ServiceDesc.ServiceName)
	}
	return &healthpb.HealthCheckResponse{Status: h.status()}, nil
}

// Watch sends the serving status of a service, then each change of it,
// as grpc.health.v1 says: SERVICE_UNKNOWN for a name this server does not
// have (the stream stays open). When the node drains, the stream says
// NOT_SERVING and ends with UNAVAILABLE.
func (h *Health) Watch(req *healthpb.HealthCheckRequest, stream healthpb.Health_WatchServer) error {
	known := knownHealth(req.GetService())
	last := healthpb.HealthCheckResponse_ServingStatus(-1)
	t := time.NewTicker(healthWatchInterval)
	defer t.Stop()
	for {
		// Stop first: a drain that has begun is seen by the status below.
		stopping := false
		select {
		case <-h.Stop:
			stopping = true
		default:
		}
		st := healthpb.HealthCheckResponse_SERVICE_UNKNOWN
		if known {
			st = h.status()
		}
		if st != last {
			if err := stream.Send(&healthpb.HealthCheckResponse{Status: st}); err != nil {
				return err
			}
			last = st
		}
		if stopping {
			return status.Error(codes.Unavailable, "server is shutting down")
		}
		select {
		case <-stream.Context().Done():
			return status.FromContextError(stream.Context().Err()).Err()
		case <-h.Stop:
		case <-t.C:
		}
	}
}
