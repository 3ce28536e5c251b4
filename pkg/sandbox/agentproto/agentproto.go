// Package agentproto is the wire protocol between sandboxd and the sandbox
// agent running inside each container: newline-delimited JSON frames over
// the agent's stdin (requests) and stdout (responses), multiplexed by
// request id so concurrent operations on one sandbox proceed in parallel.
// Small values travel inside the JSON (a []byte field base64-encoded).
// Bulk bytes (upload chunks, download reads, execute output) travel as a
// binary payload instead: the frame's JSON carries "bin": N and exactly N
// raw bytes follow its newline. This avoids base64's third more bytes and
// every JSON pass over the data, which made bulk transfers CPU-bound in
// the box (docs/benchmarks.md, B7).
//
// A request gets zero or more event responses (Done false: execute output)
// and then exactly one final response (Done true) carrying
// a Result or an Error. The container is untrusted: decoders bound every
// frame by MaxFrameBytes, and a malformed frame is a protocol error that
// resets the channel.
//
// This package holds only types, framing and the frames' JSON codec
// (wire.go); it must not import gRPC or Docker, nor package net or
// encoding/json: the in-box agent links it, and links neither
// (test/layering). sandboxd may encode arguments and decode results with
// encoding/json: the wire is plain JSON either way.
package agentproto

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/plumbhq/plumb/pkg/backend"
)

// Version is the protocol version the agent reports in its hello result
// (3: binary payloads; 4: lent output pipes; 5: a write's content is its
// request's payload).
const Version = 5

// OwnEnv is the variable of a box's environment that names,
// comma-separated, the variables the worker set there for the agent alone
// (GOMAXPROCS): the agent removes them, and OwnEnv itself, from the
// environment its commands inherit. A tenant's environment cannot set it.
const OwnEnv = "PLUMB_AGENT_OWN_ENV"

// MaxFrameBytes bounds one frame (one line, JSON included): the largest
// are an execute's inline output at worst escaped (MaxInlineOutput) and an
// edit's strings. Bulk bytes travel as binary payloads after their frame
// (a write's content, upload and download chunks).
const MaxFrameBytes = 16 << 20

// ChunkBytes is the payload size of upload and download chunks and of
// execute output events at most.
const ChunkBytes = 1 << 20

// Window is how many upload chunks or download reads sandboxd keeps in
// flight on one transfer: the memory a transfer holds on either side is
// bounded by Window × ChunkBytes (plus base64 and JSON framing).
const Window = 8

// Op names an operation.
type Op string

// Operations. Each lists its Args type and Result type.
const (
	OpHello         Op = "hello"          // no args → Hello
	OpLs            Op = "ls"             // PathArgs → backend.LsResult
	OpRead          Op = "read"           // backend.ReadRequest → backend.ReadResult
	OpWrite         Op = "write"          // WriteArgs + payload (the content, ≤ backend.WriteCap) → backend.WriteResult
	OpEdit          Op = "edit"           // backend.EditRequest → backend.EditResult
	OpDelete        Op = "delete"         // PathArgs → backend.DeleteResult
	OpGrep          Op = "grep"           // backend.GrepRequest → backend.GrepResult
	OpGlob          Op = "glob"           // backend.GlobRequest → backend.GlobResult
	OpExecute       Op = "execute"        // ExecuteArgs → backend.ExecuteResult (+ output events when Stream)
	OpUploadFile    Op = "upload_file"    // PathArgs + payload (≤ ChunkBytes) → backend.WriteResult
	OpUploadOpen    Op = "upload_open"    // OpenArgs → UploadHandle
	OpUploadChunk   Op = "upload_chunk"   // UploadChunkArgs + payload → empty result
	OpUploadClose   Op = "upload_close"   // UploadCloseArgs → backend.WriteResult
	OpDownloadOpen  Op = "download_open"  // OpenArgs → DownloadHandle
	OpDownloadRead  Op = "download_read"  // DownloadReadArgs → empty result, the bytes as payload
	OpDownloadClose Op = "download_close" // DownloadCloseArgs → empty result
	OpCancel        Op = "cancel"         // CancelArgs → empty result
	OpLentTaken     Op = "lent_taken"     // LentTakenArgs → empty result
	// Interactive processes. A proc_start request lives as long as its
	// process: its id names the process in the other proc ops, it gets a
	// started event once the process runs, stdout and stderr events with
	// the output as payload, and a final backend.ProcessExit once the
	// process has exited and its output is delivered. Cancelling it kills
	// the process and every descendant. A request with service set runs
	// its process as a uid of its own instead of the sandbox user (its
	// tag; docs/security.md, Service processes).
	OpProcStart  Op = "proc_start"  // backend.ProcessRequest → backend.ProcessExit (+ events)
	OpProcWrite  Op = "proc_write"  // ProcWriteArgs + payload → empty result
	OpProcSignal Op = "proc_signal" // ProcSignalArgs → empty result
	OpProcAck    Op = "proc_ack"    // ProcAckArgs → empty result
)

// Event kinds of non-final responses.
const (
	EventOutput  = "output"  // execute output bytes, in order
	EventLent    = "lent"    // an execute's output pipe, lent: Result is its Lent
	EventLentOn  = "lent_on" // the rest of the execute's output is in the lent pipe
	EventStarted = "started" // a proc_start's process is running
	EventStdout  = "stdout"  // a process's standard output, in order
	EventStderr  = "stderr"  // a process's standard error, in order
)

// Output flow control of interactive processes. The agent may have at most
// ProcWindow bytes of a process's output events unacknowledged, each event
// costing its payload plus EventCost; sandboxd returns credit with
// proc_ack as its reader consumes output. An agent that sends beyond its
// credit breaks the protocol. The window bounds what a process's output
// holds on the worker however slowly its reader reads; a process whose
// output is not read blocks on its pipe.
const (
	ProcWindow = 256 << 10
	// EventCost is charged per process output event on top of its
	// payload, so that a flood of tiny events is bounded too.
	EventCost = 256
	// ProcChunkBytes bounds one process output event's payload and one
	// proc_write's payload.
	ProcChunkBytes = 64 << 10
	// MaxProcesses bounds the interactive processes running at once in
	// one sandbox.
	MaxProcesses = 16
	// MaxConns bounds the port forwards (proc_start with a port) open at
	// once in one sandbox; they do not count against MaxProcesses.
	MaxConns = 32
)

// ProcWriteArgs write the request's payload to process Target's standard
// input, then close it when EOF is set.
type ProcWriteArgs struct {
	Target uint64 `json:"target"`
	EOF    bool   `json:"eof,omitempty"`
}

// ProcSignalArgs send Signal (a backend.Process signal name) to process
// Target and its descendants.
type ProcSignalArgs struct {
	Target uint64 `json:"target"`
	Signal string `json:"signal"`
}

// ProcAckArgs return Bytes of output credit to process Target.
type ProcAckArgs struct {
	Target uint64 `json:"target"`
	Bytes  int64  `json:"bytes"`
}

// Request is a frame from sandboxd to the agent.
type Request struct {
	// ID is unique among the requests in flight on one channel.
	ID uint64 `json:"id"`
	// Op is the operation.
	Op Op `json:"op"`
	// Args are the operation's arguments (see the Op constants).
	Args RawMessage `json:"args,omitempty"`
	// Bin is the length of the binary payload that follows the frame.
	Bin int `json:"bin,omitempty"`
	// Payload is the binary payload (upload_chunk's data).
	Payload []byte `json:"-"`
}

// Response is a frame from the agent to sandboxd.
type Response struct {
	// ID is the request's id.
	ID uint64 `json:"id"`
	// Event names a stream event; empty for the final response.
	Event string `json:"event,omitempty"`
	// Bin is the length of the binary payload that follows the frame.
	Bin int `json:"bin,omitempty"`
	// Data is the binary payload: an output event's bytes, or a
	// download_read's data.
	Data []byte `json:"-"`
	// Done marks the final response of a request.
	Done bool `json:"done,omitempty"`
	// Result is the final response's result on success, or a lent
	// event's Lent.
	Result RawMessage `json:"result,omitempty"`
	// Error is the final response's error on failure.
	Error *backend.Error `json:"error,omitempty"`
}

// Hello is the agent's self-description.
type Hello struct {
	// Version is the protocol version.
	Version int `json:"version"`
	// AgentVersion is the agent binary's build version.
	AgentVersion string `json:"agent_version"`
	// UID and GID are the identity file operations and commands run as.
	UID int `json:"uid"`
	GID int `json:"gid"`
	// Root is the engine root directory (default "/").
	Root string `json:"root"`
	// Workspace is the default working directory for execute.
	Workspace string `json:"workspace"`
}

// PathArgs are the arguments of single-path operations.
type PathArgs struct {
	Path string `json:"path"`
}

// WriteArgs are the arguments of OpWrite; the file's whole content, at
// most backend.WriteCap bytes, is the request's binary payload (as bytes,
// not base64 in the frame: a write's content is most of its request).
type WriteArgs struct {
	Path string `json:"path"`
}

// PayloadLimit is the largest binary payload a request of op may carry:
// a write's whole content, otherwise one chunk.
func PayloadLimit(op Op) int {
	if op == OpWrite {
		return backend.WriteCap
	}
	return ChunkBytes
}

// ExecuteArgs are the arguments of OpExecute.
type ExecuteArgs struct {
	backend.ExecuteRequest
	// Stream asks for output events as the command produces output.
	Stream bool `json:"stream,omitempty"`
	// Lend asks, with Stream, for a pipe the output can go through
	// instead of the channel (docs/security.md, "Streamed output through
	// a lent pipe"): the agent names it in a lent event; once the worker
	// has taken it (OpLentTaken), a lent_on event says the rest of the
	// output is in the pipe, whose write end the agent closes before its
	// final response.
	Lend bool `json:"lend,omitempty"`
}

// LentTakenArgs tell the agent that the worker holds the pipe execute
// request Target lent.
type LentTakenArgs struct {
	Target uint64 `json:"target"`
}

// OpenArgs are the arguments of OpUploadOpen and OpDownloadOpen (and of
// OpUploadFile, which ignores Lend).
type OpenArgs struct {
	Path string `json:"path"`
	// Lend asks for the open file's descriptor in the handle: the worker
	// may then move the transfer's bytes through it itself
	// (docs/security.md, "Bulk bytes through the agent's open file").
	Lend bool `json:"lend,omitempty"`
}

// Lent names the agent's descriptor of a transfer's open file, and the
// file's device and inode, which the worker checks on the duplicate it
// takes.
type Lent struct {
	FD  int    `json:"fd"`
	Dev uint64 `json:"dev"`
	Ino uint64 `json:"ino"`
}

// UploadHandle names an open upload. Lent is set when the open asked for
// it: the worker may write the bytes through that descriptor instead of
// sending chunks, and the close then checks the file's size alone.
type UploadHandle struct {
	Handle string `json:"handle"`
	Lent   *Lent  `json:"lent,omitempty"`
}

// UploadChunkArgs write bytes at Offset of an open upload. Chunks may
// arrive in any order and up to Window at once; the bytes, at most
// ChunkBytes, are the request's binary payload.
type UploadChunkArgs struct {
	Handle string `json:"handle"`
	Offset int64  `json:"offset"`
}

// UploadCloseArgs finish an upload: Commit checks that exactly Size bytes
// were written and renames the data into place atomically; otherwise the
// temporary file is removed.
type UploadCloseArgs struct {
	Handle string `json:"handle"`
	Commit bool   `json:"commit"`
	Size   int64  `json:"size"`
}

// DownloadHandle names an open download and the file's size at open;
// Lent as in UploadHandle, for reads.
type DownloadHandle struct {
	Handle string `json:"handle"`
	Size   int64  `json:"size"`
	Lent   *Lent  `json:"lent,omitempty"`
}

// DownloadReadArgs read Length bytes (at most ChunkBytes) at Offset of an
// open download; the range lies within its size.
type DownloadReadArgs struct {
	Handle string `json:"handle"`
	Offset int64  `json:"offset"`
	Length int    `json:"length"`
}

// DownloadCloseArgs close an open download.
type DownloadCloseArgs struct {
	Handle string `json:"handle"`
}

// CancelArgs cancel a request in flight.
type CancelArgs struct {
	Target uint64 `json:"target"`
}

// ErrFrameTooLarge is returned by Reader when a frame exceeds its limit.
var ErrFrameTooLarge = errors.New("agent frame exceeds the size limit")

// RetainBytes is the most a Reader keeps allocated between frames: the
// buffer a larger frame needed is released once the next frame is read.
const RetainBytes = 64 << 10

// Reader reads newline-delimited frames with a size bound.
type Reader struct {
	br  *bufio.Reader
	max int
	buf []byte

	// Grow, when set, is told before the frame buffer takes n more bytes
	// beyond RetainBytes; an error stops the frame (Next returns it). The
	// reader's owner uses it to charge a memory budget and to refuse a
	// frame larger than it can accept before it is all buffered.
	Grow func(n int) error
}

// NewReader reads frames of at most max bytes (MaxFrameBytes when max ≤ 0)
// from r.
func NewReader(r io.Reader, max int) *Reader {
	if max <= 0 {
		max = MaxFrameBytes
	}
	return &Reader{br: bufio.NewReaderSize(r, RetainBytes), max: max}
}

// Next returns the next frame without its newline. The slice is valid until
// the next call. A frame longer than the limit returns ErrFrameTooLarge
// (the stream is then unusable); a final unterminated frame is
// io.ErrUnexpectedEOF. A buffer grown past RetainBytes by the previous
// frame is dropped first, so a reader never holds more than that between
// frames.
func (r *Reader) Next() ([]byte, error) {
	if cap(r.buf) > RetainBytes {
		r.buf = nil
	}
	r.buf = r.buf[:0]
	for {
		chunk, err := r.br.ReadSlice('\n')
		if len(r.buf)+len(chunk) > r.max+1 {
			r.buf = nil
			return nil, ErrFrameTooLarge
		}
		if r.Grow != nil {
			if over := len(r.buf) + len(chunk) - max(len(r.buf), RetainBytes); over > 0 {
				if gerr := r.Grow(over); gerr != nil {
					r.buf = nil
					return nil, gerr
				}
			}
		}
		r.buf = append(r.buf, chunk...)
		switch {
		case err == nil:
			return bytes.TrimSuffix(r.buf[:len(r.buf)-1], []byte{'\r'}), nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(r.buf) > 0:
			return nil, io.ErrUnexpectedEOF
		default:
			return nil, err
		}
	}
}

// ReadPayload reads the n-byte binary payload that follows the frame Next
// returned (n is the frame's Bin, already checked against the reader's
// bounds by the caller). The slice is the caller's to keep.
func (r *Reader) ReadPayload(n int) ([]byte, error) {
	if n < 0 || n > r.max {
		return nil, ErrFrameTooLarge
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r.br, b); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return b, nil
}

// ReadPayloadInto is ReadPayload into b, which the caller provides (a
// reused buffer): it reads exactly len(b) bytes.
func (r *Reader) ReadPayloadInto(b []byte) error {
	if len(b) > r.max {
		return ErrFrameTooLarge
	}
	if _, err := io.ReadFull(r.br, b); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return err
	}
	return nil
}

// DecodeRequest parses a request frame strictly.
func DecodeRequest(frame []byte) (Request, error) {
	var req Request
	if err := Unmarshal(frame, &req); err != nil {
		return Request{}, fmt.Errorf("malformed request frame: %w", err)
	}
	if req.ID == 0 || req.Op == "" {
		return Request{}, errors.New("malformed request frame: id and op are required")
	}
	if req.Bin < 0 {
		return Request{}, errors.New("malformed request frame: negative bin")
	}
	return req, nil
}

// DecodeResponse parses a response frame strictly.
func DecodeResponse(frame []byte) (Response, error) {
	var resp Response
	if err := Unmarshal(frame, &resp); err != nil {
		return Response{}, fmt.Errorf("malformed response frame: %w", err)
	}
	if resp.ID == 0 {
		return Response{}, errors.New("malformed response frame: id is required")
	}
	if resp.Bin < 0 {
		return Response{}, errors.New("malformed response frame: negative bin")
	}
	if resp.Done == (resp.Event != "") {
		return Response{}, errors.New("malformed response frame: exactly one of done and event must be set")
	}
	if resp.Error != nil && resp.Error.Code == "" {
		return Response{}, errors.New("malformed response frame: error without code")
	}
	return resp, nil
}

// Writer writes frames; it is safe for concurrent use.
type Writer struct {
	sem chan struct{} // one writer at a time; waiting honours the context
	w   io.Writer
	// standing is the write deadline set on w, left in place between
	// writes (zero: none); the holder of sem owns it.
	standing time.Time
}

// NewWriter writes frames to w.
func NewWriter(w io.Writer) *Writer { return &Writer{sem: make(chan struct{}, 1), w: w} }

// Write encodes v as one frame: a Request's Payload or a Response's Data
// follows it as its binary payload. A frame larger than MaxFrameBytes, or
// a payload larger than its PayloadLimit (ChunkBytes for a response), is
// refused before anything is written.
func (w *Writer) Write(v any) error {
	return w.WriteContext(context.Background(), v, 0)
}

// deadliner is the part of net.Conn that bounds a write.
type deadliner interface{ SetWriteDeadline(time.Time) error }

// WriteContext is Write with bounds: waiting for another writer ends with
// ctx (nothing was written: the error is ctx's), and when the underlying
// writer has SetWriteDeadline (a net.Conn) the write itself must finish
// by ctx's deadline, or within def when ctx has none (def ≤ 0: no
// deadline; a write bounded by def gets between def/2 and def, see bound).
// A write that fails after it started may have left a partial frame: the
// stream is then unusable.
func (w *Writer) WriteContext(ctx context.Context, v any, def time.Duration) error {
	var payload []byte
	limit := ChunkBytes
	switch f := v.(type) {
	case Request:
		payload, f.Bin, limit = f.Payload, len(f.Payload), PayloadLimit(f.Op)
		v = f
	case Response:
		payload, f.Bin = f.Data, len(f.Data)
		v = f
	}
	b, err := Marshal(v)
	if err != nil {
		return err
	}
	if len(b) > MaxFrameBytes || len(payload) > limit {
		return ErrFrameTooLarge
	}
	b = append(b, '\n')
	select {
	case w.sem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-w.sem }()
	if d, ok := w.w.(deadliner); ok {
		w.bound(d, ctx, def)
	}
	if len(payload) == 0 {
		_, err = w.w.Write(b)
		return err
	}
	// Header and payload in one writev where the writer has a descriptor.
	return writeBuffers(w.w, [][]byte{b, payload})
}

// bound sets the deadline of the write about to be made on d: ctx's, or
// def from now, or none. A write bounded by def keeps the deadline already
// set while def/2 to def of it is left: setting a deadline arms a runtime
// timer, and a timer armed and dropped around every write wakes the
// runtime's network poller on each request (docs/benchmarks.md, B1-runsc).
// The caller holds sem.
func (w *Writer) bound(d deadliner, ctx context.Context, def time.Duration) {
	set := func(t time.Time) {
		w.standing = t
		_ = d.SetWriteDeadline(t)
	}
	now := time.Now()
	switch dl, has := ctx.Deadline(); {
	case has:
		set(dl)
	case def > 0:
		if left := w.standing.Sub(now); left < def/2 || left > def {
			set(now.Add(def))
		}
	case !w.standing.IsZero():
		set(time.Time{})
	}
}

// Result marshals a final success response for request id.
func Result(id uint64, v any) Response {
	b, err := Marshal(v)
	if err != nil {
		return Failure(id, backend.Errorf(backend.CodeInternal, "", "encode result: %v", err))
	}
	return Response{ID: id, Done: true, Result: b}
}

// Failure is a final error response for request id.
func Failure(id uint64, err *backend.Error) Response {
	return Response{ID: id, Done: true, Error: err}
}
