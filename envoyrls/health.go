package envoyrls

import (
	"context"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// Health answers grpc.health.v1.Health/Check for the server as a whole
// (service "") and for the rate limit service by name: SERVING while the
// node is ready (as /readyz), NOT_SERVING otherwise.
type Health struct {
	healthpb.UnimplementedHealthServer
	Ready func() bool
}

// Check reports the serving status of a service.
func (h *Health) Check(ctx context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	switch req.GetService() {
	case "", rlsv3.RateLimitService_ServiceDesc.ServiceName:
	default:
		return nil, status.Errorf(codes.NotFound, "unknown service %q: this server has \"\" and %q", req.GetService(), rlsv3.RateLimitService_ServiceDesc.ServiceName)
	}
	st := healthpb.HealthCheckResponse_SERVING
	if h.Ready != nil && !h.Ready() {
		st = healthpb.HealthCheckResponse_NOT_SERVING
	}
	return &healthpb.HealthCheckResponse{Status: st}, nil
}
