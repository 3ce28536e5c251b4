package e2e

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/daemon/daemontest"
	"github.com/plumbhq/plumb/internal/httpapi"
	"github.com/plumbhq/plumb/pkg/model/modeltest"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"
)

// call POSTs body to the HTTP API at base+path with the headers hdr and
// returns the response and its body.
func call(t *testing.T, c *http.Client, base, path string, hdr map[string]string, body string) (*http.Response, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

// apiError decodes an error body and checks its HTTP status, code and
// reason ("" = any).
func apiError(t *testing.T, resp *http.Response, body []byte, httpStatus int, code int32, reason string) httpapi.ErrorBody {
	t.Helper()
	var e httpapi.ErrorBody
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatalf("error body is not JSON: %v: %s", err, body)
	}
	if resp.StatusCode != httpStatus || e.Code != code || (reason != "" && e.Reason != reason) || e.Status == "" || e.Metadata == nil || e.FieldViolations == nil {
		t.Fatalf("HTTP %d %s, want HTTP %d code %d reason %q", resp.StatusCode, body, httpStatus, code, reason)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("error Content-Type = %q", ct)
	}
	return e
}

func bearer(tok string) map[string]string { return map[string]string{"Authorization": "Bearer " + tok} }

// TestHTTPUnary: unary calls over HTTP/JSON on both daemons, with and
// without a token, a bad request, an unknown field, client streams, a
// body over the limit, and the OpenAPI documents.
func TestHTTPUnary(t *testing.T) {
	s := start(t)
	c := &http.Client{}
	agentd, sandboxd := "http://"+s.proc.HTTPAddr, "http://"+s.sandboxdHTTP

	resp, body := call(t, c, agentd, "/plumb.v1.AgentService/ListAgents", bearer(agentdToken), `{}`)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("ListAgents: HTTP %d %s", resp.StatusCode, body)
	}
	var agents plumbv1.ListAgentsResponse
	if err := protojson.Unmarshal(body, &agents); err != nil || len(agents.GetAgents()) == 0 {
		t.Fatalf("ListAgents = %s (%v)", body, err)
	}
	if !strings.Contains(string(body), `"agents"`) {
		t.Fatalf("ListAgents body = %s", body)
	}

	// No token, a wrong one, and a non-bearer one: 401 with code 16.
	for name, hdr := range map[string]map[string]string{
		"none": nil, "wrong": bearer("nope"), "basic": {"Authorization": "Basic Zm9vOmJhcg=="},
	} {
		t.Run("unauthenticated/"+name, func(t *testing.T) {
			resp, body := call(t, c, agentd, "/plumb.v1.AgentService/ListAgents", hdr, `{}`)
			apiError(t, resp, body, http.StatusUnauthorized, 16, "")
			if !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
				t.Errorf("WWW-Authenticate = %q", resp.Header.Get("WWW-Authenticate"))
			}
			if strings.Contains(string(body), agentdToken) {
				t.Error("the error names the token")
			}
		})
	}
	// sandboxd's API takes sandboxd's token only.
	resp, body = call(t, c, sandboxd, "/plumb.v1.SandboxService/ListSandboxes", bearer(agentdToken), `{}`)
	apiError(t, resp, body, http.StatusUnauthorized, 16, "")
	resp, body = call(t, c, sandboxd, "/plumb.v1.SandboxService/DescribeWorker", bearer(sandboxdToken), `{}`)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"runtimes"`) {
		t.Fatalf("DescribeWorker: HTTP %d %s", resp.StatusCode, body)
	}

	// A REST-style alias (proto/plumb/v1/http.yaml).
	gresp, gbody := get(t, sandboxd+"/v1/worker", http.Header{"Authorization": {"Bearer " + sandboxdToken}})
	if gresp.StatusCode != http.StatusOK || !strings.Contains(gbody, `"runtimes"`) {
		t.Fatalf("GET /v1/worker: HTTP %d %s", gresp.StatusCode, gbody)
	}

	// A bad request: 400 with the field violations of the service.
	resp, body = call(t, c, agentd, "/plumb.v1.AgentService/CreateThread", bearer(agentdToken), `{"metadata":{"BAD KEY":"x"}}`)
	e := apiError(t, resp, body, http.StatusBadRequest, 3, "INVALID_ARGUMENT")
	if len(e.FieldViolations) != 1 || !strings.HasPrefix(e.FieldViolations[0].Field, "metadata[") {
		t.Fatalf("field violations = %+v", e.FieldViolations)
	}
	// A stream refused before it starts is an ordinary error response.
	resp, body = call(t, c, agentd, "/plumb.v1.AgentService/Run", map[string]string{"Authorization": "Bearer " + agentdToken, "Accept": "text/event-stream"}, `{"input":[]}`)
	e = apiError(t, resp, body, http.StatusBadRequest, 3, "INVALID_ARGUMENT")
	if !slices.ContainsFunc(e.FieldViolations, func(v httpapi.FieldViolation) bool { return v.Field == "input" }) {
		t.Fatalf("Run's field violations = %+v", e.FieldViolations)
	}
	// An unknown field is refused, not dropped.
	resp, body = call(t, c, agentd, "/plumb.v1.AgentService/CreateThread", bearer(agentdToken), `{"metadta":{}}`)
	apiError(t, resp, body, http.StatusBadRequest, 3, "")
	// Client streams reach their handler (newline-delimited frames):
	// Process's first frame must be a start, and UploadFiles names a
	// sandbox.
	resp, body = call(t, c, sandboxd, "/plumb.v1.SandboxService/Process", map[string]string{"Authorization": "Bearer " + sandboxdToken, "Accept": "text/event-stream"}, "{}\n")
	if e := apiError(t, resp, body, http.StatusBadRequest, 3, ""); !strings.Contains(e.Message, "start") {
		t.Fatalf("Process without a start: %s", body)
	}
	resp, body = call(t, c, sandboxd, "/plumb.v1.SandboxService/UploadFiles", bearer(sandboxdToken), `{"path":"/a","eof":true}`)
	apiError(t, resp, body, http.StatusNotFound, 5, "sandbox_not_found")
	// A body over the method's limit (the default --max-recv-bytes, 4/3
	// for base64, 64 KiB of JSON) is refused before it is read.
	big := `{"metadata":{"k":"` + strings.Repeat("x", 8<<20) + `"}}`
	resp, body = call(t, c, agentd, "/plumb.v1.AgentService/CreateThread", bearer(agentdToken), big)
	apiError(t, resp, body, http.StatusRequestEntityTooLarge, 8, httpapi.ReasonBodyTooLarge)
	// No CORS: a preflight from another origin gets no Access-Control-*
	// header, so a cross-site page cannot send JSON or a token.
	preq, _ := http.NewRequest(http.MethodOptions, agentd+"/plumb.v1.AgentService/ListAgents", nil)
	preq.Header.Set("Origin", "https://evil.example")
	preq.Header.Set("Access-Control-Request-Method", "POST")
	preq.Header.Set("Access-Control-Request-Headers", "authorization, content-type")
	presp, err := c.Do(preq)
	if err != nil {
		t.Fatal(err)
	}
	presp.Body.Close()
	for k := range presp.Header {
		if strings.HasPrefix(k, "Access-Control-") {
			t.Fatalf("a preflight got %s: %v", k, presp.Header)
		}
	}
	// An unknown method.
	resp, body = call(t, c, agentd, "/plumb.v1.AgentService/Nope", bearer(agentdToken), `{}`)
	apiError(t, resp, body, http.StatusNotFound, 5, "")

	// Each daemon serves its OpenAPI document, listing every RPC.
	for _, d := range []struct {
		base    string
		service string
		methods []string
	}{
		{agentd, "plumb.v1.AgentService", methodNames(plumbv1.AgentService_ServiceDesc.Methods, plumbv1.AgentService_ServiceDesc.Streams)},
		{sandboxd, "plumb.v1.SandboxService", methodNames(plumbv1.SandboxService_ServiceDesc.Methods, plumbv1.SandboxService_ServiceDesc.Streams)},
	} {
		resp, err := c.Get(d.base + "/openapi.json")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var doc struct {
			Swagger string                                `json:"swagger"`
			Paths   map[string]map[string]json.RawMessage `json:"paths"`
		}
		if err := json.Unmarshal(b, &doc); err != nil || resp.StatusCode != http.StatusOK || doc.Swagger != "2.0" {
			t.Fatalf("%s/openapi.json: HTTP %d, %v", d.base, resp.StatusCode, err)
		}
		for _, m := range d.methods {
			if _, ok := doc.Paths["/"+d.service+"/"+m]["post"]; !ok {
				t.Errorf("%s/openapi.json has no POST /%s/%s", d.base, d.service, m)
			}
		}
		for p := range doc.Paths {
			if !strings.HasPrefix(p, "/"+d.service+"/") && !strings.HasPrefix(p, "/v1/") {
				t.Errorf("%s/openapi.json has path %s", d.base, p)
			}
		}
	}
}

func methodNames(unary []grpc.MethodDesc, streams []grpc.StreamDesc) []string {
	var out []string
	for _, m := range unary {
		out = append(out, m.MethodName)
	}
	for _, m := range streams {
		out = append(out, m.StreamName)
	}
	return out
}

// sseEvent is one Server-Sent Event.
type sseEvent struct {
	id, event, data string
}

// readSSE reads events from r until it ends or stop returns true.
func readSSE(t *testing.T, r io.Reader, stop func(sseEvent) bool) []sseEvent {
	t.Helper()
	var (
		out []sseEvent
		cur sseEvent
		has bool
	)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if has {
				out = append(out, cur)
				if stop != nil && stop(cur) {
					return out
				}
			}
			cur, has = sseEvent{}, false
		case strings.HasPrefix(line, ":"): // a comment (keep-alive)
		case strings.HasPrefix(line, "id: "):
			cur.id, has = strings.TrimPrefix(line, "id: "), true
		case strings.HasPrefix(line, "event: "):
			cur.event, has = strings.TrimPrefix(line, "event: "), true
		case strings.HasPrefix(line, "data: "):
			if cur.data != "" {
				cur.data += "\n"
			}
			cur.data, has = cur.data+strings.TrimPrefix(line, "data: "), true
		default:
			t.Fatalf("not an SSE line: %q", line)
		}
	}
	return out
}

// sseEvents checks SSE messages of Run/Resume/Attach and returns their events.
func sseEvents(t *testing.T, msgs []sseEvent) []*plumbv1.Event {
	t.Helper()
	var evs []*plumbv1.Event
	for _, m := range msgs {
		if m.event != "" {
			t.Fatalf("an %q event: %s", m.event, m.data)
		}
		var r plumbv1.AttachResponse
		if err := protojson.Unmarshal([]byte(m.data), &r); err != nil {
			t.Fatalf("data is not a stream message: %v: %s", err, m.data)
		}
		if m.id != strconv.FormatUint(r.GetEvent().GetSequence(), 10) {
			t.Fatalf("id %q for the event of sequence %d", m.id, r.GetEvent().GetSequence())
		}
		evs = append(evs, r.GetEvent())
	}
	return evs
}

func sequences(evs []*plumbv1.Event) []uint64 {
	var out []uint64
	for _, e := range evs {
		out = append(out, e.GetSequence())
	}
	return out
}

// openSSE starts a streaming request and returns the open response.
func openSSE(t *testing.T, ctx context.Context, c *http.Client, method, url string, hdr map[string]string, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "text/event-stream")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("%s %s: HTTP %d %q: %s", method, url, resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	return resp
}

// TestHTTPStreams: a Run streamed as SSE by a real curl -N, then Attach
// dropped after two events and resumed with Last-Event-ID (the rest, once),
// and Attach as newline-delimited JSON.
func TestHTTPStreams(t *testing.T) {
	curl := curlPath(t)
	s := start(t)
	agentd := "http://" + s.proc.HTTPAddr
	s.model.Script("main",
		modeltest.Calls(modeltest.Call{ID: "c1", Name: "write_todos", Args: `{"todos":[{"content":"say hi","status":"in_progress"}]}`}),
		modeltest.Text("Hello over HTTP"),
	)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, curl, "-sS", "-N", "--fail-with-body", agentd+"/plumb.v1.AgentService/Run",
		"-H", "Authorization: Bearer "+agentdToken, "-H", "Accept: text/event-stream",
		"-d", `{"input":[{"content":"hi"}],"metadata":{"client":"curl"}}`).Output()
	if err != nil {
		t.Fatalf("curl: %v\n%s", err, out)
	}
	evs := sseEvents(t, readSSE(t, strings.NewReader(string(out)), nil))
	if len(evs) < 4 || evs[0].GetRunStarted() == nil {
		t.Fatalf("Run over SSE: %d events: %s", len(evs), out)
	}
	for i, ev := range evs {
		if ev.GetSequence() != uint64(i+1) {
			t.Fatalf("event %d has sequence %d", i, ev.GetSequence())
		}
	}
	last := evs[len(evs)-1].GetRunFinished()
	if last.GetStatus() != plumbv1.RunStatus_RUN_STATUS_COMPLETED || last.GetFinalText() != "Hello over HTTP" {
		t.Fatalf("run_finished = %v", last)
	}
	thread, n := evs[0].GetThreadId(), uint64(len(evs))

	// Attach over SSE, dropped after two events.
	c := &http.Client{}
	dctx, drop := context.WithCancel(ctx)
	resp := openSSE(t, dctx, c, http.MethodPost, agentd+"/plumb.v1.AgentService/Attach", bearer(agentdToken), `{"threadId":"`+thread+`"}`)
	first := sseEvents(t, readSSE(t, resp.Body, func(e sseEvent) bool { return e.id == "2" }))
	drop()
	resp.Body.Close()
	if got := sequences(first); !slices.Equal(got, []uint64{1, 2}) {
		t.Fatalf("before the drop: sequences %v", got)
	}
	// Resumed with Last-Event-ID: the rest, each once, then the end.
	resp = openSSE(t, ctx, c, http.MethodPost, agentd+"/plumb.v1.AgentService/Attach",
		map[string]string{"Authorization": "Bearer " + agentdToken, "Last-Event-ID": "2"}, `{"threadId":"`+thread+`"}`)
	rest := sseEvents(t, readSSE(t, resp.Body, nil))
	resp.Body.Close()
	var want []uint64
	for i := uint64(3); i <= n; i++ {
		want = append(want, i)
	}
	if got := sequences(rest); !slices.Equal(got, want) {
		t.Fatalf("after Last-Event-ID 2: sequences %v, want %v", got, want)
	}
	// after_sequence in the body wins over Last-Event-ID.
	resp = openSSE(t, ctx, c, http.MethodPost, agentd+"/plumb.v1.AgentService/Attach",
		map[string]string{"Authorization": "Bearer " + agentdToken, "Last-Event-ID": "2"}, `{"threadId":"`+thread+`","afterSequence":"`+strconv.FormatUint(n-1, 10)+`"}`)
	tail := sseEvents(t, readSSE(t, resp.Body, nil))
	resp.Body.Close()
	if got := sequences(tail); !slices.Equal(got, []uint64{n}) {
		t.Fatalf("after_sequence %d: sequences %v", n-1, got)
	}
	// A Last-Event-ID that is not a number.
	r2, body := call(t, c, agentd, "/plumb.v1.AgentService/Attach", map[string]string{"Authorization": "Bearer " + agentdToken, "Last-Event-ID": "x"}, `{"threadId":"`+thread+`"}`)
	apiError(t, r2, body, http.StatusBadRequest, 3, httpapi.ReasonBadLastEvent)

	// Without Accept: text/event-stream, newline-delimited JSON.
	r2, body = call(t, c, agentd, "/plumb.v1.AgentService/Attach", bearer(agentdToken), `{"threadId":"`+thread+`","afterSequence":"1"}`)
	if r2.StatusCode != http.StatusOK {
		t.Fatalf("Attach as JSON: HTTP %d %s", r2.StatusCode, body)
	}
	var lines int
	for line := range strings.Lines(strings.TrimSpace(string(body))) {
		var chunk struct {
			Result json.RawMessage `json:"result"`
		}
		var r plumbv1.AttachResponse
		if err := json.Unmarshal([]byte(line), &chunk); err != nil || protojson.Unmarshal(chunk.Result, &r) != nil {
			t.Fatalf("not a result line: %q", line)
		}
		lines++
		if r.GetEvent().GetSequence() != uint64(lines+1) {
			t.Fatalf("line %d has sequence %d", lines, r.GetEvent().GetSequence())
		}
	}
	if uint64(lines) != n-1 {
		t.Fatalf("%d lines, want %d", lines, n-1)
	}
	// A stream that fails before its first message is an ordinary error.
	resp2 := openSSEOrError(t, ctx, c, agentd+"/plumb.v1.AgentService/Attach", `{"threadId":"no-such-thread"}`)
	if resp2.StatusCode != http.StatusNotFound {
		t.Fatalf("Attach of a missing thread: HTTP %d", resp2.StatusCode)
	}
}

// openSSEOrError is openSSE that returns any response, its body read.
func openSSEOrError(t *testing.T, ctx context.Context, c *http.Client, url, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Authorization", "Bearer "+agentdToken)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// TestHTTPSession: a browser's way in. A session cookie from POST
// /v1/session authenticates GET /v1/threads/{id}/events (EventSource) and
// JSON posts; a cookie post without the JSON content type is refused
// (CSRF); DELETE /v1/session ends it.
func TestHTTPSession(t *testing.T) {
	s := start(t)
	agentd := "http://" + s.proc.HTTPAddr
	s.model.Script("main", modeltest.Text("Hi, browser"))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar}
	js := map[string]string{"Content-Type": "application/json"}

	resp, body := call(t, c, agentd, "/v1/session", js, `{"token":"wrong"}`)
	apiError(t, resp, body, http.StatusUnauthorized, 16, "")
	resp, body = call(t, c, agentd, "/v1/session", nil, `{"token":"`+agentdToken+`"}`)
	apiError(t, resp, body, http.StatusUnsupportedMediaType, 3, httpapi.ReasonNotJSON)
	resp, body = call(t, c, agentd, "/v1/session", js, `{"token":"`+agentdToken+`"}`)
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("POST /v1/session: HTTP %d %s", resp.StatusCode, body)
	}
	set := resp.Header.Get("Set-Cookie")
	for _, want := range []string{httpapi.SessionCookie + "=", "HttpOnly", "SameSite=Strict", "Path=/"} {
		if !strings.Contains(set, want) {
			t.Fatalf("Set-Cookie %q lacks %q", set, want)
		}
	}
	if strings.Contains(set, agentdToken) || strings.Contains(set, "Secure") {
		t.Fatalf("Set-Cookie %q holds the token, or Secure over plain HTTP", set)
	}

	// Behind a TLS-terminating proxy the cookie is Secure.
	resp, _ = call(t, &http.Client{}, agentd, "/v1/session", map[string]string{"Content-Type": "application/json", "X-Forwarded-Proto": "https"}, `{"token":"`+agentdToken+`"}`)
	if set := resp.Header.Get("Set-Cookie"); resp.StatusCode != http.StatusNoContent || !strings.Contains(set, "; Secure") {
		t.Fatalf("behind TLS: HTTP %d, Set-Cookie %q", resp.StatusCode, set)
	}

	// A run, started with the cookie and JSON.
	resp, body = call(t, c, agentd, "/plumb.v1.AgentService/Run", js, `{"input":[{"content":"hi"}]}`)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("Run with the cookie: HTTP %d %s", resp.StatusCode, body)
	}
	var first struct {
		Result struct {
			Event struct {
				ThreadID string `json:"threadId"`
			} `json:"event"`
		} `json:"result"`
	}
	line, _, _ := strings.Cut(string(body), "\n")
	if err := json.Unmarshal([]byte(line), &first); err != nil || first.Result.Event.ThreadID == "" {
		t.Fatalf("Run's first line %q: %v", line, err)
	}
	thread := first.Result.Event.ThreadID

	// CSRF: the cookie without the JSON content type is refused, whatever
	// the body; a form post is what a cross-site page could send.
	for _, ct := range []string{"", "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"} {
		resp, body = call(t, c, agentd, "/plumb.v1.AgentService/DeleteThread", map[string]string{"Content-Type": ct}, `{"threadId":"`+thread+`"}`)
		apiError(t, resp, body, http.StatusForbidden, 7, httpapi.ReasonCSRF)
	}

	// EventSource: GET with the cookie, resumed from Last-Event-ID.
	r := openSSE(t, ctx, c, http.MethodGet, agentd+"/v1/threads/"+thread+"/events", map[string]string{"Last-Event-ID": "1"}, "")
	evs := sseEvents(t, readSSE(t, r.Body, nil))
	r.Body.Close()
	if len(evs) < 2 || evs[0].GetSequence() != 2 || evs[len(evs)-1].GetRunFinished().GetFinalText() != "Hi, browser" {
		t.Fatalf("GET events after 1: sequences %v", sequences(evs))
	}
	r = openSSE(t, ctx, c, http.MethodGet, agentd+"/v1/threads/"+thread+"/events?after_sequence=0", nil, "")
	all := sseEvents(t, readSSE(t, r.Body, nil))
	r.Body.Close()
	if len(all) != len(evs)+1 || all[0].GetRunStarted() == nil {
		t.Fatalf("GET events from the start: sequences %v", sequences(all))
	}

	// The thread is still there (the CSRF refusals did nothing).
	resp, body = call(t, c, agentd, "/plumb.v1.AgentService/GetThread", js, `{"threadId":"`+thread+`"}`)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GetThread with the cookie: HTTP %d %s", resp.StatusCode, body)
	}

	// The REST-style aliases, with the cookie.
	gr, err := c.Get(agentd + "/v1/threads/" + thread + "?view=THREAD_VIEW_FULL")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(gr.Body)
	gr.Body.Close()
	var th plumbv1.GetThreadResponse
	if gr.StatusCode != http.StatusOK || protojson.Unmarshal(b, &th) != nil || th.GetThread().GetId() != thread || len(th.GetThread().GetMessages()) == 0 {
		t.Fatalf("GET /v1/threads/{id}: HTTP %d %s", gr.StatusCode, b)
	}
	if gr, err = c.Get(agentd + "/v1/threads?page_size=5"); err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(gr.Body)
	gr.Body.Close()
	if gr.StatusCode != http.StatusOK || !strings.Contains(string(b), thread) {
		t.Fatalf("GET /v1/threads: HTTP %d %s", gr.StatusCode, b)
	}

	// Signing out ends the session; the old cookie is refused.
	old := jar.Cookies(r.Request.URL)
	req, _ := http.NewRequestWithContext(ctx, http.MethodDelete, agentd+"/v1/session", nil)
	dresp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	dresp.Body.Close()
	if dresp.StatusCode != http.StatusNoContent || len(jar.Cookies(r.Request.URL)) != 0 {
		t.Fatalf("DELETE /v1/session: HTTP %d, cookies left %v", dresp.StatusCode, jar.Cookies(r.Request.URL))
	}
	stale := &http.Client{}
	req, _ = http.NewRequestWithContext(ctx, http.MethodPost, agentd+"/plumb.v1.AgentService/ListAgents", strings.NewReader(`{}`))
	req.Header.Set("Content-Type", "application/json")
	for _, ck := range old {
		req.AddCookie(ck)
	}
	sresp, err := stale.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(sresp.Body)
	sresp.Body.Close()
	apiError(t, sresp, b, http.StatusUnauthorized, 16, httpapi.ReasonSession)
}

// TestHTTPResumeLive: an SSE Attach on a live run, dropped while the model
// is still thinking, resumed with Last-Event-ID after the run went on: the
// rest of the run arrives, each event once, up to run_finished.
func TestHTTPResumeLive(t *testing.T) {
	s := start(t)
	agentd := "http://" + s.proc.HTTPAddr
	release := make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free) // before the model server closes, even on failure
	s.model.Script("main",
		modeltest.Calls(modeltest.Call{ID: "c1", Name: "write_todos", Args: `{"todos":[{"content":"wait","status":"in_progress"}]}`}),
		modeltest.Dynamic(func(modeltest.Request) modeltest.Turn { <-release; return modeltest.Text("Finished after the drop") }),
	)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := &http.Client{}
	auth := bearer(agentdToken)

	// A detached run: its response may close while it goes on.
	rctx, closeRun := context.WithCancel(ctx)
	resp := openSSE(t, rctx, c, http.MethodPost, agentd+"/plumb.v1.AgentService/Run", auth, `{"input":[{"content":"hi"}],"detach":true}`)
	started := sseEvents(t, readSSE(t, resp.Body, func(sseEvent) bool { return true }))
	closeRun()
	resp.Body.Close()
	thread := started[0].GetThreadId()

	// Attach until the todo call's result: the model now waits.
	actx, drop := context.WithCancel(ctx)
	resp = openSSE(t, actx, c, http.MethodPost, agentd+"/plumb.v1.AgentService/Attach", auth, `{"threadId":"`+thread+`"}`)
	before := sseEvents(t, readSSE(t, resp.Body, func(e sseEvent) bool { return strings.Contains(e.data, `"toolResult"`) }))
	drop()
	resp.Body.Close()
	last := before[len(before)-1]
	if last.GetToolResult() == nil || before[0].GetSequence() != 1 {
		t.Fatalf("before the drop: %v", sequences(before))
	}

	free() // the run goes on while nobody listens
	resp = openSSE(t, ctx, c, http.MethodPost, agentd+"/plumb.v1.AgentService/Attach",
		map[string]string{"Authorization": "Bearer " + agentdToken, "Last-Event-ID": strconv.FormatUint(last.GetSequence(), 10)}, `{"threadId":"`+thread+`"}`)
	after := sseEvents(t, readSSE(t, resp.Body, nil))
	resp.Body.Close()
	if len(after) == 0 || after[len(after)-1].GetRunFinished().GetFinalText() != "Finished after the drop" {
		t.Fatalf("after the drop: %v", sequences(after))
	}
	for i, ev := range after {
		if ev.GetSequence() != last.GetSequence()+uint64(i)+1 {
			t.Fatalf("after the drop, sequences %v do not continue %d once each", sequences(after), last.GetSequence())
		}
	}
}

// curlPath is the curl the HTTP tests run (under CI=true it must exist).
func curlPath(t *testing.T) string {
	t.Helper()
	curl, err := exec.LookPath("curl")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("curl not found under CI=true (make test-deps installs it)")
		}
		t.Skip("curl not installed")
	}
	return curl
}

// processFrames decodes a Process stream's SSE events, checking that
// their ids number them 1, 2, ...
func processFrames(t *testing.T, msgs []sseEvent) []*plumbv1.ProcessResponse {
	t.Helper()
	var out []*plumbv1.ProcessResponse
	for i, m := range msgs {
		if m.event != "" {
			t.Fatalf("an %q event: %s", m.event, m.data)
		}
		if m.id != strconv.Itoa(i+1) {
			t.Fatalf("event %d has id %q", i+1, m.id)
		}
		var r plumbv1.ProcessResponse
		if err := protojson.Unmarshal([]byte(m.data), &r); err != nil {
			t.Fatalf("not a ProcessResponse: %v: %s", err, m.data)
		}
		out = append(out, &r)
	}
	return out
}

// TestHTTPClientStreams: the client-streaming RPCs with a real curl on a
// real sandbox. UploadFiles from a newline-delimited file
// (--data-binary @frames.ndjson); Process with the whole body at once
// (start, stdin, close) and interactively over one HTTP/1.1 request
// (curl -N -T . reading stdin while it prints events: each stdin line is
// written only after the output of the one before arrived), with its
// output as SSE; a process whose connection drops is killed.
func TestHTTPClientStreams(t *testing.T) {
	curl := curlPath(t)
	// sandboxd alone, with a second tenant ("other") beside the token's.
	dir := t.TempDir()
	creds := filepath.Join(dir, "credentials")
	if err := os.WriteFile(creds, []byte("other "+otherToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sd := daemontest.StartSandboxd(t, bins["sandboxd"], dir, daemontest.WriteToken(t, dir, "sandboxd.token", sandboxdToken), "--credentials-file", creds)
	sandboxd := "http://" + sd.HTTPAddr
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	auth := "Authorization: Bearer " + sandboxdToken
	run := func(args ...string) []byte {
		t.Helper()
		out, err := exec.CommandContext(ctx, curl, append([]string{"-sS", "--fail-with-body", "-H", auth}, args...)...).Output()
		if err != nil {
			t.Fatalf("curl %v: %v\n%s", args, err, out)
		}
		return out
	}

	var created plumbv1.CreateSandboxResponse
	if err := protojson.Unmarshal(run(sandboxd+"/plumb.v1.SandboxService/CreateSandbox", "--json", `{}`), &created); err != nil {
		t.Fatal(err)
	}
	id := created.GetSandbox().GetId()
	if id == "" {
		t.Fatalf("CreateSandbox: %v", &created)
	}

	// UploadFiles: two items, the first in two chunks.
	frames := filepath.Join(t.TempDir(), "frames.ndjson")
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	ndjson := `{"sandboxId":"` + id + `","path":"/workspace/up/a.txt","data":"` + b64("hello ") + `"}` + "\n" +
		`{"data":"` + b64("over HTTP\n") + `","eof":true}` + "\n" +
		`{"path":"/workspace/up/b.sh","data":"` + b64("echo from b\n") + `","eof":true}` + "\n"
	if err := os.WriteFile(frames, []byte(ndjson), 0o644); err != nil {
		t.Fatal(err)
	}
	var up plumbv1.UploadFilesResponse
	out := run(sandboxd+"/plumb.v1.SandboxService/UploadFiles", "-H", "Content-Type: application/x-ndjson", "--data-binary", "@"+frames)
	if err := protojson.Unmarshal(out, &up); err != nil {
		t.Fatalf("UploadFiles: %v: %s", err, out)
	}
	if len(up.GetResults()) != 2 || up.GetResults()[0].GetBytesWritten() != 16 || up.GetResults()[0].GetError() != nil || up.GetResults()[1].GetError() != nil {
		t.Fatalf("UploadFiles results: %s", out)
	}
	var rd plumbv1.ReadResponse
	if err := protojson.Unmarshal(run(sandboxd+"/plumb.v1.SandboxService/Read", "--json", `{"sandboxId":"`+id+`","path":"/workspace/up/a.txt"}`), &rd); err != nil || !strings.Contains(rd.GetContent(), "hello over HTTP") {
		t.Fatalf("Read of the upload: %q %v", rd.GetContent(), err)
	}
	// A token this sandboxd does not know gets nothing through, and
	// another tenant's finds no such sandbox, for either stream.
	refused := func(token, path, body string) (int, httpapi.ErrorBody) {
		t.Helper()
		out, err := exec.CommandContext(ctx, curl, "-sS", "-w", "\n%{http_code}", "-H", "Authorization: Bearer "+token,
			"-H", "Accept: text/event-stream", "--data-binary", body, sandboxd+path).Output()
		if err != nil {
			t.Fatalf("curl: %v %s", err, out)
		}
		resp, code, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
		var e httpapi.ErrorBody
		if err := json.Unmarshal([]byte(resp), &e); err != nil {
			t.Fatalf("not an error body: %s", out)
		}
		n, _ := strconv.Atoi(strings.TrimSpace(code))
		return n, e
	}
	if code, e := refused(agentdToken, "/plumb.v1.SandboxService/UploadFiles", "@"+frames); code != http.StatusUnauthorized || e.Code != 16 {
		t.Fatalf("UploadFiles with agentd's token: HTTP %d %+v", code, e)
	}
	if code, e := refused(otherToken, "/plumb.v1.SandboxService/UploadFiles", "@"+frames); code != http.StatusNotFound || e.Code != 5 {
		t.Fatalf("UploadFiles into another tenant's sandbox: HTTP %d %+v", code, e)
	}
	if code, e := refused(otherToken, "/plumb.v1.SandboxService/Process", `{"start":{"sandboxId":"`+id+`","command":"id"}}`); code != http.StatusNotFound || e.Code != 5 {
		t.Fatalf("Process in another tenant's sandbox: HTTP %d %+v", code, e)
	}

	// Process, the whole body at once: the box reads stdin to its end.
	procURL := sandboxd + "/plumb.v1.SandboxService/Process"
	start := func(cmd string) string {
		return `{"start":{"sandboxId":"` + id + `","command":` + strconv.Quote(cmd) + `}}` + "\n"
	}
	stdin := func(s string) string { return `{"stdin":"` + b64(s) + `"}` + "\n" }
	const closeStdin = `{"closeStdin":true}` + "\n"
	body := filepath.Join(t.TempDir(), "proc.ndjson")
	if err := os.WriteFile(body, []byte(start("tr a-z A-Z; sh /workspace/up/b.sh; exit 3")+stdin("shout\n")+stdin("louder\n")+closeStdin), 0o644); err != nil {
		t.Fatal(err)
	}
	out = run("-N", procURL, "-H", "Accept: text/event-stream", "--data-binary", "@"+body)
	msgs := processFrames(t, readSSE(t, strings.NewReader(string(out)), nil))
	var stdout strings.Builder
	for _, m := range msgs[1 : len(msgs)-1] {
		stdout.Write(m.GetStdout())
	}
	if msgs[0].GetStarted() == nil || msgs[len(msgs)-1].GetExit().GetExitCode() != 3 || stdout.String() != "SHOUT\nLOUDER\nfrom b\n" {
		t.Fatalf("Process, whole body: stdout %q, events %s", stdout.String(), out)
	}

	// Process, interactive: curl streams its stdin as the request body
	// while it prints the events. "-T ." is curl's upload from stdin in
	// non-blocking mode; "-T -" reads stdin to its end (or a full buffer)
	// before it services the response.
	open := func(t *testing.T, first string, hdr ...string) (io.WriteCloser, *bufio.Reader, *exec.Cmd) {
		t.Helper()
		args := []string{"-sS", "-N", "-X", "POST", "-T", ".", "-H", auth, "-H", "Accept: text/event-stream",
			"-H", "Content-Type: application/x-ndjson"}
		for _, h := range hdr {
			args = append(args, "-H", h)
		}
		c := exec.CommandContext(ctx, curl, append(args, procURL)...)
		in, err := c.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		outp, err := c.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stderr strings.Builder // curl's progress meter shows with -T . even with -s
		c.Stderr = &stderr
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = c.Process.Kill()
			_ = c.Wait()
			if t.Failed() {
				t.Logf("curl's stderr: %s", stderr.String())
			}
		})
		if _, err := io.WriteString(in, first); err != nil {
			t.Fatal(err)
		}
		return in, bufio.NewReader(outp), c
	}
	interactive := func(t *testing.T, cmd string) (io.WriteCloser, *bufio.Reader, *exec.Cmd) {
		t.Helper()
		return open(t, start(cmd))
	}
	// nextID reads the stream's next message and its SSE id. (Line by
	// line: a Scanner would read ahead past the event, and the next call
	// lose it.)
	nextID := func(t *testing.T, br *bufio.Reader) (*plumbv1.ProcessResponse, string) {
		t.Helper()
		var data, id string
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				// An error response is one JSON body, with no newline.
				t.Fatalf("the stream ended (%v) after %q", err, line)
			}
			line = strings.TrimSuffix(line, "\n")
			if d, ok := strings.CutPrefix(line, "data: "); ok {
				data += d
			}
			if v, ok := strings.CutPrefix(line, "id: "); ok {
				id = v
			}
			if strings.HasPrefix(line, "event: ") {
				t.Fatalf("an event: %q", line)
			}
			if line == "" && data != "" {
				break
			}
		}
		var r plumbv1.ProcessResponse
		if err := protojson.Unmarshal([]byte(data), &r); err != nil {
			t.Fatalf("data %q: %v", data, err)
		}
		return &r, id
	}
	next := func(t *testing.T, br *bufio.Reader) *plumbv1.ProcessResponse {
		t.Helper()
		r, _ := nextID(t, br)
		return r
	}
	t.Run("interactive", func(t *testing.T) {
		in, br, c := interactive(t, "while read l; do echo \"got $l\"; done; echo bye")
		if next(t, br).GetStarted() == nil {
			t.Fatal("no started first")
		}
		for _, line := range []string{"one", "two"} {
			if _, err := io.WriteString(in, stdin(line+"\n")); err != nil {
				t.Fatal(err)
			}
			if got := string(next(t, br).GetStdout()); got != "got "+line+"\n" {
				t.Fatalf("after %q: stdout %q", line, got)
			}
		}
		if _, err := io.WriteString(in, closeStdin); err != nil {
			t.Fatal(err)
		}
		in.Close()
		var rest strings.Builder
		for {
			m := next(t, br)
			if x := m.GetExit(); x != nil {
				if x.GetExitCode() != 0 || rest.String() != "bye\n" {
					t.Fatalf("exit %v after %q", x, rest.String())
				}
				break
			}
			rest.Write(m.GetStdout())
		}
		if err := c.Wait(); err != nil {
			t.Fatalf("curl: %v", err)
		}
	})
	// sleeping polls until a "sleep 1234" runs in the box, or none does.
	sleeping := func(t *testing.T, want bool) {
		t.Helper()
		for {
			var ex plumbv1.ExecuteResponse
			if err := protojson.Unmarshal(run(sandboxd+"/plumb.v1.SandboxService/Execute", "--json", `{"sandboxId":"`+id+`","command":{"command":"grep -ls '123[4]' /proc/[0-9]*/cmdline; true"}}`), &ex); err != nil {
				t.Fatal(err)
			}
			if strings.Contains(ex.GetResult().GetOutput(), "/cmdline") == want {
				return
			}
			if ctx.Err() != nil {
				t.Fatalf("want sleep 1234 running = %v: %s", want, ex.GetResult().GetOutput())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	t.Run("dropped", func(t *testing.T) {
		_, br, c := interactive(t, "sleep 1234")
		if next(t, br).GetStarted() == nil {
			t.Fatal("no started first")
		}
		sleeping(t, true)
		_ = c.Process.Kill()
		_ = c.Wait()
		// The process ends with its connection (polled: the kill travels
		// through sandboxd and the box's agent).
		sleeping(t, false)
	})

	// A resumable process survives its connection: curl is killed after
	// "one"; a second curl re-attaches with the execution id and
	// Last-Event-ID, gets what the process wrote meanwhile (once, ids
	// continuing the sequence), and its stdin reaches the same process.
	t.Run("resumable", func(t *testing.T) {
		first := `{"start":{"sandboxId":"` + id + `","resumable":true,"command":` +
			strconv.Quote(`echo pid=$$; while read l; do echo "got $l pid=$$"; [ "$l" = two ] && { sleep 1; echo late; }; done; exit 6`) + `}}` + "\n"
		in, br, c := open(t, first)
		m, sid := nextID(t, br)
		xid := m.GetStarted().GetExecutionId()
		if xid == "" || sid != "" {
			t.Fatalf("first message %v (id %q): want started, no id, with an execution id", m, sid)
		}
		m, sid = nextID(t, br)
		pid := strings.TrimSpace(strings.TrimPrefix(string(m.GetStdout()), "pid="))
		if sid != "1" || pid == "" {
			t.Fatalf("second message %v, id %q", m, sid)
		}
		if _, err := io.WriteString(in, stdin("one\n")); err != nil {
			t.Fatal(err)
		}
		if m, sid = nextID(t, br); string(m.GetStdout()) != "got one pid="+pid+"\n" || sid != "2" || m.GetSequence() != 2 {
			t.Fatalf("after one: %v, id %q", m, sid)
		}
		_ = c.Process.Kill()
		_ = c.Wait()

		in, br, c = open(t, `{"start":{"sandboxId":"`+id+`","executionId":"`+xid+`"}}`+"\n", "Last-Event-ID: 2")
		if _, err := io.WriteString(in, stdin("two\n")); err != nil {
			t.Fatal(err)
		}
		var out strings.Builder
		want := 3
		for {
			m, sid := nextID(t, br)
			if sid != strconv.Itoa(want) || m.GetSequence() != uint64(want) {
				t.Fatalf("re-attached: %v with id %q, want %d", m, sid, want)
			}
			want++
			out.Write(m.GetStdout())
			if strings.HasSuffix(out.String(), "late\n") {
				break
			}
		}
		if out.String() != "got two pid="+pid+"\nlate\n" {
			t.Fatalf("re-attached: %q", out.String())
		}
		if _, err := io.WriteString(in, closeStdin); err != nil {
			t.Fatal(err)
		}
		in.Close()
		if m, _ := nextID(t, br); m.GetExit().GetExitCode() != 6 {
			t.Fatalf("after closing stdin: %v, want exit 6", m)
		}
		if err := c.Wait(); err != nil {
			t.Fatalf("curl: %v", err)
		}
	})
}
