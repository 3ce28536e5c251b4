package httpapi

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/genproto/googleapis/rpc/code"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/plumbhq/plumb/internal/server"
	"github.com/plumbhq/plumb/pkg/pbconv"
)

// ErrorBody is the JSON body of every error the HTTP API answers, and the
// data of an SSE "error" event.
type ErrorBody struct {
	// Code is the gRPC code as a number.
	Code int32 `json:"code"`
	// Status is the gRPC code's name ("PERMISSION_DENIED").
	Status string `json:"status"`
	// Message is the status message.
	Message string `json:"message"`
	// Reason is google.rpc.ErrorInfo.reason ("" without one).
	Reason string `json:"reason"`
	// Metadata is google.rpc.ErrorInfo.metadata (never null).
	Metadata map[string]string `json:"metadata"`
	// FieldViolations are google.rpc.BadRequest's (never null).
	FieldViolations []FieldViolation `json:"fieldViolations"`
}

// FieldViolation names one bad request field.
type FieldViolation struct {
	Field       string `json:"field"`
	Description string `json:"description"`
}

// Reasons of the errors the HTTP layer itself answers (ErrorInfo.reason).
const (
	ReasonCSRF          = "CSRF_CONTENT_TYPE"
	ReasonBodyTooLarge  = "BODY_TOO_LARGE"
	ReasonSession       = "SESSION_UNKNOWN"
	ReasonUnauthorized  = "UNAUTHENTICATED"
	ReasonNotJSON       = "CONTENT_TYPE_NOT_JSON"
	ReasonBadLastEvent  = "INVALID_LAST_EVENT_ID"
	ReasonHTTPAPIRefuse = "HTTP_API_DISABLED"
	ReasonHost          = "HOST_NOT_LOOPBACK"
	ReasonBadFrame      = "INVALID_STREAM_FRAME"
	ReasonNotResumable  = "STREAM_NOT_RESUMABLE"
	ReasonSessionStore  = "SESSION_STORE_UNAVAILABLE"
)

// bodyOf turns a status into its JSON body.
func bodyOf(st *status.Status) ErrorBody {
	b := ErrorBody{
		Code:            int32(st.Code()),
		Status:          codeName(st.Code()),
		Message:         st.Message(),
		Metadata:        map[string]string{},
		FieldViolations: []FieldViolation{},
	}
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			if b.Reason == "" {
				b.Reason = d.GetReason()
				for k, v := range d.GetMetadata() {
					b.Metadata[k] = v
				}
			}
		case *errdetails.BadRequest:
			for _, v := range d.GetFieldViolations() {
				b.FieldViolations = append(b.FieldViolations, FieldViolation{Field: v.GetField(), Description: v.GetDescription()})
			}
		}
	}
	return b
}

func codeName(c codes.Code) string {
	if n, ok := code.Code_name[int32(c)]; ok {
		return n
	}
	return "UNKNOWN"
}

// statusOf is the status of err and the HTTP status to answer it with.
func statusOf(err error) (*status.Status, int) {
	var hs *runtime.HTTPStatusError
	if errors.As(err, &hs) {
		st := status.Convert(hs.Err)
		return st, hs.HTTPStatus
	}
	st := status.Convert(err)
	return st, runtime.HTTPStatusFromCode(st.Code())
}

// apiError builds a status error of the HTTP layer, with its reason.
func apiError(c codes.Code, reason, msg string) *status.Status {
	return status.Convert(server.WithInfo(c, msg, reason, nil))
}

// errorWriter is a response writer that writes errors itself: an SSE
// stream that has started turns them into an "error" event.
type errorWriter interface {
	writeError(st *status.Status, httpStatus int)
}

// writeError answers st with httpStatus and the JSON body, or as an SSE
// "error" event once a stream has started.
func writeError(w http.ResponseWriter, st *status.Status, httpStatus int) {
	if ew, ok := w.(errorWriter); ok {
		ew.writeError(st, httpStatus)
		return
	}
	writeErrorHeaders(w.Header(), st)
	w.WriteHeader(httpStatus)
	_ = json.NewEncoder(w).Encode(bodyOf(st))
}

func writeErrorHeaders(h http.Header, st *status.Status) {
	h.Del("Trailer")
	h.Del("Transfer-Encoding")
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	if st.Code() == codes.Unauthenticated {
		h.Set("WWW-Authenticate", `Bearer realm="plumb"`)
	}
}

// invalidField is INVALID_ARGUMENT naming one request field.
func invalidField(field, desc string) error {
	return server.NewStatus(codes.InvalidArgument, field+": "+desc, "INVALID_ARGUMENT", nil,
		[]pbconv.FieldViolation{{Field: field, Description: desc}})
}
