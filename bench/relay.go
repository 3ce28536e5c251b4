package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"sync"

	"github.com/moby/moby/client"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// A relay is the floor's composed part (issue 22): one loopback gRPC call
// whose handler makes the served round trip to the floor's box, measured
// as one. A call to the worker that waits on its box pays what its parts
// timed apart do not: after the box's wait every thread on both sides
// sleeps, and the answer wakes one on each side of the gRPC connection.
// The relay's handler is the cheapest such worker: it writes the request
// to the box's attach stream and reads the answer itself (no reader
// goroutine, no multiplexing, no checks), on a server and connection set
// up as the bench's worker's are, in the same process.
type relay struct {
	mu   sync.Mutex // one round trip on the attach stream at a time
	att  client.ContainerAttachResult
	srv  *grpc.Server
	conn *grpc.ClientConn
}

// relayMethod is the relay's one method: a request line in, the box's
// answer out, each a BytesValue.
const relayMethod = "/plumb.bench.Floor/Relay"

var relayDesc = grpc.ServiceDesc{
	ServiceName: "plumb.bench.Floor",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Relay",
		Handler: func(srv any, _ context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.BytesValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			out, err := srv.(*relay).roundTrip(in.Value)
			if err != nil {
				return nil, err
			}
			return wrapperspb.Bytes(out), nil
		},
	}},
}

// newRelay serves the relay to the floor's box attached as att on a
// loopback port and connects to it.
func newRelay(att client.ContainerAttachResult) (*relay, error) {
	r := &relay{att: att, srv: grpc.NewServer(grpc.MaxRecvMsgSize(maxMsg), grpc.MaxSendMsgSize(maxMsg))}
	r.srv.RegisterService(&relayDesc, r)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	go func() { _ = r.srv.Serve(lis) }()
	r.conn, err = grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMsg), grpc.MaxCallSendMsgSize(maxMsg)))
	if err != nil {
		r.srv.Stop()
		return nil, err
	}
	return r, nil
}

// roundTrip sends line to the floor's box and returns its answer.
func (r *relay) roundTrip(line []byte) ([]byte, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, err := r.att.Conn.Write(line); err != nil {
		return nil, err
	}
	got := make([]byte, len(line))
	if err := readStdout(r.att.Reader, got); err != nil {
		return nil, fmt.Errorf("boxfloor: %w", err)
	}
	return got, nil
}

// call is one relayed request, checked.
func (r *relay) call(ctx context.Context, line []byte) error {
	out := new(wrapperspb.BytesValue)
	if err := r.conn.Invoke(ctx, relayMethod, wrapperspb.Bytes(line), out); err != nil {
		return err
	}
	if !bytes.Equal(out.Value, line) {
		return fmt.Errorf("boxfloor answered %q through the relay", out.Value)
	}
	return nil
}

func (r *relay) close() {
	r.conn.Close()
	r.srv.Stop()
}
