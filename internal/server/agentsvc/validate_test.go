package agentsvc_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/server"
	"github.com/plumbhq/plumb/internal/server/agentsvc"
	"github.com/plumbhq/plumb/pkg/model/modeltest"
)

// Malformed Run requests are INVALID_ARGUMENT before run_started, with a
// field violation naming the bad field (docs/agent-core.md §10.1; scenario 47 is
// "client tool named read_file").
func TestRunValidation(t *testing.T) {
	e := newEnv(t, withService(func(c *agentsvc.Config) {
		c.MaxIterations, c.RunTimeout, c.Models = 50, time.Hour, []string{"smart"}
	}))
	manyKeys := map[string]string{}
	for i := range 65 {
		manyKeys[fmt.Sprintf("k%d", i)] = "v"
	}
	tool := func(name, params string) []*plumbv1.ClientTool {
		return []*plumbv1.ClientTool{{Name: name, ParametersJson: params}}
	}
	tests := []struct {
		name  string
		edit  func(*plumbv1.RunRequest)
		field string
		msg   string
	}{
		{"empty input", func(r *plumbv1.RunRequest) { r.Input = nil }, "input", "input is empty"},
		{"blank message", func(r *plumbv1.RunRequest) { r.Input = append(r.Input, &plumbv1.InputMessage{Content: " "}) }, "input[1].content", "empty"},
		{"too many metadata keys", func(r *plumbv1.RunRequest) { r.Metadata = manyKeys }, "metadata", "65 keys"},
		{"bad metadata key", func(r *plumbv1.RunRequest) { r.Metadata = map[string]string{"Tenant": "a"} }, `metadata["Tenant"]`, "[a-z0-9._/-]{1,63}"},
		{"metadata key too long", func(r *plumbv1.RunRequest) { r.Metadata = map[string]string{strings.Repeat("k", 64): "a"} }, `metadata["` + strings.Repeat("k", 64) + `"]`, "must match"},
		{"metadata value too long", func(r *plumbv1.RunRequest) { r.Metadata = map[string]string{"tenant": strings.Repeat("é", 257)} }, `metadata["tenant"]`, "257 characters"},
		{"47 client tool named read_file", func(r *plumbv1.RunRequest) { r.ClientTools = tool("read_file", "") }, "client_tools[0].name", "clashes with a server tool"},
		{"client tool clashing with a registry tool", func(r *plumbv1.RunRequest) { r.ClientTools = tool("echo", "") }, "client_tools[0].name", "clashes"},
		{"client tool bad name", func(r *plumbv1.RunRequest) { r.ClientTools = tool("get location", "") }, "client_tools[0].name", "^[A-Za-z0-9_-]{1,64}$"},
		{"client tool declared twice", func(r *plumbv1.RunRequest) {
			r.ClientTools = append(tool("loc", ""), tool("loc", "")...)
		}, "client_tools[1].name", "declared twice"},
		{"client tool schema not JSON", func(r *plumbv1.RunRequest) { r.ClientTools = tool("loc", "{") }, "client_tools[0].parameters_json", "not a JSON object"},
		{"client tool schema not an object", func(r *plumbv1.RunRequest) { r.ClientTools = tool("loc", `{"type":"string"}`) }, "client_tools[0].parameters_json", `"object"`},
		{"client tool schema invalid", func(r *plumbv1.RunRequest) {
			r.ClientTools = tool("loc", `{"type":"object","properties":{"a":{"type":"frob"}}}`)
		}, "client_tools[0].parameters_json", "invalid schema"},
		{"unknown agent", func(r *plumbv1.RunRequest) { r.Agent = "nope" }, "agent", "known agents: main, plan"},
		{"subagent named as agent", func(r *plumbv1.RunRequest) { r.Agent = "explore" }, "agent", "unknown agent"},
		{"unknown model", func(r *plumbv1.RunRequest) { r.Model = "huge" }, "model", "known models: smart"},
		{"negative max_iterations", func(r *plumbv1.RunRequest) { r.MaxIterations = -1 }, "max_iterations", "negative"},
		{"max_iterations above the cap", func(r *plumbv1.RunRequest) { r.MaxIterations = 51 }, "max_iterations", "server limit 50"},
		{"negative timeout", func(r *plumbv1.RunRequest) { r.Timeout = durationpb.New(-time.Second) }, "timeout", "positive"},
		{"timeout above the cap", func(r *plumbv1.RunRequest) { r.Timeout = durationpb.New(2 * time.Hour) }, "timeout", "server limit"},
		{"empty file path", func(r *plumbv1.RunRequest) { r.Files = map[string]string{"": "x"} }, "files", "empty path"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := runReq("", "hi")
			tt.edit(req)
			evs, err := e.run(req)
			wantStatus(t, err, codes.InvalidArgument, server.ReasonInvalidArgument)
			if len(evs) != 0 {
				t.Errorf("events before the error: %v", kinds(evs, false))
			}
			if f := fields(err); !slices.Contains(f, tt.field) {
				t.Errorf("field violations %v, want %s", f, tt.field)
			}
			if !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("message %q does not mention %q", err.Error(), tt.msg)
			}
		})
	}
	if n := len(e.srv.AllRequests()); n != 0 {
		t.Errorf("%d model requests for invalid runs", n)
	}
	// Every problem is reported at once.
	req := runReq("", "hi")
	req.Metadata, req.MaxIterations = map[string]string{"BAD": "x"}, -1
	_, err := e.run(req)
	if f := fields(err); !slices.Equal(f, []string{`metadata["BAD"]`, "max_iterations"}) {
		t.Errorf("violations %v", f)
	}
}

// Errors the runtime finds before run_started map through server.Status:
// an unknown thread id is NOT_FOUND, bad seed files INVALID_ARGUMENT.
func TestRunRuntimeErrors(t *testing.T) {
	e := newEnv(t)
	_, err := e.run(runReq("01NOSUCHTHREAD", "hi"))
	wantStatus(t, err, codes.NotFound, server.ReasonThreadNotFound)

	req := runReq("", "hi")
	req.Files = map[string]string{"/../x": "x"}
	_, err = e.run(req)
	wantStatus(t, err, codes.InvalidArgument, server.ReasonInvalidArgument)

	// Valid client tools and limits within the caps start.
	e.srv.Script("main", modeltest.Text("ok"))
	req = runReq("", "hi")
	req.ClientTools = []*plumbv1.ClientTool{{Name: "get_location"}}
	req.MaxIterations, req.Timeout = 3, durationpb.New(time.Minute)
	e.mustRun(req)
}

// Without configured limits the caps are the runtime's defaults (200
// iterations, 30m), not "anything goes": a request above them is
// INVALID_ARGUMENT naming the cap, and one at the caps starts.
func TestRunLimitsCappedByDefault(t *testing.T) {
	e := newEnv(t) // no MaxIterations or RunTimeout: agentd without a limits block
	tests := []struct {
		name  string
		edit  func(*plumbv1.RunRequest)
		field string
		msg   string
	}{
		{"max_iterations", func(r *plumbv1.RunRequest) { r.MaxIterations = 1_000_000 }, "max_iterations", "max_iterations 1000000 is above the server limit 200"},
		{"max_iterations one above", func(r *plumbv1.RunRequest) { r.MaxIterations = 201 }, "max_iterations", "server limit 200"},
		{"timeout", func(r *plumbv1.RunRequest) { r.Timeout = durationpb.New(100 * time.Hour) }, "timeout", "timeout 100h0m0s is above the server limit 30m0s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := runReq("", "hi")
			tt.edit(req)
			evs, err := e.run(req)
			wantStatus(t, err, codes.InvalidArgument, server.ReasonInvalidArgument)
			if len(evs) != 0 {
				t.Errorf("events before the error: %v", kinds(evs, false))
			}
			if f := fields(err); !slices.Equal(f, []string{tt.field}) {
				t.Errorf("field violations %v, want %s", f, tt.field)
			}
			if !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("message %q does not mention %q", err.Error(), tt.msg)
			}
		})
	}
	e.srv.Script("main", modeltest.Text("ok"))
	req := runReq("", "hi")
	req.MaxIterations, req.Timeout = 200, durationpb.New(30*time.Minute)
	checkStream(t, e.mustRun(req), 1)
}
