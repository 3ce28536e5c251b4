package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
)

func testJSON() jsonMarshaler {
	return jsonMarshaler{&runtime.JSONPb{MarshalOptions: protojson.MarshalOptions{EmitUnpopulated: true}}}
}

func TestSSEMarshaler(t *testing.T) {
	m := sseMarshaler{testJSON()}
	st, err := status.New(codes.InvalidArgument, "bad\ninput").WithDetails(
		&errdetails.ErrorInfo{Reason: "INVALID_ARGUMENT", Metadata: map[string]string{"k": "v"}},
		&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: "input", Description: "empty"}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		in   any
		want []string // lines of the event, in order
	}{
		{"event", map[string]any{"result": &plumbv1.AttachResponse{Event: &plumbv1.Event{Sequence: 7, RunId: "r"}}},
			[]string{"id: 7", `data: {"event":{"sequence":"7"`}},
		{"no event", map[string]any{"result": &plumbv1.ExecuteStreamResponse{}},
			[]string{"data: {"}},
		{"execute sequence", map[string]any{"result": &plumbv1.ExecuteStreamResponse{Sequence: 3}},
			[]string{"id: 3", `data: {`}},
		{"error", map[string]proto.Message{"error": st.Proto()},
			[]string{"event: error", `data: {"code":3,"status":"INVALID_ARGUMENT","message":"bad\ninput","reason":"INVALID_ARGUMENT","metadata":{"k":"v"},"fieldViolations":[{"field":"input","description":"empty"}]}`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := m.Marshal(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.HasSuffix(b, []byte("\n\n")) || bytes.Count(b, []byte("\n\n")) != 1 {
				t.Fatalf("not one event: %q", b)
			}
			lines := strings.Split(strings.TrimSuffix(string(b), "\n\n"), "\n")
			if len(lines) != len(tc.want) {
				t.Fatalf("lines %q, want %d", lines, len(tc.want))
			}
			for i, w := range tc.want {
				if !strings.HasPrefix(lines[i], w) {
					t.Errorf("line %d = %q, want prefix %q", i, lines[i], w)
				}
			}
		})
	}
	// The newline-delimited form carries the same error body.
	b, err := testJSON().Marshal(map[string]proto.Message{"error": st.Proto()})
	if err != nil {
		t.Fatal(err)
	}
	var chunk struct{ Error ErrorBody }
	if err := json.Unmarshal(b, &chunk); err != nil || chunk.Error.Status != "INVALID_ARGUMENT" || len(chunk.Error.FieldViolations) != 1 {
		t.Fatalf("error line %s: %v", b, err)
	}
}

// TestSSEWriter: keep-alives while quiet, whole events, and an error after
// the stream started as an error event, before it as a JSON response.
func TestSSEWriter(t *testing.T) {
	t.Run("keep-alive then error event", func(t *testing.T) {
		rec := httptest.NewRecorder()
		w := newSSEWriter(rec, time.Millisecond)
		// Poll: keep-alives come from the writer's goroutine.
		for deadline := time.Now().Add(time.Minute); ; {
			w.mu.Lock()
			n := strings.Count(rec.Body.String(), ": keep-alive\n\n")
			w.mu.Unlock()
			if n >= 2 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("no keep-alives")
			}
			time.Sleep(time.Millisecond)
		}
		w.Header().Set("Content-Type", "application/json") // the gateway's, too late
		writeError(w, status.New(codes.Unavailable, "gone"), http.StatusServiceUnavailable)
		w.close()
		if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != mimeSSE {
			t.Fatalf("HTTP %d %q", rec.Code, rec.Header().Get("Content-Type"))
		}
		body := rec.Body.String()
		if !strings.HasSuffix(body, "event: error\ndata: {\"code\":14,\"status\":\"UNAVAILABLE\",\"message\":\"gone\",\"reason\":\"\",\"metadata\":{},\"fieldViolations\":[]}\n\n") {
			t.Fatalf("body %q", body)
		}
	})
	t.Run("failed before the first message", func(t *testing.T) {
		rec := httptest.NewRecorder()
		w := newSSEWriter(rec, time.Hour)
		w.Header().Set("Content-Type", mimeSSE)
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write(errorEvent(status.New(codes.InvalidArgument, "no")))
		w.close()
		var e ErrorBody
		if rec.Code != http.StatusBadRequest || rec.Header().Get("Content-Type") != "application/json" || json.Unmarshal(rec.Body.Bytes(), &e) != nil || e.Code != 3 {
			t.Fatalf("HTTP %d %q %q", rec.Code, rec.Header().Get("Content-Type"), rec.Body.String())
		}
	})
	t.Run("error before anything", func(t *testing.T) {
		rec := httptest.NewRecorder()
		w := newSSEWriter(rec, time.Hour)
		writeError(w, status.New(codes.Unauthenticated, "who"), http.StatusUnauthorized)
		w.close()
		if rec.Code != http.StatusUnauthorized || rec.Header().Get("Content-Type") != "application/json" || rec.Header().Get("WWW-Authenticate") == "" {
			t.Fatalf("HTTP %d %v", rec.Code, rec.Header())
		}
	})
}

func TestSessions(t *testing.T) {
	ctx := context.Background()
	s := newSessions(time.Hour, 2)
	a, _, _ := s.create(ctx, "tok-a")
	b, _, _ := s.create(ctx, "tok-b")
	if a == b || len(a) < 40 || strings.Contains(a, "tok") {
		t.Fatalf("session ids %q %q", a, b)
	}
	if tok, ok, _ := s.get(ctx, a); !ok || tok != "tok-a" {
		t.Fatalf("get(a) = %q %v", tok, ok)
	}
	c, _, _ := s.create(ctx, "tok-c") // over the bound: the oldest goes
	if _, ok, _ := s.get(ctx, a); ok {
		t.Fatal("the oldest session survived the bound")
	}
	_ = s.delete(ctx, c)
	if _, ok, _ := s.get(ctx, c); ok {
		t.Fatal("a deleted session")
	}
	expired := newSessions(-time.Second, 10)
	d, _, _ := expired.create(ctx, "x")
	if _, ok, _ := expired.get(ctx, d); ok {
		t.Fatal("an expired session")
	}
}

// FuzzEventData: whatever protojson or json writes, one event's data lines
// give it back.
func FuzzEventData(f *testing.F) {
	for _, s := range []string{`{"a":1}`, "two\nlines", "", "\r\n", "data: x"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 || bytes.ContainsAny(data, "\r") || bytes.HasSuffix(data, []byte("\n")) {
			return // JSON on our streams has none of these
		}
		var b bytes.Buffer
		writeData(&b, data)
		ev := b.Bytes()
		if !bytes.HasSuffix(ev, []byte("\n\n")) || bytes.Contains(ev[:len(ev)-1], []byte("\n\n")) {
			t.Fatalf("not one event: %q", ev)
		}
		if got := eventData(ev); !bytes.Equal(got, data) {
			t.Fatalf("eventData(%q) = %q, want %q", ev, got, data)
		}
	})
}
