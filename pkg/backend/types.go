package backend

// FileKind is the type of a directory entry.
type FileKind string

// File kinds of FileInfo.Kind.
const (
	KindFile    FileKind = "file"
	KindDir     FileKind = "dir"
	KindSymlink FileKind = "symlink"
	// KindOther covers FIFOs, sockets, devices, and entries whose stat failed.
	KindOther FileKind = "other"
)

// FileInfo describes one entry of an ls listing or a glob result.
type FileInfo struct {
	// Path is the absolute virtual path; directory paths end with "/".
	Path string `json:"path"`
	// Kind is the entry type; symlinks are never followed.
	Kind FileKind `json:"kind"`
	// IsDir is Kind == KindDir, kept for consumers that only need that.
	IsDir bool `json:"is_dir"`
	// Size is the size in bytes (0 for directories).
	Size int64 `json:"size"`
	// ModifiedAt is an RFC 3339 UTC timestamp, "" when unknown.
	ModifiedAt string `json:"modified_at"`
	// Mode holds the Unix permission bits (mask 0o777) where the backend
	// has them (Filesystem, Sandbox); nil elsewhere (State, Store).
	Mode *uint32 `json:"mode,omitempty"`
}

// LsResult is the result of Ls.
type LsResult struct {
	// Entries are the direct children, sorted bytewise by Path.
	Entries []FileInfo `json:"entries"`
	// Truncated is set when more than LsMaxEntries children exist.
	Truncated bool `json:"truncated"`
}

// Encoding names how ReadResult.Content is encoded.
type Encoding string

// Content encodings.
const (
	EncodingUTF8   Encoding = "utf-8"
	EncodingBase64 Encoding = "base64"
)

// LineEnding classifies the line terminators of a text file.
type LineEnding string

// Line-ending classes. None means no terminator was seen.
const (
	LineEndingLF    LineEnding = "lf"
	LineEndingCRLF  LineEnding = "crlf"
	LineEndingCR    LineEnding = "cr"
	LineEndingMixed LineEnding = "mixed"
	LineEndingNone  LineEnding = "none"
)

// ReadRequest asks for a window of a file's lines (docs/file-tools.md §4.2).
type ReadRequest struct {
	// Path is the file to read (raw; the backend normalizes it).
	Path string `json:"path"`
	// Offset is the 0-based index of the first line; negative is clamped
	// to 0 and reported as OffsetClamped.
	Offset int `json:"offset"`
	// Limit is the number of lines wanted; ≤ 0 reads nothing and reports
	// NoLinesRequested. The tool layer supplies DefaultReadLimit.
	Limit int `json:"limit"`
}

// ReadResult is the result of Read. Exactly one of these holds: EmptyFile,
// NoLinesRequested, Encoding == EncodingBase64 (media), or a text window
// (StartLine ≥ 1).
//
// Optional numbers are pointers: nil encodes the unknown of docs/file-tools.md §3. StartLine and
// EndLine are 0 when there is no window.
type ReadResult struct {
	// Path is the normalized virtual path.
	Path string `json:"path"`
	// Encoding is utf-8 for text, base64 for media.
	Encoding Encoding `json:"encoding"`
	// MimeType is set for media only.
	MimeType string `json:"mime_type,omitempty"`
	// Content holds the window lines joined by LF (no trailing LF, no CR),
	// or the whole file in standard base64 for media.
	Content string `json:"content"`
	// TotalLines is the file's line count; nil when unknown (the file was
	// larger than TotalLinesCountMax and the window did not reach EOF).
	TotalLines *int `json:"total_lines,omitempty"`
	// StartLine is the 1-based number of the first window line.
	StartLine int `json:"start_line,omitempty"`
	// EndLine is the 1-based number of the last window line (inclusive).
	EndLine int `json:"end_line,omitempty"`
	// NextOffset is the offset that continues the read (== EndLine); nil
	// when the window reached the last line.
	NextOffset *int `json:"next_offset,omitempty"`
	// EmptyFile reports a zero-byte file.
	EmptyFile bool `json:"empty_file"`
	// NoLinesRequested reports Limit ≤ 0 on a non-empty text file.
	NoLinesRequested bool `json:"no_lines_requested"`
	// OffsetClamped reports that a negative offset was replaced by 0.
	OffsetClamped bool `json:"offset_clamped"`
	// PartialLine reports that the single window line exceeded
	// ReadByteBudget and was cut at a UTF-8 boundary.
	PartialLine bool `json:"partial_line"`
	// InvalidUTF8 reports that window bytes were shown as U+FFFD.
	InvalidUTF8 bool `json:"invalid_utf8"`
	// LineEnding classifies the terminators the read scanned (the whole
	// file whenever TotalLines is known); empty when nothing was scanned.
	LineEnding LineEnding `json:"line_ending,omitempty"`
	// Size is the file size in bytes.
	Size int64 `json:"size"`
}

// WriteResult is the result of Write.
type WriteResult struct {
	// Path is the normalized virtual path.
	Path string `json:"path"`
	// BytesWritten is len(content).
	BytesWritten int64 `json:"bytes_written"`
	// Created is false when an existing file was replaced.
	Created bool `json:"created"`
}

// EditRequest asks to replace text in a file (docs/file-tools.md §4.4).
type EditRequest struct {
	// Path is the file to edit (raw; the backend normalizes it).
	Path string `json:"path"`
	// Old is the exact text to find; it must be non-empty.
	Old string `json:"old_string"`
	// New replaces Old; it must differ from Old.
	New string `json:"new_string"`
	// ReplaceAll replaces every occurrence instead of requiring one.
	ReplaceAll bool `json:"replace_all"`
}

// EditResult is the result of Edit.
type EditResult struct {
	// Path is the normalized virtual path.
	Path string `json:"path"`
	// Occurrences is the number of replacements made.
	Occurrences int `json:"occurrences"`
	// LineEndingAdapted reports that Old and New were converted to the
	// file's line-ending style to match.
	LineEndingAdapted bool `json:"line_ending_adapted"`
}

// DeleteResult is the result of Delete.
type DeleteResult struct {
	// Path is the normalized virtual path.
	Path string `json:"path"`
	// Removed counts non-directory entries removed (files, symlinks,
	// others); 0 for an empty directory.
	Removed int `json:"removed"`
}

// GrepRequest asks for matching lines under a directory or in one file
// (docs/file-tools.md §4.6).
type GrepRequest struct {
	// Pattern is a literal substring, or RE2 syntax when Regex is set.
	Pattern string `json:"pattern"`
	// Path is a directory (searched recursively) or a file; the tool layer
	// substitutes the home dir when omitted.
	Path string `json:"path"`
	// Glob filters files by the docs/file-tools.md §4.7 matcher relative to Path; "" = all.
	Glob string `json:"glob,omitempty"`
	// Regex selects RE2 matching instead of literal substrings.
	Regex bool `json:"regex"`
	// MaxCount caps the total matches (1..GrepMaxMax); 0 means
	// GrepDefaultMax.
	MaxCount int `json:"max_count,omitempty"`
}

// GrepMatch is one matching line.
type GrepMatch struct {
	// Path is the absolute virtual path of the file.
	Path string `json:"path"`
	// Line is the 1-based line number, the same numbering as read.
	Line int `json:"line"`
	// Text is the line without its terminator, at most GrepTextMaxChars
	// chars, never containing CR.
	Text string `json:"text"`
	// TextTruncated reports that Text was cut.
	TextTruncated bool `json:"text_truncated"`
}

// TruncationReason says why a grep or glob result is incomplete.
type TruncationReason string

// Truncation reasons.
const (
	TruncatedMaxCount   TruncationReason = "max_count"
	TruncatedMaxMatches TruncationReason = "max_matches"
	TruncatedTimeBudget TruncationReason = "time_budget"
	TruncatedWalkErrors TruncationReason = "walk_errors"
)

// GrepResult is the result of Grep.
type GrepResult struct {
	// Matches are sorted by path (bytewise), then line.
	Matches []GrepMatch `json:"matches"`
	// Truncated reports that matches were dropped or the search stopped.
	Truncated bool `json:"truncated"`
	// TruncationReason says why, when Truncated.
	TruncationReason TruncationReason `json:"truncation_reason,omitempty"`
	// FilesSearched counts text files scanned.
	FilesSearched int `json:"files_searched"`
	// FilesSkippedBinary counts files skipped by the binary sniff.
	FilesSkippedBinary int `json:"files_skipped_binary"`
	// FilesUnreadable counts files that could not be opened or read.
	FilesUnreadable int `json:"files_unreadable"`
	// Error is set on a partial result (a failed Composite route); the
	// matches that were found are kept and Truncated is true.
	Error *Error `json:"error,omitempty"`
}

// GlobRequest asks for the regular files matching a pattern (docs/file-tools.md §4.7).
type GlobRequest struct {
	// Pattern is a docs/file-tools.md §4.7 glob pattern.
	Pattern string `json:"pattern"`
	// Path is the search root directory; the tool layer substitutes the
	// home dir when omitted.
	Path string `json:"path"`
}

// GlobResult is the result of Glob.
type GlobResult struct {
	// Matches are regular files only, sorted bytewise by Path.
	Matches []FileInfo `json:"matches"`
	// Truncated reports an incomplete list.
	Truncated bool `json:"truncated"`
	// TruncationReason says why, when Truncated.
	TruncationReason TruncationReason `json:"truncation_reason,omitempty"`
	// Error is set on a partial result (a failed Composite route), with
	// Truncated true.
	Error *Error `json:"error,omitempty"`
}

// UploadItem is one file of an Upload batch.
type UploadItem struct {
	// Path is the destination (raw; the backend normalizes it).
	Path string `json:"path"`
	// Content is written verbatim.
	Content []byte `json:"content"`
}

// UploadResult is the outcome of one UploadItem, in input order.
type UploadResult struct {
	// Path is the item's path as given.
	Path string `json:"path"`
	// BytesWritten is len(Content) on success.
	BytesWritten int64 `json:"bytes_written,omitempty"`
	// Err is the item's failure; nil on success.
	Err *Error `json:"error,omitempty"`
}

// DownloadResult is the outcome of one downloaded path, in input order.
type DownloadResult struct {
	// Path is the path as given.
	Path string `json:"path"`
	// Content is the exact file bytes on success.
	Content []byte `json:"content,omitempty"`
	// Size is len(Content) on success.
	Size int64 `json:"size,omitempty"`
	// Err is the item's failure; nil on success.
	Err *Error `json:"error,omitempty"`
}

// ExecuteRequest asks to run a shell command (docs/file-tools.md §4.8).
type ExecuteRequest struct {
	// Command is run with /bin/sh -c; it must not be blank.
	Command string `json:"command"`
	// Cwd is a virtual directory; "" means the workspace.
	Cwd string `json:"cwd,omitempty"`
	// Env overrides the sandbox environment; keys must match
	// ^[A-Za-z_][A-Za-z0-9_]*$ and values must not contain NUL.
	Env map[string]string `json:"env,omitempty"`
	// TimeoutSeconds is the timeout in whole seconds: nil means
	// ExecuteDefaultTimeout, 0 means the backend maximum, and values
	// below 0 or above that maximum are invalid_argument.
	TimeoutSeconds *int `json:"timeout_s,omitempty"`
	// MaxOutputBytes caps Output; 0 means ExecuteInlineOutput.
	MaxOutputBytes int `json:"max_output_bytes,omitempty"`
	// OffloadPath, if set, receives the complete output stream (up to
	// ExecuteCaptureMax); it is kept only when the output was truncated.
	// An executor creates it before the command starts; when it cannot,
	// the call fails with an error naming this path (IsOffloadError) and
	// the command has not run.
	OffloadPath string `json:"offload_path,omitempty"`
}

// ExecuteResult is the result of Execute. A non-zero exit or a timeout is
// a result, not an error.
type ExecuteResult struct {
	// Output is stdout and stderr merged in true order, UTF-8-sanitized,
	// head and tail kept when over MaxOutputBytes.
	Output string `json:"output"`
	// ExitCode is the shell status (128+n for signal n, 124 on timeout);
	// nil when unknown.
	ExitCode *int `json:"exit_code,omitempty"`
	// TimedOut reports that the deadline killed the command.
	TimedOut bool `json:"timed_out"`
	// Truncated reports that Output omits part of the stream.
	Truncated bool `json:"truncated"`
	// OutputBytes is the total number of bytes produced.
	OutputBytes int64 `json:"output_bytes"`
	// OffloadedPath is the kept offload file, when there is one.
	OffloadedPath string `json:"offloaded_path,omitempty"`
	// CaptureTruncated reports that the offload file stopped at
	// ExecuteCaptureMax.
	CaptureTruncated bool `json:"capture_truncated"`
	// DurationMS is the wall time in milliseconds (docs/file-tools.md §3
	// duration_ms; an integer keeps the JSON frame unambiguous).
	DurationMS int64 `json:"duration_ms"`
}
