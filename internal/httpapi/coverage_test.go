package httpapi

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/plumbhq/plumb/gen"
	"github.com/plumbhq/plumb/internal/server"
)

// reasonReached is the reason of the error every method answers in
// TestEveryMethodHasARoute: the call reached the gRPC server's handler.
const reasonReached = "HANDLER_REACHED"

// reachedHandler answers every call, of any method, with its own error:
// FAILED_PRECONDITION, reason HANDLER_REACHED, the full method and whether
// a request message arrived.
func reachedHandler(_ any, ss grpc.ServerStream) error {
	full, _ := grpc.MethodFromServerStream(ss)
	got := "0"
	if err := ss.RecvMsg(&emptypb.Empty{}); err == nil {
		got = "1"
	}
	return server.WithInfo(codes.FailedPrecondition, "reached "+full, reasonReached, map[string]string{"method": full, "received": got})
}

// TestEveryMethodHasARoute walks every method of AgentService and
// SandboxService from the proto descriptors and proves that its HTTP path
// reaches the gRPC handler (the handler's own error comes back, never the
// mux's 404, 405 or 501), with the request message; then every path of
// the OpenAPI documents (the REST-style aliases), and the EventSource
// route, reach the method they name.
func TestEveryMethodHasARoute(t *testing.T) {
	base := newTestAPI(t, nil, nil, grpc.UnknownServiceHandler(reachedHandler))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// reach sends one request and checks it reached full.
	reach := func(t *testing.T, method, url, body string, sse bool, full string) {
		t.Helper()
		var rd io.Reader
		if body != "" {
			rd = strings.NewReader(body)
		}
		req, err := http.NewRequestWithContext(ctx, method, url, rd)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+testToken)
		if sse {
			req.Header.Set("Accept", mimeSSE)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		// An error body, or a newline-delimited stream's error line.
		var e ErrorBody
		var line struct{ Error *ErrorBody }
		if err := json.Unmarshal(b, &line); err == nil && line.Error != nil {
			e = *line.Error
		} else if err := json.Unmarshal(b, &e); err != nil {
			t.Fatalf("%s %s: HTTP %d, not an error body: %s", method, url, resp.StatusCode, b)
		}
		if resp.StatusCode != http.StatusBadRequest || e.Reason != reasonReached || e.Metadata["method"] != full || e.Metadata["received"] != "1" {
			t.Fatalf("%s %s: HTTP %d %s; want the handler of %s, with the request", method, url, resp.StatusCode, b, full)
		}
	}

	methods := map[string]bool{}
	for _, sd := range bothServices().Services {
		ms := sd.Methods()
		if ms.Len() == 0 {
			t.Fatalf("%s has no methods", sd.FullName())
		}
		for i := range ms.Len() {
			m := ms.Get(i)
			full := "/" + string(sd.FullName()) + "/" + string(m.Name())
			methods[full] = true
			t.Run(full, func(t *testing.T) {
				body := "{}"
				if m.IsStreamingClient() {
					body = "{}\n" // one frame
				}
				reach(t, http.MethodPost, base+full, body, false, full)
				if m.IsStreamingServer() {
					reach(t, http.MethodPost, base+full, body, true, full)
				}
			})
		}
	}

	// Every operation of both OpenAPI documents reaches the method it
	// names (operationId "AgentService_ListAgents", "…2" for a second
	// binding).
	opID := regexp.MustCompile(`^(\w+Service)_(\w+?)\d*$`)
	param := regexp.MustCompile(`\{[^}]+\}`)
	for _, doc := range [][]byte{gen.AgentOpenAPI, gen.SandboxOpenAPI} {
		var d struct {
			Paths map[string]map[string]struct {
				OperationID string `json:"operationId"`
			} `json:"paths"`
		}
		if err := json.Unmarshal(doc, &d); err != nil || len(d.Paths) == 0 {
			t.Fatalf("OpenAPI document: %v", err)
		}
		for path, ops := range d.Paths {
			for verb, op := range ops {
				sm := opID.FindStringSubmatch(op.OperationID)
				if sm == nil {
					t.Fatalf("%s %s: operationId %q", verb, path, op.OperationID)
				}
				full := "/plumb.v1." + sm[1] + "/" + sm[2]
				if !methods[full] {
					t.Fatalf("%s %s names %s, which is no method", verb, path, full)
				}
				t.Run(strings.ToUpper(verb)+" "+path, func(t *testing.T) {
					body := ""
					if verb == "post" {
						body = "{}"
					}
					reach(t, strings.ToUpper(verb), base+param.ReplaceAllString(path, "p1"), body, false, full)
				})
			}
		}
	}
	t.Run("GET /v1/threads/{thread_id}/events", func(t *testing.T) {
		reach(t, http.MethodGet, base+"/v1/threads/t1/events", "", true, "/plumb.v1.AgentService/Attach")
	})

	// The check can fail: a path that is no method is the mux's 404.
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/plumb.v1.AgentService/Nope", strings.NewReader("{}"))
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("an unknown method: HTTP %d, want 404", resp.StatusCode)
	}
}
