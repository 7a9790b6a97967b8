package server

import (
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// registerHealth serves the standard gRPC health service
// (grpc.health.v1.Health) on the client port, as etcd does, for
// grpc_health_probe, Kubernetes' gRPC probes and gRPC clients' health
// checking. Like etcd's, it says whether the process serves the API
// (SERVING from start to Stop, NOT_SERVING once stopping), not whether the
// cluster has a quorum: a liveness probe must not restart every member of a
// cluster that lost one. /health and /readyz answer the quorum questions.
func registerHealth(s *grpc.Server) *health.Server {
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(s, hs)
	return hs
}
