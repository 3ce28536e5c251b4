package httpapi

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
)

// echoSandbox is a SandboxService whose Process echoes stdin to stdout
// until stdin closes (exit 0) or a signal comes (exit 128+15), and whose
// UploadFiles counts each item's bytes. ended gets how each Process call
// ended (nil, or the context's error when the client went away).
type echoSandbox struct {
	plumbv1.UnimplementedSandboxServiceServer
	ended chan error
}

func (e *echoSandbox) Process(stream plumbv1.SandboxService_ProcessServer) (err error) {
	defer func() {
		select {
		case e.ended <- err:
		default:
		}
	}()
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	if st := first.GetStart(); st.GetExecutionId() != "" {
		// A re-attach: where it starts, numbered as a resumable stream.
		seq := st.GetAfterSequence()
		if err := stream.Send(&plumbv1.ProcessResponse{Kind: &plumbv1.ProcessResponse_Stdout{Stdout: fmt.Appendf(nil, "%s after %d", st.GetExecutionId(), seq)}, Sequence: seq + 1}); err != nil {
			return err
		}
		return stream.Send(&plumbv1.ProcessResponse{Kind: &plumbv1.ProcessResponse_Exit{Exit: &plumbv1.ProcessExit{}}, Sequence: seq + 2})
	}
	if first.GetStart().GetCommand() == "" {
		return status.Error(codes.InvalidArgument, "the first message must be start, with a command")
	}
	if err := stream.Send(&plumbv1.ProcessResponse{Kind: &plumbv1.ProcessResponse_Started{Started: &plumbv1.ProcessStarted{}}}); err != nil {
		return err
	}
	exit := func(code int32, sig string) error {
		return stream.Send(&plumbv1.ProcessResponse{Kind: &plumbv1.ProcessResponse_Exit{Exit: &plumbv1.ProcessExit{ExitCode: code, Signal: sig}}})
	}
	for {
		m, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return exit(0, "") // half-closed: stdin closed
		}
		if err != nil {
			return err
		}
		switch k := m.GetKind().(type) {
		case *plumbv1.ProcessRequest_Stdin:
			if err := stream.Send(&plumbv1.ProcessResponse{Kind: &plumbv1.ProcessResponse_Stdout{Stdout: k.Stdin}}); err != nil {
				return err
			}
		case *plumbv1.ProcessRequest_CloseStdin:
			return exit(0, "")
		case *plumbv1.ProcessRequest_Signal:
			return exit(128+15, k.Signal)
		default:
			return status.Error(codes.InvalidArgument, "start twice")
		}
	}
}

func (e *echoSandbox) UploadFiles(stream plumbv1.SandboxService_UploadFilesServer) error {
	out := &plumbv1.UploadFilesResponse{}
	for {
		m, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return stream.SendAndClose(out)
		}
		if err != nil {
			return err
		}
		if len(out.Results) == 0 && m.GetSandboxId() != "sbx-1" {
			return status.Error(codes.NotFound, "sandbox not found")
		}
		if m.GetPath() != "" {
			out.Results = append(out.Results, &plumbv1.UploadResult{Path: m.GetPath()})
		}
		if len(out.Results) == 0 {
			return status.Error(codes.InvalidArgument, "an item's first chunk must set path")
		}
		out.Results[len(out.Results)-1].BytesWritten += int64(len(m.GetData()))
	}
}

func newEchoAPI(t *testing.T, edit func(*Config)) (string, *echoSandbox) {
	t.Helper()
	e := &echoSandbox{ended: make(chan error, 16)}
	base := newTestAPI(t, func(s *grpc.Server) { plumbv1.RegisterSandboxServiceServer(s, e) }, edit)
	return base, e
}

// frame is the JSON line of one request message.
func frame(t *testing.T, m *plumbv1.ProcessRequest) string {
	t.Helper()
	b, err := protojson.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return string(b) + "\n"
}

func startFrame(t *testing.T) string {
	return frame(t, &plumbv1.ProcessRequest{Kind: &plumbv1.ProcessRequest_Start{Start: &plumbv1.ProcessStart{SandboxId: "sbx-1", Command: "cat"}}})
}

func stdinFrame(t *testing.T, s string) string {
	return frame(t, &plumbv1.ProcessRequest{Kind: &plumbv1.ProcessRequest_Stdin{Stdin: []byte(s)}})
}

func closeFrame(t *testing.T) string {
	return frame(t, &plumbv1.ProcessRequest{Kind: &plumbv1.ProcessRequest_CloseStdin{CloseStdin: true}})
}

// sse is one Server-Sent Event as the tests read it.
type sse struct{ id, event, data string }

// nextEvent reads one event (comments skipped); io.EOF at the end.
func nextEvent(br *bufio.Reader) (sse, error) {
	var ev sse
	has := false
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			if has {
				return ev, nil
			}
			return ev, err
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "":
			if has {
				return ev, nil
			}
		case strings.HasPrefix(line, ":"):
		case strings.HasPrefix(line, "id: "):
			ev.id, has = strings.TrimPrefix(line, "id: "), true
		case strings.HasPrefix(line, "event: "):
			ev.event, has = strings.TrimPrefix(line, "event: "), true
		case strings.HasPrefix(line, "data: "):
			ev.data, has = ev.data+strings.TrimPrefix(line, "data: "), true
		default:
			return ev, fmt.Errorf("not an SSE line: %q", line)
		}
	}
}

// processEvent decodes a Process stream's event.
func processEvent(t *testing.T, ev sse) *plumbv1.ProcessResponse {
	t.Helper()
	if ev.event != "" {
		t.Fatalf("an %q event: %s", ev.event, ev.data)
	}
	var r plumbv1.ProcessResponse
	if err := protojson.Unmarshal([]byte(ev.data), &r); err != nil {
		t.Fatalf("event data %q: %v", ev.data, err)
	}
	return &r
}

// openProcess starts Process over HTTP with a request body the test
// writes as it goes, and returns the body's writer and the response.
func openProcess(t *testing.T, ctx context.Context, base string, hdr map[string]string) (*io.PipeWriter, *http.Response) {
	t.Helper()
	pr, pw := io.Pipe()
	t.Cleanup(func() { pw.Close() })
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/plumb.v1.SandboxService/Process", pr)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+testToken)
	req.Header.Set("Accept", mimeSSE)
	req.Header.Set("Content-Type", "application/x-ndjson")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	type result struct {
		resp *http.Response
		err  error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		done <- result{resp, err}
	}()
	// The response starts only once the first frame is read.
	if _, err := io.WriteString(pw, startFrame(t)); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Cleanup(func() { r.resp.Body.Close() })
	if r.resp.StatusCode != http.StatusOK || r.resp.Header.Get("Content-Type") != mimeSSE {
		b, _ := io.ReadAll(r.resp.Body)
		t.Fatalf("Process: HTTP %d %q: %s", r.resp.StatusCode, r.resp.Header.Get("Content-Type"), b)
	}
	return pw, r.resp
}

// TestProcessInteractive: over one HTTP/1.1 request, each stdin frame is
// written only after the output of the one before arrived, so the handler
// must read frames while it writes events (full duplex). Events are
// numbered by id; closing stdin ends the process with its exit.
func TestProcessInteractive(t *testing.T) {
	base, _ := newEchoAPI(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pw, resp := openProcess(t, ctx, base, nil)
	br := bufio.NewReader(resp.Body)

	ev, err := nextEvent(br)
	if err != nil {
		t.Fatal(err)
	}
	if processEvent(t, ev).GetStarted() == nil || ev.id != "1" {
		t.Fatalf("first event %+v, want started with id 1", ev)
	}
	for i, line := range []string{"one\n", "two\n", "three\n"} {
		if _, err := io.WriteString(pw, stdinFrame(t, line)); err != nil {
			t.Fatal(err)
		}
		ev, err := nextEvent(br)
		if err != nil {
			t.Fatalf("after stdin %q: %v", line, err)
		}
		if got := string(processEvent(t, ev).GetStdout()); got != line || ev.id != fmt.Sprint(i+2) {
			t.Fatalf("event %+v (stdout %q), want stdout %q with id %d", ev, got, line, i+2)
		}
	}
	if _, err := io.WriteString(pw, closeFrame(t)); err != nil {
		t.Fatal(err)
	}
	ev, err = nextEvent(br)
	if err != nil {
		t.Fatal(err)
	}
	if x := processEvent(t, ev).GetExit(); x == nil || x.GetExitCode() != 0 {
		t.Fatalf("last event %+v, want exit 0", ev)
	}
	if ev, err := nextEvent(br); !errors.Is(err, io.EOF) {
		t.Fatalf("after the exit: %+v, %v", ev, err)
	}
}

// TestProcessWholeBody: the whole request at once (start, stdin, close),
// as SSE and as newline-delimited JSON; and a body that just ends (no
// close frame) closes stdin too.
func TestProcessWholeBody(t *testing.T) {
	base, _ := newEchoAPI(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, tc := range []struct {
		name  string
		sse   bool
		close bool
	}{{"sse", true, true}, {"ndjson", false, true}, {"body ends", true, false}} {
		t.Run(tc.name, func(t *testing.T) {
			body := startFrame(t) + stdinFrame(t, "a\n") + "\n" + stdinFrame(t, "b\n")
			if tc.close {
				body += closeFrame(t)
			}
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/plumb.v1.SandboxService/Process", strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+testToken)
			if tc.sse {
				req.Header.Set("Accept", mimeSSE)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var msgs []*plumbv1.ProcessResponse
			br := bufio.NewReader(resp.Body)
			if tc.sse {
				for {
					ev, err := nextEvent(br)
					if errors.Is(err, io.EOF) {
						break
					}
					if err != nil {
						t.Fatal(err)
					}
					if ev.id != fmt.Sprint(len(msgs)+1) {
						t.Fatalf("event %d has id %q", len(msgs)+1, ev.id)
					}
					msgs = append(msgs, processEvent(t, ev))
				}
			} else {
				for sc := bufio.NewScanner(br); sc.Scan(); {
					var line struct{ Result json.RawMessage }
					var m plumbv1.ProcessResponse
					if err := json.Unmarshal(sc.Bytes(), &line); err != nil || protojson.Unmarshal(line.Result, &m) != nil {
						t.Fatalf("not a result line: %s", sc.Bytes())
					}
					msgs = append(msgs, &m)
				}
			}
			if len(msgs) != 4 || msgs[0].GetStarted() == nil || string(msgs[1].GetStdout()) != "a\n" || string(msgs[2].GetStdout()) != "b\n" || msgs[3].GetExit() == nil {
				t.Fatalf("messages %v", msgs)
			}
		})
	}
}

// TestProcessBadFrames: a bad first frame is an ordinary error response
// before any call; a bad or oversized frame later ends the stream with an
// error event that names it, and cancels the call (the process ends).
// Last-Event-ID is refused on a stream that names no execution to
// re-attach to.
func TestProcessBadFrames(t *testing.T) {
	const limit = 1 << 10
	base, echo := newEchoAPI(t, func(c *Config) { c.BodyLimit = func(string) int64 { return limit } })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	post := func(body string, hdr map[string]string) (*http.Response, ErrorBody) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/plumb.v1.SandboxService/Process", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+testToken)
		req.Header.Set("Accept", mimeSSE)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var e ErrorBody
		if err := json.Unmarshal(b, &e); err != nil {
			t.Fatalf("HTTP %d, not an error body: %s", resp.StatusCode, b)
		}
		return resp, e
	}
	for _, tc := range []struct {
		name   string
		body   string
		hdr    map[string]string
		status int
		reason string
	}{
		{"not JSON", "start\n", nil, http.StatusBadRequest, ReasonBadFrame},
		{"unknown field", `{"begin":{}}` + "\n", nil, http.StatusBadRequest, ReasonBadFrame},
		{"two lines", "{\n}\n", nil, http.StatusBadRequest, ReasonBadFrame},
		{"over the limit", `{"stdin":"` + strings.Repeat("A", limit) + `"}` + "\n", nil, http.StatusRequestEntityTooLarge, ReasonBodyTooLarge},
		{"Last-Event-ID", startFrame(t), map[string]string{"Last-Event-ID": "3"}, http.StatusBadRequest, ReasonNotResumable},
		{"the handler's own", `{"stdin":"aGk="}` + "\n", nil, http.StatusBadRequest, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, e := post(tc.body, tc.hdr)
			if resp.StatusCode != tc.status || e.Reason != tc.reason || resp.Header.Get("Content-Type") != "application/json" {
				t.Fatalf("HTTP %d %+v, want HTTP %d reason %q", resp.StatusCode, e, tc.status, tc.reason)
			}
		})
	}
	// Nothing called the service but the last case; drain its end.
	if err := <-echo.ended; status.Code(err) != codes.InvalidArgument {
		t.Fatalf("the handler's own error: %v", err)
	}

	for _, tc := range []struct {
		name, frame, reason string
	}{
		{"bad frame", "{nope\n", ReasonBadFrame},
		{"frame over the limit", stdinFrame(t, strings.Repeat("x", limit)), ReasonBodyTooLarge},
	} {
		t.Run("mid-stream/"+tc.name, func(t *testing.T) {
			pw, resp := openProcess(t, ctx, base, nil)
			br := bufio.NewReader(resp.Body)
			if ev, err := nextEvent(br); err != nil || processEvent(t, ev).GetStarted() == nil {
				t.Fatalf("first event: %+v %v", ev, err)
			}
			if _, err := io.WriteString(pw, tc.frame); err != nil {
				t.Fatal(err)
			}
			ev, err := nextEvent(br)
			if err != nil {
				t.Fatal(err)
			}
			var e ErrorBody
			if ev.event != "error" || json.Unmarshal([]byte(ev.data), &e) != nil || e.Reason != tc.reason || !strings.Contains(e.Message, "frame 2") {
				t.Fatalf("event %+v, want an error event with reason %s naming frame 2", ev, tc.reason)
			}
			if ev, err := nextEvent(br); !errors.Is(err, io.EOF) {
				t.Fatalf("after the error: %+v %v", ev, err)
			}
			if err := <-echo.ended; status.Code(err) != codes.Canceled {
				t.Fatalf("the call ended with %v, want it cancelled", err)
			}
		})
	}
}

// TestProcessClientGone: closing the response ends the call, as a gRPC
// client's cancel does (for sandboxd, the process is killed).
func TestProcessClientGone(t *testing.T) {
	base, echo := newEchoAPI(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rctx, drop := context.WithCancel(ctx)
	_, resp := openProcess(t, rctx, base, nil)
	if ev, err := nextEvent(bufio.NewReader(resp.Body)); err != nil || processEvent(t, ev).GetStarted() == nil {
		t.Fatalf("first event: %+v %v", ev, err)
	}
	drop()
	resp.Body.Close()
	select {
	case err := <-echo.ended:
		if status.Code(err) != codes.Canceled {
			t.Fatalf("the call ended with %v, want it cancelled", err)
		}
	case <-ctx.Done():
		t.Fatal("the call went on after its client left")
	}
}

// TestUploadFilesOverHTTP: newline-delimited frames (several items, one
// in two chunks) make one UploadFiles call; a bad frame is 400 naming it,
// one over the limit 413, the handler's own errors come through, and a
// cookie-less request without a token is refused as ever.
func TestUploadFilesOverHTTP(t *testing.T) {
	const limit = 1 << 10
	base, _ := newEchoAPI(t, func(c *Config) { c.BodyLimit = func(string) int64 { return limit } })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	post := func(body string, auth bool) (*http.Response, []byte) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/plumb.v1.SandboxService/UploadFiles", strings.NewReader(body))
		if auth {
			req.Header.Set("Authorization", "Bearer "+testToken)
		}
		req.Header.Set("Content-Type", "application/x-ndjson")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, b
	}
	// Many frames, more than one line's worth of the limit in total.
	var body strings.Builder
	body.WriteString(`{"sandboxId":"sbx-1","path":"/a.txt","data":"` + b64("hello ") + `"}` + "\n")
	body.WriteString(`{"data":"` + b64("world") + `","eof":true}` + "\r\n")
	for i := range 20 {
		fmt.Fprintf(&body, `{"path":"/f%d","data":"%s","eof":true}`+"\n", i, b64(strings.Repeat("z", 100)))
	}
	body.WriteString(`{"path":"/last","data":"` + b64("!") + `","eof":true}`) // no final newline
	resp, b := post(body.String(), true)
	var out plumbv1.UploadFilesResponse
	if resp.StatusCode != http.StatusOK || protojson.Unmarshal(b, &out) != nil {
		t.Fatalf("UploadFiles: HTTP %d %s", resp.StatusCode, b)
	}
	if len(out.Results) != 22 || out.Results[0].GetPath() != "/a.txt" || out.Results[0].GetBytesWritten() != 11 || out.Results[21].GetBytesWritten() != 1 {
		t.Fatalf("results %v", out.Results)
	}

	for _, tc := range []struct {
		name   string
		body   string
		auth   bool
		status int
		code   codes.Code
		reason string
	}{
		{"bad first frame", "nope\n", true, http.StatusBadRequest, codes.InvalidArgument, ReasonBadFrame},
		{"bad later frame", `{"sandboxId":"sbx-1","path":"/a","eof":true}` + "\n" + `{"path":3}` + "\n", true, http.StatusBadRequest, codes.InvalidArgument, ReasonBadFrame},
		{"frame over the limit", `{"sandboxId":"sbx-1","path":"/a","eof":true}` + "\n" + `{"path":"/b","data":"` + strings.Repeat("A", limit) + `"}` + "\n", true, http.StatusRequestEntityTooLarge, codes.ResourceExhausted, ReasonBodyTooLarge},
		{"the handler's own", `{"sandboxId":"sbx-2","path":"/a"}` + "\n", true, http.StatusNotFound, codes.NotFound, ""},
		{"no token", `{"sandboxId":"sbx-1"}` + "\n", false, http.StatusUnauthorized, codes.Unauthenticated, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, b := post(tc.body, tc.auth)
			var e ErrorBody
			if json.Unmarshal(b, &e) != nil || resp.StatusCode != tc.status || e.Code != int32(tc.code) || e.Reason != tc.reason {
				t.Fatalf("HTTP %d %s, want HTTP %d code %v reason %q", resp.StatusCode, b, tc.status, tc.code, tc.reason)
			}
		})
	}
}

// FuzzFrameBody: whatever the body, the frames read are its non-blank
// lines in order, each within the limit; a longer line stops the reading
// with errFrameTooLarge, never a cut or merged frame.
func FuzzFrameBody(f *testing.F) {
	for _, s := range []string{"{}\n{}\n", "\n\n{\"a\":1}\r\n  \n{}", "", "x", strings.Repeat("y", 100) + "\nz\n"} {
		f.Add([]byte(s), uint8(16))
	}
	f.Fuzz(func(t *testing.T, data []byte, limit uint8) {
		lim := int64(limit) + 1
		b := newFrameBody(io.NopCloser(bytes.NewReader(data)), lim, nil, protojson.UnmarshalOptions{}, nil)
		var want [][]byte
		tooLong := false
		for line := range bytes.Lines(data) {
			if int64(len(line)) > lim {
				tooLong = true
				break
			}
			if len(bytes.TrimSpace(line)) > 0 {
				want = append(want, line)
			}
		}
		for i := 0; ; i++ {
			got, err := b.next()
			if errors.Is(err, io.EOF) {
				if tooLong || i != len(want) {
					t.Fatalf("EOF after %d frames, want %d (too long: %v)", i, len(want), tooLong)
				}
				return
			}
			if errors.Is(err, errFrameTooLarge) {
				if !tooLong || i != len(want) {
					t.Fatalf("too large after %d frames, want %d (too long: %v)", i, len(want), tooLong)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if i >= len(want) || !bytes.Equal(got, want[i]) {
				t.Fatalf("frame %d = %q, want %q", i, got, want)
			}
		}
	})
}

// TestFrameBodyLongLines: lines longer than the reader's buffer come whole,
// up to the limit and not past it.
func TestFrameBodyLongLines(t *testing.T) {
	long := strings.Repeat("x", 200<<10)
	for _, tc := range []struct {
		name  string
		limit int64
		want  error
	}{{"within", 1 << 20, nil}, {"exactly", int64(len(long)) + 1, nil}, {"over", int64(len(long)), errFrameTooLarge}} {
		t.Run(tc.name, func(t *testing.T) {
			b := newFrameBody(io.NopCloser(strings.NewReader(long+"\n{}\n")), tc.limit, nil, protojson.UnmarshalOptions{}, nil)
			got, err := b.next()
			if !errors.Is(err, tc.want) {
				t.Fatalf("err %v, want %v", err, tc.want)
			}
			if err == nil {
				if string(got) != long+"\n" {
					t.Fatalf("frame of %d bytes", len(got))
				}
				if next, err := b.next(); err != nil || string(next) != "{}\n" {
					t.Fatalf("next frame %q %v", next, err)
				}
			}
		})
	}
}

// TestProcessResumeFrame: Last-Event-ID on a Process whose start names an
// execution sets the start's after_sequence (unless the start sets it),
// and the events' ids are their sequences, not their places; a
// Last-Event-ID that is not a number is refused.
func TestProcessResumeFrame(t *testing.T) {
	base, _ := newEchoAPI(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	reattach := func(after uint64) string {
		return frame(t, &plumbv1.ProcessRequest{Kind: &plumbv1.ProcessRequest_Start{Start: &plumbv1.ProcessStart{SandboxId: "sbx-1", ExecutionId: "p-1", AfterSequence: after}}})
	}
	for _, tc := range []struct {
		name, body, lei string
		want            string
		ids             []string
	}{
		{"from Last-Event-ID", reattach(0), "7", "p-1 after 7", []string{"8", "9"}},
		{"the frame wins", reattach(3), "7", "p-1 after 3", []string{"4", "5"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/plumb.v1.SandboxService/Process", strings.NewReader(tc.body))
			req.Header.Set("Authorization", "Bearer "+testToken)
			req.Header.Set("Accept", mimeSSE)
			req.Header.Set("Last-Event-ID", tc.lei)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			br := bufio.NewReader(resp.Body)
			var ids []string
			var out string
			for {
				ev, err := nextEvent(br)
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				ids = append(ids, ev.id)
				out += string(processEvent(t, ev).GetStdout())
			}
			if out != tc.want || fmt.Sprint(ids) != fmt.Sprint(tc.ids) {
				t.Fatalf("stdout %q ids %v, want %q ids %v", out, ids, tc.want, tc.ids)
			}
		})
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/plumb.v1.SandboxService/Process", strings.NewReader(reattach(0)))
	req.Header.Set("Authorization", "Bearer "+testToken)
	req.Header.Set("Last-Event-ID", "x")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var e ErrorBody
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil || resp.StatusCode != http.StatusBadRequest || e.Reason != ReasonBadLastEvent {
		t.Fatalf("Last-Event-ID x: HTTP %d %+v %v", resp.StatusCode, e, err)
	}
}
