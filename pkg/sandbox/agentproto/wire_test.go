package agentproto

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/plumbhq/plumb/pkg/backend"
)

// bytesArgs has a []byte field, which the codec carries as base64 (no
// protocol type has one now: bulk bytes are binary payloads).
type bytesArgs struct {
	Path    string `json:"path"`
	Content []byte `json:"content"`
}

// wireValues are values of the protocol's types, with the cases that
// differ in JSON: pointers set and nil, empty and nil slices and maps,
// strings that need escaping or are not UTF-8, payload bytes, embedding.
func wireValues() []any {
	one, zero := 1, 0
	mode := uint32(0o755)
	odd := "quote \" backslash \\ nl \n cr \r tab \t nul \x00 del \x7f html <&> bad \xff\xfe ok é 世 \u2028\u2029 😀"
	return []any{
		Request{ID: 1, Op: OpRead, Args: RawMessage(`{"path":"/a"}`), Bin: 3},
		Request{ID: 1<<64 - 1, Op: OpHello},
		Response{ID: 2, Done: true, Result: RawMessage(`{"x":[1,2,{"y":null}]}`)},
		Response{ID: 3, Event: EventOutput, Bin: 10},
		Response{ID: 4, Done: true, Error: &backend.Error{Code: backend.CodeFileNotFound, Message: odd, Path: "/p", Details: map[string]string{"b": "2", "a": odd}}},
		Hello{Version: 3, AgentVersion: "v1", UID: 1000, GID: -1, Root: "/", Workspace: "/workspace"},
		WriteArgs{Path: odd},
		WriteArgs{},
		bytesArgs{Path: odd, Content: []byte{0, 1, 2, 255}},
		bytesArgs{Path: "/empty", Content: []byte{}},
		bytesArgs{},
		ExecuteArgs{ExecuteRequest: backend.ExecuteRequest{Command: odd, Cwd: "/w", Env: map[string]string{"A": "1", "Z": ""}, TimeoutSeconds: &zero, MaxOutputBytes: 7}, Stream: true},
		ExecuteArgs{},
		backend.ExecuteResult{Output: odd, ExitCode: &one, Truncated: true, OutputBytes: -5, DurationMS: 1 << 40},
		backend.ExecuteResult{OutputBytes: math.MinInt64, DurationMS: math.MaxInt64},
		backend.LsResult{Entries: []backend.FileInfo{{Path: "/a", Kind: backend.KindFile, Size: 4, ModifiedAt: "2026-01-01T00:00:00Z", Mode: &mode}, {Path: odd}}},
		backend.LsResult{Entries: []backend.FileInfo{}},
		backend.LsResult{},
		backend.GrepResult{Matches: []backend.GrepMatch{{Path: "/a", Line: 3, Text: odd}}, Truncated: true, TruncationReason: backend.TruncatedMaxCount, Error: &backend.Error{Code: backend.CodeTimeout, Message: "m"}},
		backend.ReadResult{Path: "/a", Encoding: backend.EncodingUTF8, Content: odd, TotalLines: &one, NextOffset: &zero, EmptyFile: true},
		backend.ProcessRequest{Command: "c", Env: map[string]string{}, Port: 8080},
		ProcAckArgs{Target: 9, Bytes: -1},
		DownloadHandle{Handle: "h", Size: 1 << 50},
		DownloadHandle{Handle: "d2", Size: 5, Lent: &Lent{FD: 7, Dev: 1 << 60, Ino: 42}},
		UploadHandle{Handle: "u1", Lent: &Lent{}},
		UploadHandle{Handle: "u2"},
		OpenArgs{Path: odd, Lend: true},
		struct{}{},
	}
}

// TestWireAgreesWithEncodingJSON: what Marshal writes is valid JSON that
// encoding/json reads back to the same value it reads from its own
// encoding, and Unmarshal reads encoding/json's encoding to the value
// encoding/json reads.
func TestWireAgreesWithEncodingJSON(t *testing.T) {
	for _, v := range wireValues() {
		typ := reflect.TypeOf(v)
		ours, err := Marshal(v)
		if err != nil {
			t.Fatalf("%T: %v", v, err)
		}
		theirs, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if !json.Valid(ours) {
			t.Fatalf("%T: invalid JSON %s", v, ours)
		}
		fromOurs, fromTheirs := reflect.New(typ), reflect.New(typ)
		if err := json.Unmarshal(ours, fromOurs.Interface()); err != nil {
			t.Fatalf("%T: encoding/json cannot read %s: %v", v, ours, err)
		}
		if err := json.Unmarshal(theirs, fromTheirs.Interface()); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(fromOurs.Interface(), fromTheirs.Interface()) {
			t.Errorf("%T: ours %s reads as %+v; encoding/json's %s as %+v", v, ours, fromOurs.Elem(), theirs, fromTheirs.Elem())
		}
		decoded := reflect.New(typ)
		if err := Unmarshal(theirs, decoded.Interface()); err != nil {
			t.Fatalf("%T: Unmarshal(%s): %v", v, theirs, err)
		}
		if !reflect.DeepEqual(decoded.Interface(), fromTheirs.Interface()) {
			t.Errorf("%T: Unmarshal(%s) = %+v, encoding/json reads %+v", v, theirs, decoded.Elem(), fromTheirs.Elem())
		}
		result := reflect.New(typ)
		if err := UnmarshalResult(theirs, result.Interface()); err != nil || !reflect.DeepEqual(result.Interface(), fromTheirs.Interface()) {
			t.Errorf("%T: UnmarshalResult(%s) = %+v, %v; encoding/json reads %+v", v, theirs, result.Elem(), err, fromTheirs.Elem())
		}
	}
}

// TestUnmarshalResultSkipsUnknown: a result from a newer agent, with a
// member this worker does not know, reads as encoding/json reads it;
// anything after the value is still refused.
func TestUnmarshalResultSkipsUnknown(t *testing.T) {
	in := `{"entries":[{"path":"/a","kind":"file","size":3,"new":{"x":["y",1]}}],"later":"z","truncated":true}`
	var ours, theirs backend.LsResult
	if err := UnmarshalResult([]byte(in), &ours); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(in), &theirs); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(ours, theirs) || len(ours.Entries) != 1 || !ours.Truncated {
		t.Errorf("UnmarshalResult = %+v, encoding/json %+v", ours, theirs)
	}
	if err := UnmarshalResult([]byte(`{"truncated":true} {}`), &ours); err == nil {
		t.Error("UnmarshalResult accepts data after the value")
	}
}

// TestIntegers: the codec reads integers of every size as strconv does,
// at and past each limit, without making a string of them.
func TestIntegers(t *testing.T) {
	for _, bits := range []int{8, 16, 32, 64} {
		hi := uint64(1)<<bits - 1
		if bits == 64 {
			hi = math.MaxUint64
		}
		lits := []string{"0", "-0", "1", "-1", "10", "007",
			strconv.FormatUint(hi, 10), strconv.FormatUint(hi/2, 10), strconv.FormatUint(hi/2+1, 10),
			"-" + strconv.FormatUint(hi/2+1, 10), "-" + strconv.FormatUint(hi/2+2, 10),
			strconv.FormatUint(hi, 10) + "0", "18446744073709551616", "99999999999999999999999"}
		for _, lit := range lits {
			wantU, errU := strconv.ParseUint(lit, 10, bits)
			if u, ok := parseUint([]byte(lit), bits); ok != (errU == nil) || ok && u != wantU {
				t.Errorf("parseUint(%s, %d) = %d, %v; strconv %d, %v", lit, bits, u, ok, wantU, errU)
			}
			wantI, errI := strconv.ParseInt(lit, 10, bits)
			if i, ok := parseInt([]byte(lit), bits); ok != (errI == nil) || ok && i != wantI {
				t.Errorf("parseInt(%s, %d) = %d, %v; strconv %d, %v", lit, bits, i, ok, wantI, errI)
			}
		}
	}
	var v struct {
		I8  int8   `json:"i8"`
		U16 uint16 `json:"u16"`
	}
	for in, want := range map[string]string{
		`{"i8":-128,"u16":65535}`: "", `{"i8":128}`: "number 128", `{"u16":65536}`: "number 65536", `{"u16":-0}`: "number -0",
	} {
		err := Unmarshal([]byte(in), &v)
		if got := fmt.Sprint(err); want == "" && err != nil || want != "" && !strings.Contains(got, want) {
			t.Errorf("Unmarshal(%s) = %v, want %q", in, err, want)
		}
	}
	if v.I8 != -128 || v.U16 != 65535 {
		t.Errorf("decoded %+v", v)
	}
}

func TestUnmarshalRefuses(t *testing.T) {
	for _, tt := range []struct {
		in   string
		into any
		want string
	}{
		{`{"path":"/a","x":1}`, &PathArgs{}, `unknown field "x"`},
		{`{"id":1,"op":"read"} {}`, &Request{}, "trailing data"},
		{`{"target":1.5}`, &CancelArgs{}, "number 1.5"},
		{`{"target":1e3}`, &CancelArgs{}, "number 1e3"},
		{`{"target":-1}`, &CancelArgs{}, "number -1"},
		{`{"target":18446744073709551616}`, &CancelArgs{}, "number 18446744073709551616"},
		{`{"length":"3"}`, &DownloadReadArgs{}, "cannot decode a string"},
		{`{"path":3}`, &PathArgs{}, "cannot decode a number"},
		{`{"commit":"yes"}`, &UploadCloseArgs{}, "cannot decode a string"},
		{`{"content":"!!"}`, &bytesArgs{}, "invalid base64"},
		{`{"path":"/a"`, &PathArgs{}, "expected ',' or '}'"},
		{`{"path":"/a\q"}`, &PathArgs{}, "invalid escape"},
		{"{\"path\":\"/a\x01\"}", &PathArgs{}, "control character"},
		{`{"path":"/a}`, &PathArgs{}, "unterminated string"},
		{`{"id":01}`, &Request{}, "expected ','"},
		{`{"id":1,"op":"x","args":[` + strings.Repeat("[", maxDepth) + `]}`, &Request{}, "nesting too deep"},
		{`{"id":1,"op":"x","args":{"a":tru}}`, &Request{}, "invalid literal"},
		{`nul`, &PathArgs{}, "invalid literal"},
		{``, &PathArgs{}, "cannot decode a end of input"},
		{`{"details":{"a":1}}`, &backend.Error{}, "cannot decode a number"},
	} {
		err := Unmarshal([]byte(tt.in), tt.into)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Unmarshal(%.60q) = %v, want an error with %q", tt.in, err, tt.want)
		}
		if json.Unmarshal([]byte(tt.in), tt.into) == nil && !strings.Contains(tt.want, "unknown field") && !strings.Contains(tt.want, "trailing") {
			t.Errorf("encoding/json accepts %.60q: the refusal is ours alone", tt.in)
		}
	}
}

func TestUnmarshalAccepts(t *testing.T) {
	var r Request
	in := ` { "ID" : 7 , "op":"read", "args" : {"a": [1, "x", null, true, false, -0.5e-3, {}]} , "bin":0 } `
	if err := Unmarshal([]byte(in), &r); err != nil {
		t.Fatal(err)
	}
	if r.ID != 7 || r.Op != OpRead || string(r.Args) != `{"a": [1, "x", null, true, false, -0.5e-3, {}]}` {
		t.Errorf("%+v (args %s)", r, r.Args)
	}
	var e backend.ExecuteRequest
	if err := Unmarshal([]byte(`{"command":"\u00e9\ud83d\ude00\ud800x\/","env":null,"timeout_s":null}`), &e); err != nil {
		t.Fatal(err)
	}
	if e.Command != "é😀\ufffdx/" || e.Env != nil || e.TimeoutSeconds != nil {
		t.Errorf("%+v", e)
	}
}

func TestPeekID(t *testing.T) {
	for in, want := range map[string]uint64{
		`{"id":5,"op":"read","zzz":{"a":[1]}}`: 5,
		`{"id":6} trailing`:                    6,
		`{"zzz":1}`:                            0,
		`{"id":"7"}`:                           0,
		`not json`:                             0,
	} {
		if got := PeekID([]byte(in)); got != want {
			t.Errorf("PeekID(%s) = %d, want %d", in, got, want)
		}
	}
}

func TestMarshalRefusesUnsupported(t *testing.T) {
	for _, v := range []any{struct{ F float64 }{1}, map[int]string{1: "a"}, struct{ C chan int }{}} {
		if b, err := Marshal(v); err == nil {
			t.Errorf("Marshal(%T) = %s, want an error", v, b)
		}
	}
}

// FuzzUnmarshal: on any input, Unmarshal and a strict encoding/json
// decoder (unknown fields refused, nothing after the value) agree on
// whether it decodes, and when it does, on the value; Marshal of that
// value reads back to it.
func FuzzUnmarshal(f *testing.F) {
	for _, v := range wireValues() {
		b, _ := json.Marshal(v)
		f.Add(b)
	}
	f.Add([]byte(`{"id":1,"op":"x","args":{"a":"\ud800\udc00\u0000"}}`))
	f.Add([]byte(`{"code":"x","details":{"k":"v","k":"w"}}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		// UnmarshalResult against encoding/json.Unmarshal itself.
		for _, typ := range []reflect.Type{reflect.TypeFor[backend.LsResult](), reflect.TypeFor[backend.ReadResult](), reflect.TypeFor[backend.GrepResult]()} {
			ours, theirs := reflect.New(typ), reflect.New(typ)
			errOurs, errTheirs := UnmarshalResult(in, ours.Interface()), json.Unmarshal(in, theirs.Interface())
			if (errOurs == nil) != (errTheirs == nil) {
				t.Fatalf("%s: UnmarshalResult error %v, encoding/json %v, input %q", typ, errOurs, errTheirs, in)
			}
			if errOurs == nil && !reflect.DeepEqual(ours.Interface(), theirs.Interface()) {
				t.Fatalf("%s: UnmarshalResult %+v, encoding/json %+v, input %q", typ, ours.Elem(), theirs.Elem(), in)
			}
		}
		for _, typ := range []reflect.Type{reflect.TypeFor[Request](), reflect.TypeFor[Response](), reflect.TypeFor[ExecuteArgs](), reflect.TypeFor[backend.GrepResult]()} {
			ours, theirs := reflect.New(typ), reflect.New(typ)
			errOurs := Unmarshal(in, ours.Interface())
			dec := json.NewDecoder(bytes.NewReader(in))
			dec.DisallowUnknownFields()
			errTheirs := dec.Decode(theirs.Interface())
			// encoding/json's decoder stops after the value; Unmarshal
			// also refuses anything but JSON's spaces after it.
			if errTheirs == nil && len(bytes.Trim(in[dec.InputOffset():], " \t\r\n")) > 0 {
				errTheirs = errSentinel
			}
			if (errOurs == nil) != (errTheirs == nil) {
				t.Fatalf("%s: Unmarshal error %v, encoding/json %v, input %q", typ, errOurs, errTheirs, in)
			}
			if errOurs != nil {
				continue
			}
			if !reflect.DeepEqual(ours.Interface(), theirs.Interface()) {
				t.Fatalf("%s: Unmarshal %+v, encoding/json %+v, input %q", typ, ours.Elem(), theirs.Elem(), in)
			}
			b, err := Marshal(ours.Elem().Interface())
			if err != nil {
				t.Fatal(err)
			}
			back := reflect.New(typ)
			if err := json.Unmarshal(b, back.Interface()); err != nil || !reflect.DeepEqual(back.Interface(), ours.Interface()) {
				t.Fatalf("%s: Marshal %s reads back as %+v (%v), want %+v", typ, b, back.Elem(), err, ours.Elem())
			}
		}
	})
}

var errSentinel = &json.SyntaxError{}

// BenchmarkCodec compares the codec with encoding/json on B1's frames: 4
// KiB as base64 in arguments and a read's result.
func BenchmarkCodec(b *testing.B) {
	content := bytes.Repeat([]byte("line 0001 xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\n"), 64)
	args := bytesArgs{Path: "/workspace/b1/write.txt", Content: content}
	one := 1
	res := backend.ReadResult{Path: "/workspace/b1/read.txt", Encoding: backend.EncodingUTF8, Content: string(content), TotalLines: &one, StartLine: 1, EndLine: 64}
	for _, c := range []struct {
		name      string
		marshal   func(any) ([]byte, error)
		unmarshal func([]byte, any) error
	}{
		{"wire", Marshal, Unmarshal},
		{"encoding-json", json.Marshal, json.Unmarshal},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				ab, _ := c.marshal(args)
				var a bytesArgs
				if err := c.unmarshal(ab, &a); err != nil {
					b.Fatal(err)
				}
				rb, _ := c.marshal(res)
				var r backend.ReadResult
				if err := c.unmarshal(rb, &r); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
