package backend

import "time"

// The limits table of docs/file-tools.md §3, in one place. Values marked
// "configurable" are defaults: agents or sandboxes may set their own, and
// engines take them as parameters. The others are engine constants.
const (
	// MaxPathBytes caps a raw or normalized path (docs/file-tools.md §2 rules 1 and 10).
	MaxPathBytes = 4096
	// MaxComponentBytes caps one path component (docs/file-tools.md §2 rule 9).
	MaxComponentBytes = 255

	// DefaultReadLimit is read's default line count (configurable).
	DefaultReadLimit = 2000
	// ReadByteBudget caps the content bytes one read returns (docs/file-tools.md §4.2 step 8).
	ReadByteBudget = 512 << 10
	// RowWidth is the gutter row width in chars (docs/file-tools.md §4.2 Formatting).
	RowWidth = 5000
	// TotalLinesCountMax: total_lines is counted by a full scan only for
	// files up to this size.
	TotalLinesCountMax = 64 << 20
	// SniffWindow is the binary-sniff window at the head of a file.
	SniffWindow = 8 << 10
	// MediaCap caps media returned as base64 (configurable).
	MediaCap = 5 << 20
	// WriteCap caps write and edit file sizes (configurable).
	WriteCap = 10 << 20
	// ItemCap caps one upload or download item (configurable).
	ItemCap = 64 << 20
	// TransferChunkBytes is the upload/download streaming chunk size.
	TransferChunkBytes = 1 << 20
	// MinFrameBytes is the least gRPC message and agent frame size limit
	// (a 5 MiB media read is about 6.7 MiB in base64).
	MinFrameBytes = 8 << 20

	// LsMaxEntries caps one ls listing.
	LsMaxEntries = 10000

	// GrepDefaultMax is grep's default max_count.
	GrepDefaultMax = 1000
	// GrepMaxMax is the largest accepted max_count.
	GrepMaxMax = 10000
	// GrepBudget is grep's time budget.
	GrepBudget = 15 * time.Second
	// GrepTextMaxChars caps GrepMatch.Text.
	GrepTextMaxChars = 5000

	// GlobMaxMatches caps glob results.
	GlobMaxMatches = 10000
	// GlobBudget is glob's time budget.
	GlobBudget = 5 * time.Second
	// MaxBraceExpansions caps the alternatives of one glob pattern.
	MaxBraceExpansions = 1000
	// MaxPatternBytes caps glob and grep patterns.
	MaxPatternBytes = 4096

	// FileOpTimeout is the deadline of other file operations (configurable).
	FileOpTimeout = 30 * time.Second

	// ExecuteDefaultTimeout applies when ExecuteRequest.TimeoutSeconds is nil.
	ExecuteDefaultTimeout = 120 * time.Second
	// ExecuteMaxTimeout is the default backend maximum (TimeoutSeconds 0).
	ExecuteMaxTimeout = 3600 * time.Second
	// ExecuteInlineOutput is the default max_output_bytes (configurable).
	ExecuteInlineOutput = 100000
	// ExecuteCaptureMax caps the stream written to an offload file.
	ExecuteCaptureMax = 10 << 20
	// ExecuteMaxCommandBytes caps the command string.
	ExecuteMaxCommandBytes = 100000
	// KillGrace is the wait between SIGTERM and SIGKILL at a timeout.
	KillGrace = 2 * time.Second
	// DrainGrace bounds output draining after the shell exits.
	DrainGrace = 2 * time.Second

	// ToolResultMaxChars caps every text tool result (configurable).
	ToolResultMaxChars = 80000
	// EvictionThresholdChars is the size above which a result is evicted.
	EvictionThresholdChars = 80000
	// EvictionPreviewLines is the head and the tail line count of an
	// eviction preview.
	EvictionPreviewLines = 5
	// EvictionPreviewLineChars caps each preview line.
	EvictionPreviewLineChars = 1000
	// QuoteMaxChars caps user strings quoted in messages (see Quote).
	QuoteMaxChars = 200
)
