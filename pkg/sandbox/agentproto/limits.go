package agentproto

import (
	"time"

	"github.com/plumbhq/plumb/pkg/backend"
)

// Limits is what sandboxd accepts from the agent for one request: the
// event kinds it may receive, the largest frame (JSON included) of each
// event and of its final response, and how long sandboxd waits for the
// final response. A frame outside these is a protocol violation.
type Limits struct {
	// Events are the event kinds the request may receive (none when empty).
	Events []string
	// EventBytes bounds one event frame.
	EventBytes int
	// FinalBytes bounds the final response frame.
	FinalBytes int
	// Wait bounds the time from the request to its final response; zero
	// means the caller computes it (execute: its timeout plus a grace) or,
	// for a process, that there is no bound.
	Wait time.Duration
	// Window, when set, bounds the events queued for the request in
	// EventCost-charged bytes: the agent must not send beyond it
	// (ProcWindow), and one that does breaks the protocol.
	Window int
}

// Allows reports whether kind is one of l.Events.
func (l Limits) Allows(kind string) bool {
	for _, k := range l.Events {
		if k == kind {
			return true
		}
	}
	return false
}

// Budget arithmetic. Every []byte travels as base64 (4/3), and JSON string
// escaping at worst turns one byte into six (\u00XX).
const (
	// SmallFrameBytes bounds frames that carry no payload: handles, write
	// results, errors (messages quote at most backend.QuoteMaxChars).
	SmallFrameBytes = 64 << 10
	// ChunkFrameBytes bounds a frame carrying ChunkBytes of data.
	ChunkFrameBytes = ChunkBytes/3*4 + 4 + SmallFrameBytes
	// escape is the worst-case JSON expansion of text.
	escape = 6
	// ResponseWait is the default Wait of file operations: the longest
	// time budget among them (grep) and the file operation timeout, with
	// room for a loaded machine.
	ResponseWait = backend.GrepBudget + backend.FileOpTimeout + 75*time.Second
)

// opLimits is the table of every operation's limits (see the design's
// op table). Ls, glob and grep are bounded by entry counts, not bytes: the
// worst case of their counts times the path and text caps exceeds a frame,
// so they get the whole frame limit and their counts are re-checked after
// decoding.
var opLimits = map[Op]Limits{
	OpHello:  {FinalBytes: SmallFrameBytes, Wait: 30 * time.Second},
	OpLs:     {FinalBytes: MaxFrameBytes, Wait: ResponseWait},
	OpRead:   {FinalBytes: min(MaxFrameBytes, max(backend.ReadByteBudget*escape, backend.MediaCap/3*4+4)+SmallFrameBytes), Wait: ResponseWait},
	OpWrite:  {FinalBytes: SmallFrameBytes, Wait: ResponseWait},
	OpEdit:   {FinalBytes: SmallFrameBytes, Wait: ResponseWait},
	OpDelete: {FinalBytes: SmallFrameBytes, Wait: ResponseWait},
	OpGrep:   {FinalBytes: MaxFrameBytes, Wait: ResponseWait},
	OpGlob:   {FinalBytes: MaxFrameBytes, Wait: ResponseWait},
	// Execute's budget and wait depend on its arguments: ExecuteLimits
	// (this entry is its default output size, streaming).
	OpExecute:       {Events: []string{EventOutput, EventLent, EventLentOn}, EventBytes: ChunkFrameBytes, FinalBytes: (backend.ExecuteInlineOutput+OutputMarkerBytes)*escape + SmallFrameBytes},
	OpUploadFile:    {FinalBytes: SmallFrameBytes, Wait: ResponseWait},
	OpUploadOpen:    {FinalBytes: SmallFrameBytes, Wait: ResponseWait},
	OpUploadChunk:   {FinalBytes: SmallFrameBytes, Wait: ResponseWait},
	OpUploadClose:   {FinalBytes: SmallFrameBytes, Wait: ResponseWait},
	OpDownloadOpen:  {FinalBytes: SmallFrameBytes, Wait: ResponseWait},
	OpDownloadRead:  {FinalBytes: ChunkFrameBytes, Wait: ResponseWait},
	OpDownloadClose: {FinalBytes: SmallFrameBytes, Wait: ResponseWait},
	// A process's request lives as long as the process: no wait.
	OpProcStart:  {Events: []string{EventStarted, EventStdout, EventStderr}, EventBytes: SmallFrameBytes + ProcChunkBytes, FinalBytes: SmallFrameBytes, Window: ProcWindow},
	OpProcWrite:  {FinalBytes: SmallFrameBytes, Wait: ResponseWait},
	OpProcSignal: {FinalBytes: SmallFrameBytes, Wait: ResponseWait},
	OpProcAck:    {FinalBytes: SmallFrameBytes, Wait: ResponseWait},
	OpCancel:     {FinalBytes: SmallFrameBytes, Wait: ResponseWait},
	OpLentTaken:  {FinalBytes: SmallFrameBytes, Wait: ResponseWait},
}

// LimitsOf returns op's limits; ok is false for an op sandboxd does not
// know.
func LimitsOf(op Op) (l Limits, ok bool) {
	l, ok = opLimits[op]
	return l, ok
}

// MaxInlineOutput mirrors the agent's largest accepted max_output_bytes
// (agent.MaxInlineOutput); sandboxd refuses more before sending.
const MaxInlineOutput = 2 << 20

// OutputMarkerBytes is room for the marker line that stands in for the
// omitted middle of truncated output.
const OutputMarkerBytes = 64

// ExecuteLimits returns the limits of one execute: output events only when
// streaming, and a final result large enough for maxOutput bytes of
// output (0 means the default) escaped, plus the marker line.
func ExecuteLimits(args ExecuteArgs) Limits {
	l := opLimits[OpExecute]
	if !args.Stream {
		l.Events, l.EventBytes = nil, 0
	}
	out := args.MaxOutputBytes
	if out <= 0 || out > MaxInlineOutput {
		out = max(out, backend.ExecuteInlineOutput)
		out = min(out, MaxInlineOutput)
	}
	l.FinalBytes = min(MaxFrameBytes, (out+OutputMarkerBytes)*escape+SmallFrameBytes)
	return l
}
