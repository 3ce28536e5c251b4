package tracingtest

import (
	"context"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	collectorpb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// Collector is an OTLP trace receiver.
type Collector struct {
	collectorpb.UnimplementedTraceServiceServer
	// Endpoint is the receiver's URL, for OTEL_EXPORTER_OTLP_ENDPOINT.
	Endpoint string

	mu    sync.Mutex
	spans map[string][]*tracepb.Span
}

// Start serves OTLP over protocol ("grpc" or "http/protobuf") until the
// test ends.
func Start(t testing.TB, protocol string) *Collector {
	t.Helper()
	c := &Collector{}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c.Endpoint = "http://" + lis.Addr().String()
	if protocol == "grpc" {
		srv := grpc.NewServer()
		collectorpb.RegisterTraceServiceServer(srv, c)
		go func() { _ = srv.Serve(lis) }()
		t.Cleanup(srv.Stop)
		return c
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/traces", c.serveHTTP)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(func() { srv.Close() })
	return c
}

func (c *Collector) serveHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	req := &collectorpb.ExportTraceServiceRequest{}
	if err == nil {
		err = proto.Unmarshal(body, req)
	}
	if err != nil || r.Header.Get("Content-Type") != "application/x-protobuf" {
		http.Error(w, "bad export", http.StatusBadRequest)
		return
	}
	c.add(req)
	w.Header().Set("Content-Type", "application/x-protobuf")
	b, _ := proto.Marshal(&collectorpb.ExportTraceServiceResponse{})
	_, _ = w.Write(b)
}

// Export implements the OTLP gRPC trace service.
func (c *Collector) Export(_ context.Context, req *collectorpb.ExportTraceServiceRequest) (*collectorpb.ExportTraceServiceResponse, error) {
	c.add(req)
	return &collectorpb.ExportTraceServiceResponse{}, nil
}

func (c *Collector) add(req *collectorpb.ExportTraceServiceRequest) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.spans == nil {
		c.spans = map[string][]*tracepb.Span{}
	}
	for _, rs := range req.GetResourceSpans() {
		var service string
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == "service.name" {
				service = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			c.spans[service] = append(c.spans[service], ss.GetSpans()...)
		}
	}
}

// Spans returns the spans received from service (by its service.name).
func (c *Collector) Spans(service string) []*tracepb.Span {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*tracepb.Span(nil), c.spans[service]...)
}

// Services lists the service names spans were received from.
func (c *Collector) Services() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for s := range c.spans {
		out = append(out, s)
	}
	return out
}

// Named returns the spans of spans called name.
func Named(spans []*tracepb.Span, name string) []*tracepb.Span {
	var out []*tracepb.Span
	for _, s := range spans {
		if s.GetName() == name {
			out = append(out, s)
		}
	}
	return out
}
