package agentsvc_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/proto"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/server"
	"github.com/plumbhq/plumb/internal/server/agentsvc"
)

// Errors that repeat huge user strings still reach a client whose HTTP/2
// header list is capped at 8 KiB (grpcio's default) with their own code:
// agentsvc.Status bounds every status, and validation quotes user strings
// once, cut at 200 characters.
func TestErrorsFitDefaultHeaderLimits(t *testing.T) {
	e := newEnv(t)
	lis := bufconn.Listen(1 << 20)
	gs := grpc.NewServer()
	plumbv1.RegisterAgentServiceServer(gs, e.svc)
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = gs.Serve(lis)
	}()
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithMaxHeaderListSize(8192))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		gs.Stop()
		<-served
	})
	c := plumbv1.NewAgentServiceClient(conn)

	huge := strings.Repeat("x", 10000)
	badKeys := map[string]string{}
	for i := range 64 {
		badKeys[fmt.Sprintf("%03d-%s", i, strings.Repeat("K", 300))] = strings.Repeat("v", 300)
	}
	run := func(req *plumbv1.RunRequest) error {
		s, err := c.Run(e.ctx(), req)
		if err != nil {
			return err
		}
		_, err = recvAll(s)
		return err
	}
	tests := []struct {
		name   string
		call   func() error
		code   codes.Code
		reason string
		quoted string // a user string the message must show cut, if any
	}{
		{"unknown 10 KB thread id", func() error {
			_, err := c.GetThread(e.ctx(), &plumbv1.GetThreadRequest{ThreadId: huge})
			return err
		}, codes.NotFound, agentsvc.ReasonThreadNotFound, ""},
		{"run on an unknown 10 KB thread id", func() error { return run(runReq(huge, "hi")) }, codes.NotFound, agentsvc.ReasonThreadNotFound, ""},
		{"unknown 10 KB agent name", func() error {
			req := runReq("", "hi")
			req.Agent = huge
			return run(req)
		}, codes.InvalidArgument, agentsvc.ReasonInvalidArgument, huge},
		{"64 bad 300-character metadata keys", func() error {
			req := runReq("", "hi")
			req.Metadata = badKeys
			return run(req)
		}, codes.InvalidArgument, agentsvc.ReasonInvalidArgument, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			wantStatus(t, err, tt.code, tt.reason)
			st := status.Convert(err)
			if size := proto.Size(st.Proto()); size > server.MaxStatusBytes {
				t.Errorf("status of %d bytes, want at most %d", size, server.MaxStatusBytes)
			}
			if tt.quoted != "" && (strings.Contains(st.Message(), tt.quoted[:201]) || !strings.Contains(st.Message(), tt.quoted[:200]+`"…`)) {
				t.Errorf("message %q does not quote the user string cut at 200 characters", st.Message())
			}
		})
	}
}
