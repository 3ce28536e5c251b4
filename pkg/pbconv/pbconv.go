// Package pbconv converts between the file engine's and the sandbox
// worker's domain types (pkg/backend) and the plumb.v1 protobuf messages,
// in both directions, so SandboxService and its gRPC client backend agree
// field by field; it also decodes plumb's gRPC statuses (Reason,
// FieldViolations, FileError). Both daemons and agentctl link it, so it
// imports neither the agent core nor the Docker manager: the AgentService
// half is its subpackage agentconv. It holds no logic beyond the mapping.
package pbconv

import (
	"encoding/base64"
	"time"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/pkg/backend"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

var kinds = map[backend.FileKind]plumbv1.FileKind{
	backend.KindFile:    plumbv1.FileKind_FILE_KIND_FILE,
	backend.KindDir:     plumbv1.FileKind_FILE_KIND_DIR,
	backend.KindSymlink: plumbv1.FileKind_FILE_KIND_SYMLINK,
	backend.KindOther:   plumbv1.FileKind_FILE_KIND_OTHER,
}

var lineEndings = map[backend.LineEnding]plumbv1.LineEnding{
	backend.LineEndingLF:    plumbv1.LineEnding_LINE_ENDING_LF,
	backend.LineEndingCRLF:  plumbv1.LineEnding_LINE_ENDING_CRLF,
	backend.LineEndingCR:    plumbv1.LineEnding_LINE_ENDING_CR,
	backend.LineEndingMixed: plumbv1.LineEnding_LINE_ENDING_MIXED,
	backend.LineEndingNone:  plumbv1.LineEnding_LINE_ENDING_NONE,
}

var reasons = map[backend.TruncationReason]plumbv1.TruncationReason{
	backend.TruncatedMaxCount:   plumbv1.TruncationReason_TRUNCATION_REASON_MAX_COUNT,
	backend.TruncatedMaxMatches: plumbv1.TruncationReason_TRUNCATION_REASON_MAX_MATCHES,
	backend.TruncatedTimeBudget: plumbv1.TruncationReason_TRUNCATION_REASON_TIME_BUDGET,
	backend.TruncatedWalkErrors: plumbv1.TruncationReason_TRUNCATION_REASON_WALK_ERRORS,
}

func invert[K, V comparable](m map[K]V) map[V]K {
	out := make(map[V]K, len(m))
	for k, v := range m {
		out[v] = k
	}
	return out
}

var (
	kindsBack       = invert(kinds)
	lineEndingsBack = invert(lineEndings)
	reasonsBack     = invert(reasons)
)

// Timestamp converts an RFC 3339 string ("" = unknown) to a timestamp.
func Timestamp(s string) *timestamppb.Timestamp {
	if s == "" {
		return nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return nil
	}
	return timestamppb.New(t)
}

// RFC3339 converts a timestamp (nil = unknown) to an RFC 3339 UTC string.
func RFC3339(ts *timestamppb.Timestamp) string {
	if ts == nil {
		return ""
	}
	return ts.AsTime().UTC().Format(time.RFC3339Nano)
}

// FileErrorToPB converts an in-band error.
func FileErrorToPB(e *backend.Error) *plumbv1.FileError {
	if e == nil {
		return nil
	}
	return &plumbv1.FileError{Code: string(e.Code), Message: e.Message, Path: e.Path, Details: e.Details}
}

// FileErrorFromPB converts an in-band error back.
func FileErrorFromPB(e *plumbv1.FileError) *backend.Error {
	if e == nil {
		return nil
	}
	return &backend.Error{Code: backend.Code(e.GetCode()), Message: e.GetMessage(), Path: e.GetPath(), Details: e.GetDetails()}
}

// FileInfoToPB converts one entry.
func FileInfoToPB(fi backend.FileInfo) *plumbv1.FileInfo {
	return &plumbv1.FileInfo{Path: fi.Path, Kind: kinds[fi.Kind], IsDir: fi.IsDir, Size: fi.Size, ModifiedAt: Timestamp(fi.ModifiedAt), Mode: fi.Mode}
}

// FileInfoFromPB converts one entry back.
func FileInfoFromPB(fi *plumbv1.FileInfo) backend.FileInfo {
	return backend.FileInfo{Path: fi.GetPath(), Kind: kindsBack[fi.GetKind()], IsDir: fi.GetIsDir(), Size: fi.GetSize(), ModifiedAt: RFC3339(fi.GetModifiedAt()), Mode: fi.Mode}
}

func infosToPB(in []backend.FileInfo) []*plumbv1.FileInfo {
	out := make([]*plumbv1.FileInfo, len(in))
	for i, fi := range in {
		out[i] = FileInfoToPB(fi)
	}
	return out
}

func infosFromPB(in []*plumbv1.FileInfo) []backend.FileInfo {
	out := make([]backend.FileInfo, len(in))
	for i, fi := range in {
		out[i] = FileInfoFromPB(fi)
	}
	return out
}

// LsToPB converts a listing.
func LsToPB(r backend.LsResult) *plumbv1.LsResponse {
	return &plumbv1.LsResponse{Entries: infosToPB(r.Entries), Truncated: r.Truncated}
}

// LsFromPB converts a listing back.
func LsFromPB(r *plumbv1.LsResponse) backend.LsResult {
	return backend.LsResult{Entries: infosFromPB(r.GetEntries()), Truncated: r.GetTruncated()}
}

func optInt64(p *int) *int64 {
	if p == nil {
		return nil
	}
	v := int64(*p)
	return &v
}

func optInt(p *int64) *int {
	if p == nil {
		return nil
	}
	v := int(*p)
	return &v
}

// ReadToPB converts a read result; media content travels as raw bytes.
func ReadToPB(r backend.ReadResult) (*plumbv1.ReadResponse, error) {
	out := &plumbv1.ReadResponse{
		Path: r.Path, MimeType: r.MimeType, TotalLines: optInt64(r.TotalLines),
		StartLine: int64(r.StartLine), EndLine: int64(r.EndLine), NextOffset: optInt64(r.NextOffset),
		EmptyFile: r.EmptyFile, NoLinesRequested: r.NoLinesRequested, OffsetClamped: r.OffsetClamped,
		PartialLine: r.PartialLine, InvalidUtf8: r.InvalidUTF8, LineEnding: lineEndings[r.LineEnding], Size: r.Size,
	}
	if r.Encoding == backend.EncodingBase64 {
		b, err := base64.StdEncoding.DecodeString(r.Content)
		if err != nil {
			return nil, backend.Errorf(backend.CodeInternal, r.Path, "read %s: media content is not valid base64", r.Path)
		}
		out.MediaData = b
	} else {
		out.Content = r.Content
	}
	return out, nil
}

// ReadFromPB converts a read result back.
func ReadFromPB(r *plumbv1.ReadResponse) backend.ReadResult {
	out := backend.ReadResult{
		Path: r.GetPath(), Encoding: backend.EncodingUTF8, MimeType: r.GetMimeType(), Content: r.GetContent(),
		TotalLines: optInt(r.TotalLines), StartLine: int(r.GetStartLine()), EndLine: int(r.GetEndLine()), NextOffset: optInt(r.NextOffset),
		EmptyFile: r.GetEmptyFile(), NoLinesRequested: r.GetNoLinesRequested(), OffsetClamped: r.GetOffsetClamped(),
		PartialLine: r.GetPartialLine(), InvalidUTF8: r.GetInvalidUtf8(), LineEnding: lineEndingsBack[r.GetLineEnding()], Size: r.GetSize(),
	}
	if r.GetMimeType() != "" {
		out.Encoding = backend.EncodingBase64
		out.Content = base64.StdEncoding.EncodeToString(r.GetMediaData())
	}
	return out
}

// GrepToPB converts a grep result.
func GrepToPB(r backend.GrepResult) *plumbv1.GrepResponse {
	out := &plumbv1.GrepResponse{
		Truncated: r.Truncated, TruncationReason: reasons[r.TruncationReason], FilesSearched: int64(r.FilesSearched),
		FilesSkippedBinary: int64(r.FilesSkippedBinary), FilesUnreadable: int64(r.FilesUnreadable), Error: FileErrorToPB(r.Error),
	}
	for _, m := range r.Matches {
		out.Matches = append(out.Matches, &plumbv1.GrepMatch{Path: m.Path, Line: int64(m.Line), Text: m.Text, TextTruncated: m.TextTruncated})
	}
	return out
}

// GrepFromPB converts a grep result back.
func GrepFromPB(r *plumbv1.GrepResponse) backend.GrepResult {
	out := backend.GrepResult{
		Matches: []backend.GrepMatch{}, Truncated: r.GetTruncated(), TruncationReason: reasonsBack[r.GetTruncationReason()],
		FilesSearched: int(r.GetFilesSearched()), FilesSkippedBinary: int(r.GetFilesSkippedBinary()),
		FilesUnreadable: int(r.GetFilesUnreadable()), Error: FileErrorFromPB(r.GetError()),
	}
	for _, m := range r.GetMatches() {
		out.Matches = append(out.Matches, backend.GrepMatch{Path: m.GetPath(), Line: int(m.GetLine()), Text: m.GetText(), TextTruncated: m.GetTextTruncated()})
	}
	return out
}

// GlobToPB converts a glob result.
func GlobToPB(r backend.GlobResult) *plumbv1.GlobResponse {
	return &plumbv1.GlobResponse{Matches: infosToPB(r.Matches), Truncated: r.Truncated, TruncationReason: reasons[r.TruncationReason]}
}

// GlobFromPB converts a glob result back.
func GlobFromPB(r *plumbv1.GlobResponse) backend.GlobResult {
	return backend.GlobResult{Matches: infosFromPB(r.GetMatches()), Truncated: r.GetTruncated(), TruncationReason: reasonsBack[r.GetTruncationReason()]}
}

// CommandFromPB converts a command to an execute request.
func CommandFromPB(c *plumbv1.Command) backend.ExecuteRequest {
	req := backend.ExecuteRequest{
		Command: c.GetCommand(), Cwd: c.GetCwd(), Env: c.GetEnv(),
		MaxOutputBytes: int(c.GetMaxOutputBytes()), OffloadPath: c.GetOffloadPath(),
	}
	if c.GetTimeout() != nil {
		// Sub-second timeouts round up so a positive timeout never becomes
		// "0 = the maximum".
		d := c.GetTimeout().AsDuration()
		s := int((d + time.Second - 1) / time.Second)
		if d < 0 {
			s = -1
		}
		req.TimeoutSeconds = &s
	}
	return req
}

// ExecuteResultToPB converts a command result.
func ExecuteResultToPB(r backend.ExecuteResult) *plumbv1.ExecuteResult {
	out := &plumbv1.ExecuteResult{
		Output: r.Output, TimedOut: r.TimedOut, Truncated: r.Truncated, OutputBytes: r.OutputBytes,
		OffloadedPath: r.OffloadedPath, CaptureTruncated: r.CaptureTruncated, DurationMs: r.DurationMS,
	}
	if r.ExitCode != nil {
		c := int32(*r.ExitCode)
		out.ExitCode = &c
	}
	return out
}

// ExecuteResultFromPB converts a command result back.
func ExecuteResultFromPB(r *plumbv1.ExecuteResult) backend.ExecuteResult {
	out := backend.ExecuteResult{
		Output: r.GetOutput(), TimedOut: r.GetTimedOut(), Truncated: r.GetTruncated(), OutputBytes: r.GetOutputBytes(),
		OffloadedPath: r.GetOffloadedPath(), CaptureTruncated: r.GetCaptureTruncated(), DurationMS: r.GetDurationMs(),
	}
	if r.ExitCode != nil {
		c := int(*r.ExitCode)
		out.ExitCode = &c
	}
	return out
}

// CommandToPB converts an execute request to a command.
func CommandToPB(req backend.ExecuteRequest) *plumbv1.Command {
	c := &plumbv1.Command{Command: req.Command, Cwd: req.Cwd, Env: req.Env, MaxOutputBytes: int64(req.MaxOutputBytes), OffloadPath: req.OffloadPath}
	if req.TimeoutSeconds != nil {
		c.Timeout = durationpb.New(time.Duration(*req.TimeoutSeconds) * time.Second)
	}
	return c
}
