package httpapi

import (
	"context"
	"net"
	"net/http/httptest"
	"testing"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/plumbhq/plumb/gen"
	plumbv1gw "github.com/plumbhq/plumb/gen/gateway/plumb/v1"
	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
)

// testToken is the one bearer token the test APIs accept.
const testToken = "test-token"

// bothServices is what the test APIs serve: AgentService and
// SandboxService, with their gateways and OpenAPI documents.
func bothServices() Service {
	return Service{
		Services: []protoreflect.ServiceDescriptor{
			plumbv1.File_plumb_v1_agent_proto.Services().ByName("AgentService"),
			plumbv1.File_plumb_v1_sandbox_proto.Services().ByName("SandboxService"),
		},
		Register: func(ctx context.Context, mux *runtime.ServeMux, conn *grpc.ClientConn) error {
			if err := plumbv1gw.RegisterAgentServiceHandler(ctx, mux, conn); err != nil {
				return err
			}
			return plumbv1gw.RegisterSandboxServiceHandler(ctx, mux, conn)
		},
		OpenAPI: gen.SandboxOpenAPI,
	}
}

// newTestAPI serves the HTTP API over a real HTTP server, in front of a
// gRPC server on an in-memory listener (as internal/daemon does) that
// register fills; edit, if set, changes the handler's config. It returns
// the API's base URL.
func newTestAPI(t *testing.T, register func(*grpc.Server), edit func(*Config), opts ...grpc.ServerOption) string {
	t.Helper()
	srv := grpc.NewServer(opts...)
	if register != nil {
		register(srv)
	}
	lis := bufconn.Listen(1 << 20)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("passthrough:///test",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	cfg := Config{
		Service: bothServices(),
		Conn:    conn,
		Check: func(tok string) error {
			if tok != testToken {
				return status.Error(codes.Unauthenticated, "bad token")
			}
			return nil
		},
		Logger: zaptest.NewLogger(t),
	}
	if edit != nil {
		edit(&cfg)
	}
	h, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)
	return hs.URL
}
