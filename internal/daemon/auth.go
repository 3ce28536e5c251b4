package daemon

import (
	"context"
	"crypto/subtle"
	"fmt"
	"os"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// ReadToken reads a bearer token from a file (surrounding whitespace
// dropped). An empty path means no token.
func ReadToken(path string) (string, error) {
	if path == "" {
		return "", nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("token file %s is empty", path)
	}
	return tok, nil
}

// publicMethod reports methods that answer without a token: health checks
// (Kubernetes probes carry no credentials).
func publicMethod(full string) bool {
	return strings.HasPrefix(full, "/grpc.health.v1.Health/")
}

// checkToken authorizes one call against token.
func checkToken(ctx context.Context, token, method string) error {
	if publicMethod(method) {
		return nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	for _, v := range md.Get("authorization") {
		got, ok := strings.CutPrefix(v, "Bearer ")
		if ok && subtle.ConstantTimeCompare([]byte(got), []byte(token)) == 1 {
			return nil
		}
	}
	return status.Error(codes.Unauthenticated, "missing or wrong bearer token (send \"authorization: Bearer <token>\")")
}

func authUnary(token string) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if err := checkToken(ctx, token, info.FullMethod); err != nil {
			return nil, err
		}
		return h(ctx, req)
	}
}

func authStream(token string) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		if err := checkToken(ss.Context(), token, info.FullMethod); err != nil {
			return err
		}
		return h(srv, ss)
	}
}

// BearerToken is a grpc.PerRPCCredentials that sends a static bearer
// token. It allows plaintext transports: plumb's daemons run on loopback
// or inside a cluster network; use TLS in front of them across untrusted
// networks.
type BearerToken string

// GetRequestMetadata implements credentials.PerRPCCredentials.
func (t BearerToken) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(t)}, nil
}

// RequireTransportSecurity implements credentials.PerRPCCredentials.
func (BearerToken) RequireTransportSecurity() bool { return false }
