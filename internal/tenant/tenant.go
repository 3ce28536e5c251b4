package tenant

import (
	"context"
	"regexp"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// Default is the tenant of threads and sandboxes created before tenancy
// existed, of the single --token-file credential and of unauthenticated
// loopback setups.
const Default = "default"

// MetadataKey is the request header in which a trusted forwarder (agentd)
// names the tenant it calls sandboxd for.
const MetadataKey = "plumb-tenant"

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

// Valid reports whether s is a usable tenant name: 1 to 63 lower-case
// letters, digits, '.', '_' or '-', starting with a letter or digit (it
// ends up in Docker labels and database rows).
func Valid(s string) bool { return nameRE.MatchString(s) }

type ctxKey struct{}

// With returns ctx carrying tenant name.
func With(ctx context.Context, name string) context.Context {
	return context.WithValue(ctx, ctxKey{}, name)
}

// From returns the tenant ctx carries, Default when none.
func From(ctx context.Context) string {
	if s, ok := ctx.Value(ctxKey{}).(string); ok && s != "" {
		return s
	}
	return Default
}

type ownScopeKey struct{}

// WithOwnScope marks ctx as a call of a tenant that authenticated with its
// own credential, not a trusted forwarder's: worker-wide figures (how many
// sandboxes every tenant runs) are not its to see.
func WithOwnScope(ctx context.Context) context.Context {
	return context.WithValue(ctx, ownScopeKey{}, true)
}

// OwnScope reports whether ctx is marked by WithOwnScope. A call that no
// credential check marked (no credentials configured: every caller is
// trusted) is not.
func OwnScope(ctx context.Context) bool {
	b, _ := ctx.Value(ownScopeKey{}).(bool)
	return b
}

type operatorKey struct{}

// WithOperator marks ctx as a call of an operator: a credential flagged
// "operator" (or any caller when no credentials are configured), which may
// see and delete every tenant's sandboxes through agentd's operator RPCs.
// The tenant it acts for in every other RPC is unchanged.
func WithOperator(ctx context.Context) context.Context {
	return context.WithValue(ctx, operatorKey{}, true)
}

// Operator reports whether ctx is marked by WithOperator.
func Operator(ctx context.Context) bool {
	b, _ := ctx.Value(operatorKey{}).(bool)
	return b
}

// Norm maps the empty tenant of records written before tenancy to
// Default.
func Norm(s string) string {
	if s == "" {
		return Default
	}
	return s
}

// outgoing adds the context's tenant, when it has one, to the outgoing
// metadata.
func outgoing(ctx context.Context) context.Context {
	if s, ok := ctx.Value(ctxKey{}).(string); ok && s != "" {
		return metadata.AppendToOutgoingContext(ctx, MetadataKey, s)
	}
	return ctx
}

// ForwardUnary is a client interceptor that sends the context's tenant in
// the plumb-tenant header (agentd → sandboxd).
func ForwardUnary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	return invoker(outgoing(ctx), method, req, reply, cc, opts...)
}

// ForwardStream is ForwardUnary for streaming calls.
func ForwardStream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return streamer(outgoing(ctx), desc, cc, method, opts...)
}

// DialOptions are the client options that forward the tenant.
func DialOptions() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithChainUnaryInterceptor(ForwardUnary), grpc.WithChainStreamInterceptor(ForwardStream)}
}
