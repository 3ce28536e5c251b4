// Package servertest checks the gRPC statuses the services' Status
// functions build, for their tests.
package servertest

import (
	"maps"
	"slices"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/plumbhq/plumb/pkg/pbconv"
)

// Want is what a status must carry.
type Want struct {
	Code   codes.Code
	Reason string
	// Metadata is the ErrorInfo metadata (nil = not checked).
	Metadata map[string]string
	// Fields are the fields of the google.rpc.BadRequest violations, in
	// order (nil = none).
	Fields []string
}

// Check fails t unless st, a status error, carries w. An INTERNAL status
// must not carry the error's text.
func Check(t *testing.T, st error, w Want) {
	t.Helper()
	if got := status.Code(st); got != w.Code {
		t.Fatalf("code %v (%v), want %v", got, st, w.Code)
	}
	if got := pbconv.Reason(st); got != w.Reason {
		t.Errorf("reason %q, want %q", got, w.Reason)
	}
	if w.Metadata != nil {
		var got map[string]string
		s, _ := status.FromError(st)
		for _, d := range s.Details() {
			if info, ok := d.(interface{ GetMetadata() map[string]string }); ok {
				got = info.GetMetadata()
			}
		}
		if !maps.Equal(got, w.Metadata) {
			t.Errorf("metadata %v, want %v", got, w.Metadata)
		}
	}
	var fields []string
	for _, v := range pbconv.FieldViolations(st) {
		fields = append(fields, v.Field)
	}
	if !slices.Equal(fields, w.Fields) {
		t.Errorf("field violations %v, want %v", fields, w.Fields)
	}
	if w.Code == codes.Internal && status.Convert(st).Message() != "internal error" {
		t.Errorf("internal error text leaked: %v", st)
	}
}
