package sandboxsvc

import (
	"bytes"
	"testing"
	"unsafe"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// sameAsProto checks that decode and proto.Unmarshal agree on b: both fail,
// or both succeed with the same fields.
func sameAsProto(t *testing.T, b []byte) {
	t.Helper()
	var want plumbv1.UploadFilesRequest
	werr := proto.Unmarshal(b, &want)
	var got uploadChunk
	gerr := got.decode(b)
	if (werr == nil) != (gerr == nil) {
		t.Fatalf("decode(%x): error %v, proto.Unmarshal: %v", b, gerr, werr)
	}
	if werr != nil {
		return
	}
	if got.GetSandboxId() != want.GetSandboxId() || got.GetPath() != want.GetPath() || got.GetEof() != want.GetEof() || !bytes.Equal(got.GetData(), want.GetData()) {
		t.Fatalf("decode(%x) = %q %q %v %x, proto.Unmarshal = %q %q %v %x", b,
			got.GetSandboxId(), got.GetPath(), got.GetEof(), got.GetData(), want.GetSandboxId(), want.GetPath(), want.GetEof(), want.GetData())
	}
}

func marshal(t testing.TB, m *plumbv1.UploadFilesRequest) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestUploadChunkDecode(t *testing.T) {
	full := marshal(t, &plumbv1.UploadFilesRequest{SandboxId: "sb-1", Path: "/workspace/a.bin", Data: bytes.Repeat([]byte{7}, 1000), Eof: true})
	unknown := protowire.AppendTag(nil, 9, protowire.BytesType)
	unknown = protowire.AppendBytes(unknown, []byte("later field"))
	unknown = protowire.AppendTag(unknown, 10, protowire.Fixed64Type)
	unknown = protowire.AppendFixed64(unknown, 42)
	badUTF8 := protowire.AppendTag(nil, 2, protowire.BytesType)
	badUTF8 = protowire.AppendBytes(badUTF8, []byte{0xff, 0xfe})
	for _, tt := range []struct {
		name string
		b    []byte
	}{
		{"empty", nil},
		{"every field", full},
		{"data only", marshal(t, &plumbv1.UploadFilesRequest{Data: []byte("x")})},
		{"empty data present", protowire.AppendBytes(protowire.AppendTag(nil, 3, protowire.BytesType), nil)},
		{"unknown fields skipped", append(slicesClone(full), unknown...)},
		{"last occurrence wins", append(slicesClone(full), marshal(t, &plumbv1.UploadFilesRequest{Path: "/b", Data: []byte("y"), Eof: false})...)},
		{"eof false explicitly", protowire.AppendVarint(protowire.AppendTag(nil, 4, protowire.VarintType), 0)},
		{"invalid UTF-8 in a string", badUTF8},
		{"truncated", full[:len(full)-1]},
		{"bad tag", []byte{0x80}},
		{"field zero", []byte{0x02, 0x00}},
	} {
		t.Run(tt.name, func(t *testing.T) { sameAsProto(t, tt.b) })
	}
	// The data is not copied: it is the input's own bytes.
	var m uploadChunk
	if err := m.decode(full); err != nil {
		t.Fatal(err)
	}
	start, end := uintptr(unsafe.Pointer(&full[0])), uintptr(unsafe.Pointer(&full[len(full)-1]))
	if p := uintptr(unsafe.Pointer(&m.Data[0])); p < start || p > end {
		t.Fatal("decoded data is a copy, want a slice of the input")
	}
}

func slicesClone(b []byte) []byte { return append([]byte(nil), b...) }

func FuzzUploadChunkDecode(f *testing.F) {
	f.Add(marshal(f, &plumbv1.UploadFilesRequest{SandboxId: "sb", Path: "/p", Data: []byte("abc"), Eof: true}))
	f.Add([]byte{0x1a, 0x00, 0x20, 0x01})
	f.Add([]byte{0x4b, 0x4c})
	f.Fuzz(func(t *testing.T, b []byte) { sameAsProto(t, b) })
}

// countingPool hands out plain buffers and counts those put back.
type countingPool struct{ puts int }

func (p *countingPool) Get(n int) *[]byte { b := make([]byte, n); return &b }
func (p *countingPool) Put(*[]byte)       { p.puts++ }

// TestCodecHoldsBufferUntilFree: an upload chunk decoded by the codec
// keeps gRPC's buffer (its data reads from it) until free, which returns
// it to its pool once; other messages decode as the proto codec does.
func TestCodecHoldsBufferUntilFree(t *testing.T) {
	c := Codec()
	// Large enough for gRPC to pool it (smaller buffers are not counted).
	want := &plumbv1.UploadFilesRequest{SandboxId: "sb-1", Path: "/a", Data: bytes.Repeat([]byte("chunk bytes "), 400), Eof: true}
	pool := &countingPool{}
	b := marshal(t, want)
	buf := mem.NewBuffer(&b, pool)
	var m uploadChunk
	if err := c.Unmarshal(mem.BufferSlice{buf}, &m); err != nil {
		t.Fatal(err)
	}
	buf.Free() // gRPC drops its own reference after decoding
	if pool.puts != 0 {
		t.Fatal("the buffer went back to its pool while the chunk holds it")
	}
	if !proto.Equal(&m.UploadFilesRequest, want) {
		t.Fatalf("decoded %v, want %v", &m.UploadFilesRequest, want)
	}
	m.free()
	m.free() // a second free is a no-op
	if pool.puts != 1 {
		t.Fatalf("buffer put back %d times after free, want once", pool.puts)
	}
	var nilChunk *uploadChunk
	nilChunk.free()

	// A malformed chunk is refused and its buffer released.
	bad := append(protowire.AppendTag(nil, 3, protowire.BytesType), protowire.AppendVarint(nil, 9000)...)
	bad = append(bad, make([]byte, 8000)...) // 1000 bytes short
	pool2 := &countingPool{}
	buf2 := mem.NewBuffer(&bad, pool2)
	if err := c.Unmarshal(mem.BufferSlice{buf2}, &uploadChunk{}); err == nil {
		t.Fatal("a truncated chunk decoded")
	}
	buf2.Free()
	if pool2.puts != 1 {
		t.Fatalf("a refused chunk's buffer put back %d times, want once", pool2.puts)
	}

	// Any other message goes through the proto codec.
	other := &plumbv1.GetSandboxRequest{SandboxId: "sb-2"}
	ob, err := proto.Marshal(other)
	if err != nil {
		t.Fatal(err)
	}
	var got plumbv1.GetSandboxRequest
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(ob)}, &got); err != nil || got.GetSandboxId() != "sb-2" {
		t.Fatalf("other message: %v %v", &got, err)
	}
}
