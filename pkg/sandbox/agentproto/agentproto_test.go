package agentproto

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/plumbhq/plumb/pkg/backend"
)

func TestRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(&buf)
	payload := []byte{0, 1, '\n', 0xff}
	if err := w.Write(Response{ID: 7, Event: EventOutput, Data: payload}); err != nil {
		t.Fatal(err)
	}
	if err := w.Write(Result(7, backend.WriteResult{Path: "/a", BytesWritten: 4, Created: true})); err != nil {
		t.Fatal(err)
	}
	if err := w.Write(Failure(8, backend.Errorf(backend.CodeFileNotFound, "/x", "read /x: no such file"))); err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(buf.Bytes(), []byte{'\n'}); n != 3 {
		t.Fatalf("%d newlines, want one per frame (payload bytes must be base64)", n)
	}
	r := NewReader(&buf, 0)
	var got []Response
	for {
		f, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		resp, err := DecodeResponse(f)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, resp)
	}
	if len(got) != 3 || !bytes.Equal(got[0].Data, payload) || !got[1].Done || got[2].Error.Code != backend.CodeFileNotFound {
		t.Fatalf("got %+v", got)
	}
}

func TestReaderLimits(t *testing.T) {
	tests := []struct {
		name    string
		input   string
		max     int
		want    []string
		wantErr error
	}{
		{"two frames", "{\"a\":1}\n{}\n", 16, []string{`{"a":1}`, `{}`}, io.EOF},
		{"crlf tolerated", "{}\r\n", 16, []string{`{}`}, io.EOF},
		{"exactly max", strings.Repeat("x", 16) + "\n", 16, []string{strings.Repeat("x", 16)}, io.EOF},
		{"over max", strings.Repeat("x", 17) + "\n", 16, nil, ErrFrameTooLarge},
		{"huge without newline", strings.Repeat("x", 1<<20), 1024, nil, ErrFrameTooLarge},
		{"unterminated", "{}", 16, nil, io.ErrUnexpectedEOF},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := NewReader(strings.NewReader(tt.input), tt.max)
			var got []string
			var err error
			for {
				var f []byte
				f, err = r.Next()
				if err != nil {
					break
				}
				got = append(got, string(f))
			}
			if !errors.Is(err, tt.wantErr) || strings.Join(got, "|") != strings.Join(tt.want, "|") {
				t.Fatalf("frames %q err %v; want %q err %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestDecodeRejectsMalformed(t *testing.T) {
	bad := []string{
		``, `null`, `[]`, `{"id":1}`, `{"id":0,"done":true}`, `{"id":1,"done":true,"event":"chunk"}`,
		`{"id":1,"done":true,"surprise":1}`, `{"id":1,"done":true}{"id":2}`, `{"id":1,"done":true,"error":{"message":"x"}}`,
		`{"id":1,"event":"chunk","data":"not base64!"}`, `{"id":-1,"done":true}`,
	}
	for _, in := range bad {
		if _, err := DecodeResponse([]byte(in)); err == nil {
			t.Errorf("DecodeResponse(%q) accepted a malformed frame", in)
		}
	}
	for _, in := range []string{`{"id":1}`, `{"op":"ls"}`, `{"id":1,"op":"ls","x":1}`} {
		if _, err := DecodeRequest([]byte(in)); err == nil {
			t.Errorf("DecodeRequest(%q) accepted a malformed frame", in)
		}
	}
}

func TestWriterRefusesOversizedFrames(t *testing.T) {
	var buf bytes.Buffer
	err := NewWriter(&buf).Write(Response{ID: 1, Event: EventOutput, Data: make([]byte, MaxFrameBytes)})
	if !errors.Is(err, ErrFrameTooLarge) || buf.Len() != 0 {
		t.Fatalf("err = %v, wrote %d bytes", err, buf.Len())
	}
}

func FuzzDecodeResponse(f *testing.F) {
	f.Add([]byte(`{"id":1,"done":true,"result":{"path":"/a"}}`))
	f.Add([]byte(`{"id":2,"event":"output","data":"aGk="}`))
	f.Add([]byte(`{"id":3,"done":true,"error":{"code":"invalid_path","message":"x"}}`))
	f.Fuzz(func(t *testing.T, frame []byte) {
		resp, err := DecodeResponse(frame)
		if err != nil {
			return
		}
		if resp.ID == 0 || resp.Done == (resp.Event != "") {
			t.Fatalf("accepted invalid frame %q as %+v", frame, resp)
		}
		// Anything accepted must survive a re-encode.
		var buf bytes.Buffer
		if err := NewWriter(&buf).Write(resp); err != nil {
			t.Fatal(err)
		}
		f, err := NewReader(&buf, 0).Next()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := DecodeResponse(f); err != nil {
			t.Fatalf("re-encoded frame rejected: %v", err)
		}
	})
}

func FuzzReader(f *testing.F) {
	f.Add([]byte("{}\n{}\n"), 8)
	f.Add([]byte("xxxxxxxxxxxxxxxxxxxxxx\n"), 4)
	f.Fuzz(func(t *testing.T, in []byte, max int) {
		if max <= 0 || max > 1<<16 {
			max = 64
		}
		r := NewReader(bytes.NewReader(in), max)
		for i := 0; i <= len(in); i++ {
			fr, err := r.Next()
			if err != nil {
				return
			}
			if len(fr) > max || bytes.IndexByte(fr, '\n') >= 0 {
				t.Fatalf("frame of %d bytes (max %d) or with newline", len(fr), max)
			}
		}
	})
}
