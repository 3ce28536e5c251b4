package daemon

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// DefaultMaxRecvBytes is the receive limit of a method that is not bulk
// (Options.BulkMethods): well below DefaultMaxMessageBytes, since such
// requests carry names, commands and settings, not file contents.
const DefaultMaxRecvBytes = 4 << 20

// DefaultMaxStreamsPerConn bounds the calls in flight on one connection
// (Options.MaxStreamsPerConn). agentd sends all its calls to a worker over
// one connection; a client over the limit waits for a free stream.
const DefaultMaxStreamsPerConn = 256

// recvLimits is the receive limit of each method: bulk methods may
// receive up to the server's limit, every other one up to small. gRPC's
// server applies one limit to every method, from a message's length
// prefix before it reads the message (the bulk limit); the smaller limit
// is checked on the message it has read, before the handler sees it.
type recvLimits struct {
	small int
	bulk  map[string]bool
}

// MessageLimits are the server options that bound messages: sent ones
// and those received by the bulk methods (full method names) to maxMsg,
// those received by any other method to maxRecv (checked once read; see
// recvLimits). Serve installs them; a test server may too.
func MessageLimits(maxMsg, maxRecv int, bulk []string) []grpc.ServerOption {
	l := newRecvLimits(min(maxRecv, maxMsg), bulk)
	return []grpc.ServerOption{
		grpc.MaxRecvMsgSize(maxMsg),
		grpc.MaxSendMsgSize(maxMsg),
		grpc.ChainUnaryInterceptor(l.unary),
		grpc.ChainStreamInterceptor(l.stream),
	}
}

func newRecvLimits(small int, bulk []string) *recvLimits {
	l := &recvLimits{small: small, bulk: map[string]bool{}}
	for _, m := range bulk {
		l.bulk[m] = true
	}
	return l
}

// check refuses a message over method's limit with RESOURCE_EXHAUSTED.
func (l *recvLimits) check(method string, m any) error {
	if l.bulk[method] {
		return nil
	}
	pm, ok := m.(proto.Message)
	if !ok {
		return nil
	}
	if n := proto.Size(pm); n > l.small {
		return status.Errorf(codes.ResourceExhausted, "request message of %d bytes is over the limit of %d bytes for %s", n, l.small, method)
	}
	return nil
}

func (l *recvLimits) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if err := l.check(info.FullMethod, req); err != nil {
		return nil, err
	}
	return h(ctx, req)
}

func (l *recvLimits) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if l.bulk[info.FullMethod] {
		return h(srv, ss)
	}
	return h(srv, &limitedStream{ServerStream: ss, limits: l, method: info.FullMethod})
}

// limitedStream checks each message it receives against its method's
// limit.
type limitedStream struct {
	grpc.ServerStream
	limits *recvLimits
	method string
}

func (s *limitedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	return s.limits.check(s.method, m)
}
