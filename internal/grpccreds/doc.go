// Package grpccreds holds the credentials of plumb's gRPC connections, for
// the daemons and their clients alike: TLS material named by files
// (TLSFiles; ServerTLS and ClientTLS re-read it when it changes) and the
// bearer token a client sends (BearerToken). It links no server machinery
// (metrics, tracing), so agentctl uses it as the daemons do.
package grpccreds
