package server_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/plumbhq/plumb/internal/server"
	"github.com/plumbhq/plumb/internal/server/servertest"
	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/pbconv"
)

var (
	errMine  = errors.New("mine")
	errOther = errors.New("other")
)

// mapper maps errors wrapping target to code c with reason.
func mapper(target error, c codes.Code, reason string) server.Mapper {
	return func(err error) (error, bool) {
		if !errors.Is(err, target) {
			return nil, false
		}
		return server.WithInfo(c, err.Error(), reason, nil), true
	}
}

// The core maps file errors, cancellation and unknown errors, and tries a
// service's mappers in the order it gives them.
func TestStatus(t *testing.T) {
	mine := mapper(errMine, codes.NotFound, "MINE")
	other := mapper(errOther, codes.Aborted, "OTHER")
	both := fmt.Errorf("%w and %w", errOther, errMine)
	tests := []struct {
		name    string
		err     error
		mappers []server.Mapper
		want    servertest.Want
	}{
		{"nil", nil, nil, servertest.Want{Code: codes.OK}},
		{"file error", backend.Errorf(backend.CodeFileNotFound, "/a", "no /a"), []server.Mapper{server.FileStatus},
			servertest.Want{Code: codes.NotFound, Reason: string(backend.CodeFileNotFound), Metadata: map[string]string{"path": "/a"}}},
		{"file error, no file mapper", backend.Errorf(backend.CodeFileNotFound, "/a", "no /a"), nil, servertest.Want{Code: codes.Internal}},
		{"a service's error", fmt.Errorf("load: %w", errMine), []server.Mapper{server.FileStatus, mine}, servertest.Want{Code: codes.NotFound, Reason: "MINE"}},
		{"first mapper wins", both, []server.Mapper{mine, other}, servertest.Want{Code: codes.NotFound, Reason: "MINE"}},
		{"first mapper wins, other order", both, []server.Mapper{other, mine}, servertest.Want{Code: codes.Aborted, Reason: "OTHER"}},
		{"cancelled", context.Canceled, []server.Mapper{mine}, servertest.Want{Code: codes.Canceled}},
		{"deadline", fmt.Errorf("load: %w", context.DeadlineExceeded), nil, servertest.Want{Code: codes.DeadlineExceeded}},
		{"status passes", status.Error(codes.PermissionDenied, "no"), []server.Mapper{mine}, servertest.Want{Code: codes.PermissionDenied}},
		{"unknown", errors.New("disk on fire"), []server.Mapper{mine, server.FileStatus}, servertest.Want{Code: codes.Internal}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			servertest.Check(t, server.Status(tt.err, tt.mappers...), tt.want)
		})
	}
}

// A file-engine error survives Status and pbconv.FileError (what the
// SandboxService client does) with its code, path and details, for every
// code of docs/file-tools.md §3.
func TestFileErrorRoundTrip(t *testing.T) {
	for _, c := range []backend.Code{
		backend.CodeInvalidPath, backend.CodeInvalidArgument, backend.CodeInvalidPattern, backend.CodeFileNotFound,
		backend.CodeIsDirectory, backend.CodeNotADirectory, backend.CodeNotRegularFile, backend.CodePermissionDenied,
		backend.CodeNoSpace, backend.CodeStringNotFound, backend.CodeMultipleOccurrences, backend.CodeOffsetOutOfRange,
		backend.CodeTooLarge, backend.CodeNotText, backend.CodeTimeout, backend.CodeUnsupported,
		backend.CodeUnavailable, backend.CodeCancelled, backend.CodeInternal, backend.CodeResourceExhausted,
		backend.CodeConnectionRefused,
	} {
		in := backend.Errorf(c, "/a", "op /a: %s", c).WithDetail("count", "2")
		out := pbconv.FileError(server.Status(in, server.FileStatus))
		if out.Code != c || out.Path != "/a" || out.Message != in.Message || !maps.Equal(out.Details, in.Details) {
			t.Errorf("%s came back as %+v", c, out)
		}
	}
}

// Every status fits MaxStatusBytes whatever the user strings in it, keeps
// its code and reason, and carries valid UTF-8 only (a detail that does not
// serialize would drop the reason).
func TestStatusIsBounded(t *testing.T) {
	long := "/" + strings.Repeat("é/", 2000)
	many := make([]pbconv.FieldViolation, 1000)
	for i := range many {
		many[i] = pbconv.FieldViolation{Field: fmt.Sprintf("decisions[%d].%s", i, long), Description: "no pending request for tool call " + long}
	}
	tests := []struct {
		name   string
		err    error
		code   codes.Code
		reason string
	}{
		{"file error with a long path and details", server.Status(backend.Errorf(backend.CodeFileNotFound, long, "read %s: no such file", long).
			WithDetail("link", long).WithDetail("target", long), server.FileStatus), codes.NotFound, string(backend.CodeFileNotFound)},
		{"invalid UTF-8 path", server.Status(backend.Errorf(backend.CodeInvalidPath, "/a\xff", "invalid path %s: it is not valid UTF-8", backend.Quote("/a\xff")), server.FileStatus),
			codes.InvalidArgument, string(backend.CodeInvalidPath)},
		{"1000 field violations", server.NewStatus(codes.InvalidArgument, "bad decisions", "INVALID_DECISIONS", nil, many), codes.InvalidArgument, "INVALID_DECISIONS"},
		{"long message", server.WithInfo(codes.NotFound, "load thread "+strings.Repeat("t", 100000), "THREAD_NOT_FOUND", nil), codes.NotFound, "THREAD_NOT_FOUND"},
		{"long metadata", server.WithInfo(codes.NotFound, "gone", "GONE", map[string]string{"a": long, "b\xff": long + "\xff"}), codes.NotFound, "GONE"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := status.Convert(tt.err)
			if st.Code() != tt.code || pbconv.Reason(tt.err) != tt.reason {
				t.Fatalf("got %v (reason %q), want %v %q", st.Code(), pbconv.Reason(tt.err), tt.code, tt.reason)
			}
			if size := proto.Size(st.Proto()); size > server.MaxStatusBytes {
				t.Errorf("status of %d bytes, want at most %d", size, server.MaxStatusBytes)
			}
			if n := len(st.Message()); n > server.MaxStatusMessageBytes || !utf8.ValidString(st.Message()) {
				t.Errorf("message of %d bytes (valid UTF-8: %v), want at most %d", n, utf8.ValidString(st.Message()), server.MaxStatusMessageBytes)
			}
			for _, d := range st.Details() {
				if info, ok := d.(interface{ GetMetadata() map[string]string }); ok {
					for k, v := range info.GetMetadata() {
						if utf8.RuneCountInString(v) > backend.QuoteMaxChars+1 {
							t.Errorf("metadata %s has %d characters, want at most %d and a cut mark", k, utf8.RuneCountInString(v), backend.QuoteMaxChars)
						}
					}
				}
			}
			if tt.reason == "INVALID_DECISIONS" && len(pbconv.FieldViolations(tt.err)) == 0 {
				t.Errorf("no field violation kept")
			}
		})
	}
}
