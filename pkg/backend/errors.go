package backend

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"
	"strconv"
	"strings"
	"syscall"
)

// Code classifies a file-operation error (docs/file-tools.md §3). Codes are
// stable strings: they travel in JSON frames and as google.rpc.ErrorInfo
// reasons.
type Code string

// Error codes of docs/file-tools.md §3.
const (
	CodeInvalidPath         Code = "invalid_path"
	CodeInvalidArgument     Code = "invalid_argument"
	CodeInvalidPattern      Code = "invalid_pattern"
	CodeFileNotFound        Code = "file_not_found"
	CodeIsDirectory         Code = "is_directory"
	CodeNotADirectory       Code = "not_a_directory"
	CodeNotRegularFile      Code = "not_regular_file"
	CodePermissionDenied    Code = "permission_denied"
	CodeNoSpace             Code = "no_space"
	CodeStringNotFound      Code = "string_not_found"
	CodeMultipleOccurrences Code = "multiple_occurrences"
	CodeOffsetOutOfRange    Code = "offset_out_of_range"
	CodeTooLarge            Code = "too_large"
	CodeNotText             Code = "not_text"
	CodeTimeout             Code = "timeout"
	CodeUnsupported         Code = "unsupported"
	CodeUnavailable         Code = "unavailable"
	CodeCancelled           Code = "cancelled"
	CodeInternal            Code = "internal"

	// CodeResourceExhausted: a limit other than disk space stopped the
	// operation, above all a sandbox's process (pids) limit making a fork
	// fail with EAGAIN. Retrying helps once processes have ended.
	CodeResourceExhausted Code = "resource_exhausted"

	// CodeConnectionRefused: a port forward found nothing listening on
	// its port inside the sandbox.
	CodeConnectionRefused Code = "connection_refused"
)

// Error is the error value of every file operation. Operations return it as
// error; callers use errors.As or CodeOf. Message is written for the model:
// it names what failed and, where there is one, the next step.
type Error struct {
	// Code classifies the failure.
	Code Code `json:"code"`
	// Message is an actionable sentence for the model.
	Message string `json:"message"`
	// Path is the virtual path the error is about, if any.
	Path string `json:"path,omitempty"`
	// Details carries machine-readable facts such as count, total_lines,
	// size or limit.
	Details map[string]string `json:"details,omitempty"`
}

// Error returns "<code>: <message>".
func (e *Error) Error() string {
	return string(e.Code) + ": " + e.Message
}

// WithDetail sets Details[key] = value and returns e, for chaining at the
// construction site.
func (e *Error) WithDetail(key, value string) *Error {
	if e.Details == nil {
		e.Details = make(map[string]string)
	}
	e.Details[key] = value
	return e
}

// DetailKeys returns the keys of e.Details in sorted order, for stable
// rendering.
func (e *Error) DetailKeys() []string {
	keys := make([]string, 0, len(e.Details))
	for k := range e.Details {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Errorf builds an *Error with a formatted message. path may be empty.
// Where the message names path verbatim, a path longer than QuoteMaxChars
// characters is shown cut by Clip (docs/file-tools.md §6), so a message quotes it once, short.
func Errorf(code Code, path, format string, args ...any) *Error {
	msg := fmt.Sprintf(format, args...)
	if c := Clip(path); c != path {
		msg = strings.ReplaceAll(msg, path, c)
	}
	return &Error{Code: code, Path: path, Message: msg}
}

// DownloadChanged is the error of a download whose file no longer has the
// size it had when the download opened it (now is -1 when unknown): the
// agent's reads and the worker's reads of a lent file report it alike.
func DownloadChanged(path string, size, now int64) *Error {
	return Errorf(CodeInvalidArgument, path,
		"download %s: the file changed size during the download (%d bytes at open, %d now); retry it", path, size, now).
		WithDetail("reason", "changed")
}

// CodeOf returns the code of err: the Code of an *Error in its chain,
// cancelled for context.Canceled, timeout for context.DeadlineExceeded,
// internal for any other non-nil error, and "" for nil.
func CodeOf(err error) Code {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	switch {
	case errors.Is(err, context.Canceled):
		return CodeCancelled
	case errors.Is(err, context.DeadlineExceeded):
		return CodeTimeout
	}
	return CodeInternal
}

// IsOffloadError reports whether err is an executor's failure to create
// the offload file at path (an error naming that path). An executor
// creates the file before it starts the command, so the command did not
// run and the request can be sent again without OffloadPath.
func IsOffloadError(err error, path string) bool {
	var e *Error
	return path != "" && errors.As(err, &e) && e.Path == path
}

// FromOS converts an error from the os, io/fs or syscall packages (including
// os.Root) into an *Error for operation op ("read", "write", ...) on the
// virtual path path. An *Error in err's chain is returned unchanged; nil
// gives nil.
//
// The message is built from op, path and the errno only: an *os.PathError
// carries the host path, which must not reach the model (a Filesystem
// backend's root is a host directory).
func FromOS(op, path string, err error) *Error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	mk := func(code Code, what string) *Error {
		return &Error{Code: code, Path: path, Message: fmt.Sprintf("%s %s: %s", op, Clip(path), what)}
	}
	switch {
	case errors.Is(err, context.Canceled):
		return mk(CodeCancelled, "cancelled")
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		return mk(CodeTimeout, "the operation exceeded its deadline")
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		switch errno {
		case syscall.ENOENT:
			return mk(CodeFileNotFound, "no such file or directory")
		case syscall.EISDIR:
			return mk(CodeIsDirectory, "is a directory")
		case syscall.ENOTDIR:
			return mk(CodeNotADirectory, "not a directory (the path or one of its parents is a file)")
		case syscall.EACCES, syscall.EPERM:
			return mk(CodePermissionDenied, "permission denied")
		case syscall.EROFS:
			return mk(CodePermissionDenied, "read-only file system")
		case syscall.ENOSPC:
			return mk(CodeNoSpace, "no space left on device")
		case syscall.EDQUOT:
			return mk(CodeNoSpace, "disk quota exceeded")
		case syscall.EAGAIN:
			return mk(CodeResourceExhausted, "a resource limit is reached (resource temporarily unavailable); retry once fewer processes run")
		case syscall.ELOOP:
			return mk(CodeInvalidPath, "too many levels of symbolic links (a loop, or a chain of more than 8 links)")
		case syscall.ENAMETOOLONG:
			return mk(CodeInvalidPath, "file name too long")
		}
	}
	// os.Root reports escapes with an unexported error value; its text is
	// the only handle on it.
	if strings.Contains(err.Error(), "path escapes from parent") {
		return mk(CodeInvalidPath, "resolves outside the root")
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return mk(CodeFileNotFound, "no such file or directory")
	case errors.Is(err, fs.ErrPermission):
		return mk(CodePermissionDenied, "permission denied")
	}
	cause := err
	var pe *fs.PathError
	if errors.As(err, &pe) {
		cause = pe.Err
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		cause = le.Err
	}
	return mk(CodeInternal, cause.Error())
}

// Quote renders a user-supplied string for an error message: at most
// QuoteMaxChars characters (then "…"), Go-quoted so that newlines and
// invalid bytes stay visible and the message stays one line.
func Quote(s string) string {
	head, cut := clip(s)
	if cut {
		return strconv.Quote(head) + "…"
	}
	return strconv.Quote(s)
}

// Clip renders a user-supplied string that a message shows verbatim (a
// normalized path, which needs no quoting): at most QuoteMaxChars
// characters, then "…" when it was cut (docs/file-tools.md §6).
func Clip(s string) string {
	if head, cut := clip(s); cut {
		return head + "…"
	}
	return s
}

// clip returns the first QuoteMaxChars characters of s and whether that
// cut anything.
func clip(s string) (string, bool) {
	n := 0
	for i := range s {
		if n == QuoteMaxChars {
			return s[:i], true
		}
		n++
	}
	return s, false
}
