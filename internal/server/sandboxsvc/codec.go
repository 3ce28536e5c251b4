package sandboxsvc

import (
	"errors"
	"unicode/utf8"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
)

// Codec is the server codec a worker serves SandboxService with
// (grpc.ForceServerCodecV2): gRPC's proto codec, except that an upload
// chunk's bytes are not copied out of the buffer gRPC received them in.
// The proto codec unmarshals every UploadFiles message's data into a fresh
// slice: a megabyte allocated and copied per chunk, on memory the runtime
// has often just returned to the kernel, so each chunk also faults its
// pages back in (docs/benchmarks.md, B7). With this codec the chunk keeps
// a reference to gRPC's pooled buffer until the service has written its
// bytes (uploadChunk.free). The wire format is unchanged, and a server
// without the codec serves uploads as before (uploadChunk is a proto
// message to the proto codec).
func Codec() encoding.CodecV2 { return codec{encoding.GetCodecV2(proto.Name)} }

type codec struct{ encoding.CodecV2 }

func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(*uploadChunk)
	if !ok {
		return c.CodecV2.Unmarshal(data, v)
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	if err := m.decode(buf.ReadOnlyData()); err != nil {
		buf.Free()
		return err
	}
	m.buf = buf
	return nil
}

// uploadChunk is one UploadFiles message. Decoded by Codec, its Data
// aliases the received buffer, which free hands back to gRPC's pool; the
// proto codec decodes it as the embedded message (free is then a no-op).
type uploadChunk struct {
	plumbv1.UploadFilesRequest
	buf mem.Buffer
}

// free releases the chunk's buffer (m may be nil); its Data must not be
// used after.
func (m *uploadChunk) free() {
	if m != nil && m.buf != nil {
		m.buf.Free()
		m.buf = nil
	}
}

var (
	errInvalidUTF8 = errors.New("upload chunk: a string field is not valid UTF-8")
	errFieldNumber = errors.New("upload chunk: a field number out of range")
)

// decode parses b, an UploadFilesRequest in the protobuf wire format, as
// proto.Unmarshal would (the last occurrence of a field wins; unknown
// fields are skipped; strings must be valid UTF-8), except that Data
// aliases b.
func (m *uploadChunk) decode(b []byte) error {
	m.UploadFilesRequest = plumbv1.UploadFilesRequest{}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		if num > protowire.MaxValidNumber {
			return errFieldNumber
		}
		b = b[n:]
		switch {
		case typ == protowire.BytesType && num >= 1 && num <= 3:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return protowire.ParseError(n)
			}
			b = b[n:]
			if num == 3 {
				m.Data = v
				continue
			}
			if !utf8.Valid(v) {
				return errInvalidUTF8
			}
			if num == 1 {
				m.SandboxId = string(v)
			} else {
				m.Path = string(v)
			}
		case typ == protowire.VarintType && num == 4:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return protowire.ParseError(n)
			}
			b = b[n:]
			m.Eof = v != 0
		default:
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return protowire.ParseError(n)
			}
			b = b[n:]
		}
	}
	return nil
}
