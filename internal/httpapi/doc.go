// Package httpapi is the HTTP/JSON face of a daemon's gRPC services
// (docs/http.md): grpc-gateway v2's generated handlers (gen/gateway) over a
// client connection to the daemon's own gRPC server, so that every call
// passes the same interceptors (credentials, tenant, limits, metrics) as a
// gRPC call. Around the gateway it adds what plumb's contract needs: one
// error body for every error, Server-Sent Events for server streams with
// resume from Last-Event-ID, browser sessions in an HttpOnly cookie with a
// CSRF rule (kept in the daemon's store when it gives one, sealed so that
// the store holds neither the session id nor the token), request-body limits, client streams as newline-delimited
// request frames (full duplex for Process), and the OpenAPI document.
//
// It must not decide who a caller is: the token is checked with the
// daemon's own credential check, and the call itself is authorized again
// by the gRPC server. It forwards no request header but the bearer token,
// and never logs a token.
package httpapi
