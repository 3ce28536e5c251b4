package grpccreds

import "context"

// BearerToken is a grpc.PerRPCCredentials that sends a static bearer
// token. It allows plaintext transports: plumb's daemons run on loopback
// or inside a cluster network; use TLS across untrusted networks.
type BearerToken string

// GetRequestMetadata implements credentials.PerRPCCredentials.
func (t BearerToken) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(t)}, nil
}

// RequireTransportSecurity implements credentials.PerRPCCredentials.
func (BearerToken) RequireTransportSecurity() bool { return false }
