package httpapi

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
)

// The request body of a method that streams from the client (UploadFiles,
// Process) is newline-delimited JSON: one request message per line, read
// and sent as it arrives. Each line is bounded like one gRPC message (the
// method's body limit), the body as a whole is not, as a gRPC stream's
// is not. A line that is not the request's JSON, or one over the limit,
// ends the call: the client stream is cancelled (for Process the process
// is killed, as a cancelled gRPC call kills it) and the answer is that
// line's error, not the cancellation.

// errFrameTooLarge is a request line over the method's limit.
var errFrameTooLarge = errors.New("request frame too large")

// bodyError is the request body's own failure, which the error handlers
// answer instead of whatever it made the call fail with.
type bodyError interface {
	failure() (*status.Status, int, bool)
}

// bodyFailure is the failure of the request body of ctx's request.
func bodyFailure(ctx context.Context) (*status.Status, int, bool) {
	if b, ok := ctx.Value(bodyKey{}).(bodyError); ok {
		return b.failure()
	}
	return nil, 0, false
}

// frameBody is the request body of a client stream: lines of at most limit
// bytes, each one request message.
type frameBody struct {
	r      io.ReadCloser
	br     *bufio.Reader
	limit  int64
	input  protoreflect.MessageDescriptor
	opts   protojson.UnmarshalOptions
	cancel context.CancelFunc

	// held, for a bidirectional stream, is closed when its call has
	// returned: a frame that fails the call is not reported to the
	// gateway before then, because the gateway answers any decode error
	// by half-closing the stream (CloseSend), which could reach the
	// server before the cancellation does and read as the client's
	// end of input (for Process: stdin closed, not the process killed).
	held chan struct{}

	n      int                // frames read
	unread []byte             // a frame given back (the first, checked before the call)
	head   *dynamicpb.Message // the first frame, decoded (nil for an empty body)

	mu   sync.Mutex
	st   *status.Status
	code int
}

func newFrameBody(r io.ReadCloser, limit int64, input protoreflect.MessageDescriptor, opts protojson.UnmarshalOptions, cancel context.CancelFunc) *frameBody {
	return &frameBody{r: r, br: bufio.NewReaderSize(r, 64<<10), limit: limit, input: input, opts: opts, cancel: cancel}
}

// Read is io.Reader's, for whoever reads the body as bytes (nothing in the
// gateway does: it takes frames through the marshaler's decoder).
func (b *frameBody) Read(p []byte) (int, error) { return b.br.Read(p) }

func (b *frameBody) Close() error { return b.r.Close() }

// next is the next non-blank line, io.EOF at the end of the body.
func (b *frameBody) next() ([]byte, error) {
	if b.unread != nil {
		f := b.unread
		b.unread = nil
		return f, nil
	}
	for {
		line, err := b.line()
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(line)) > 0 {
			b.n++
			return line, nil
		}
	}
}

// line reads one line, its end included, of at most limit bytes.
func (b *frameBody) line() ([]byte, error) {
	var buf []byte
	for {
		chunk, err := b.br.ReadSlice('\n')
		if int64(len(buf)+len(chunk)) > b.limit {
			return nil, errFrameTooLarge
		}
		buf = append(buf, chunk...)
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF):
			if len(buf) == 0 {
				return nil, io.EOF
			}
			return buf, nil // a last line without its newline
		case err != nil:
			return nil, err
		}
		return buf, nil
	}
}

// read is the next frame, io.EOF at the end of the body; a frame over
// the limit, or a body that breaks off, fails the call.
func (b *frameBody) read() ([]byte, error) {
	line, err := b.next()
	switch {
	case err == nil, errors.Is(err, io.EOF):
		return line, err
	case errors.Is(err, errFrameTooLarge):
		return nil, b.fail(apiError(codes.ResourceExhausted, ReasonBodyTooLarge,
			fmt.Sprintf("request frame %d: over %d bytes (one message per line)", b.n+1, b.limit)), http.StatusRequestEntityTooLarge)
	default:
		return nil, b.fail(status.New(codes.Canceled, "reading the request body: "+err.Error()), runtime.HTTPStatusFromCode(codes.Canceled))
	}
}

// unmarshal decodes one frame into m; a frame that is not m's JSON fails
// the call.
func (b *frameBody) unmarshal(line []byte, m proto.Message) error {
	if err := b.opts.Unmarshal(line, m); err != nil {
		return b.fail(apiError(codes.InvalidArgument, ReasonBadFrame,
			fmt.Sprintf("request frame %d: not a %s in JSON on one line (one message per line; curl's -d strips newlines, --data-binary keeps them): %v", b.n, b.input.FullName(), err)), http.StatusBadRequest)
	}
	return nil
}

// decode reads the next frame into m.
func (b *frameBody) decode(m proto.Message) error {
	line, err := b.read()
	if err != nil {
		return err
	}
	return b.unmarshal(line, m)
}

// first reads and checks the first frame before the call starts, and
// gives it back for the gateway to read again. false with no error is an
// empty body.
func (b *frameBody) first() (bool, error) {
	line, err := b.read()
	if errors.Is(err, io.EOF) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	head := dynamicpb.NewMessage(b.input)
	if err := b.unmarshal(line, head); err != nil {
		return false, err
	}
	b.unread, b.head = line, head
	return true, nil
}

// replaceFirst gives back m instead of the first frame read.
func (b *frameBody) replaceFirst(m *dynamicpb.Message) error {
	line, err := protojson.Marshal(m)
	if err != nil {
		return err
	}
	b.unread, b.head = append(line, '\n'), m
	return nil
}

// resumeStart is the message in a bidirectional stream's first frame that
// can re-attach (a Process start: a message field with execution_id and
// after_sequence), or nil.
func resumeStart(head *dynamicpb.Message) protoreflect.Message {
	if head == nil {
		return nil
	}
	var out protoreflect.Message
	head.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd.Kind() != protoreflect.MessageKind || fd.IsList() || fd.IsMap() {
			return true
		}
		m := v.Message()
		id, after := m.Descriptor().Fields().ByName("execution_id"), m.Descriptor().Fields().ByName("after_sequence")
		if id != nil && id.Kind() == protoreflect.StringKind && after != nil && after.Kind() == protoreflect.Uint64Kind {
			out = m
			return false
		}
		return true
	})
	return out
}

// resumable reports whether start (resumeStart's) starts a resumable
// stream or re-attaches to one: its messages then carry sequences.
func resumable(start protoreflect.Message) bool {
	if start == nil {
		return false
	}
	fs := start.Descriptor().Fields()
	if fd := fs.ByName("resumable"); fd != nil && fd.Kind() == protoreflect.BoolKind && start.Get(fd).Bool() {
		return true
	}
	return start.Get(fs.ByName("execution_id")).String() != ""
}

// fail records the body's failure (the first one counts) and cancels the
// call it feeds.
func (b *frameBody) fail(st *status.Status, code int) error {
	b.mu.Lock()
	if b.st == nil {
		b.st, b.code = st, code
	}
	b.mu.Unlock()
	if b.cancel != nil {
		b.cancel()
	}
	return st.Err()
}

func (b *frameBody) failure() (*status.Status, int, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.st, b.code, b.st != nil
}

// frameDecoder is the gateway's decoder of a client stream's body.
type frameDecoder struct{ b *frameBody }

func (d frameDecoder) Decode(v any) error {
	m, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("decode %T: not a message", v)
	}
	err := d.b.decode(m)
	if err != nil && !errors.Is(err, io.EOF) && d.b.held != nil {
		<-d.b.held
	}
	return err
}

// NewDecoder is the JSON marshaler's, except for a client stream's body,
// whose lines it decodes one by one.
func (m jsonMarshaler) NewDecoder(r io.Reader) runtime.Decoder {
	if b, ok := r.(*frameBody); ok {
		return frameDecoder{b}
	}
	return m.JSONPb.NewDecoder(r)
}
