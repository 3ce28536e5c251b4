package daemon

import (
	"context"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// grpcMetrics counts and times every RPC by service, method and status code.
type grpcMetrics struct {
	handled *prometheus.CounterVec
	seconds *prometheus.HistogramVec
	// refused counts calls and connections refused before any handler
	// runs, by reason.
	refused *prometheus.CounterVec
}

func newGRPCMetrics(reg prometheus.Registerer) *grpcMetrics {
	m := &grpcMetrics{
		handled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "plumb_grpc_server_handled_total",
			Help: "RPCs completed, by service, method and status code.",
		}, []string{"grpc_service", "grpc_method", "grpc_code"}),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "plumb_grpc_server_handling_seconds",
			Help:    "RPC handling time, by service and method.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 12),
		}, []string{"grpc_service", "grpc_method"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "plumb_grpc_server_refused_total",
			Help: "Calls refused before a message was read (unauthenticated, bad_tenant_header) and connections closed over a limit (peer_connections, total_connections).",
		}, []string{"reason"}),
	}
	reg.MustRegister(m.handled, m.seconds, m.refused)
	return m
}

// refusedCall counts a call the tap handle refused, by its code.
func (m *grpcMetrics) refusedCall(err error) {
	reason := "bad_tenant_header"
	if status.Code(err) == codes.Unauthenticated {
		reason = "unauthenticated"
	}
	m.refused.WithLabelValues(reason).Inc()
}

func (m *grpcMetrics) observe(fullMethod string, start time.Time, err error) {
	svc, method := splitMethod(fullMethod)
	m.handled.WithLabelValues(svc, method, status.Code(err).String()).Inc()
	m.seconds.WithLabelValues(svc, method).Observe(time.Since(start).Seconds())
}

func (m *grpcMetrics) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	start := time.Now()
	resp, err := h(ctx, req)
	m.observe(info.FullMethod, start, err)
	return resp, err
}

func (m *grpcMetrics) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	start := time.Now()
	err := h(srv, ss)
	m.observe(info.FullMethod, start, err)
	return err
}

// splitMethod turns "/pkg.Service/Method" into ("pkg.Service", "Method").
func splitMethod(full string) (string, string) {
	full = strings.TrimPrefix(full, "/")
	if i := strings.LastIndex(full, "/"); i >= 0 {
		return full[:i], full[i+1:]
	}
	return "unknown", full
}
