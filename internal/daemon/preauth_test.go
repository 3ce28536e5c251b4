package daemon

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

	"github.com/plumbhq/plumb/internal/grpccreds"
	"github.com/plumbhq/plumb/internal/tenant"
)

// h2Client is a raw HTTP/2 client: it sends a gRPC request's frames one by
// one, so a test can stop halfway through a message, and sees every frame
// the server sends.
type h2Client struct {
	t    *testing.T
	conn net.Conn
	fr   *http2.Framer
	hbuf bytes.Buffer
	enc  *hpack.Encoder
}

// dialH2 connects from local (empty: any address) to addr and sends the
// client preface and settings.
func dialH2(t *testing.T, addr, local string) (*h2Client, error) {
	t.Helper()
	d := net.Dialer{}
	if local != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(local)}
	}
	conn, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { conn.Close() })
	// A guard against a hung test, not a bound on the server's speed.
	_ = conn.SetDeadline(time.Now().Add(2 * time.Minute))
	c := &h2Client{t: t, conn: conn, fr: http2.NewFramer(conn, conn)}
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.enc = hpack.NewEncoder(&c.hbuf)
	if _, err := conn.Write([]byte(http2.ClientPreface)); err != nil {
		return nil, err
	}
	if err := c.fr.WriteSettings(); err != nil {
		return nil, err
	}
	return c, nil
}

// open starts a call of method on stream id (odd, increasing) with the
// given extra headers (name, value pairs) and no message yet.
func (c *h2Client) open(id uint32, method string, extra ...string) {
	c.t.Helper()
	c.hbuf.Reset()
	hdr := append([]string{":method", "POST", ":scheme", "http", ":path", method, ":authority", "plumb",
		"content-type", "application/grpc", "te", "trailers"}, extra...)
	for i := 0; i < len(hdr); i += 2 {
		_ = c.enc.WriteField(hpack.HeaderField{Name: hdr[i], Value: hdr[i+1]})
	}
	if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.hbuf.Bytes(), EndHeaders: true}); err != nil {
		c.t.Fatal(err)
	}
}

// next returns the server's next frame that is not connection upkeep
// (settings, pings and connection window updates are answered or
// skipped).
func (c *h2Client) next() (http2.Frame, error) {
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			return nil, err
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = c.fr.WriteSettingsAck()
			}
			continue
		case *http2.PingFrame:
			if !f.IsAck() {
				_ = c.fr.WritePing(true, f.Data)
			}
			continue
		case *http2.WindowUpdateFrame:
			if f.StreamID == 0 {
				continue
			}
		}
		return f, nil
	}
}

// TestUnauthenticatedCallsRefusedBeforeTheirMessage opens many calls on one
// unauthenticated connection, each sending the length prefix of a 16 MiB
// message and a little of its body. The server must answer each with
// UNAUTHENTICATED from its headers, without ever asking for the body: a
// stream window update means it started reading (and holding) the
// message, which is how 30 such calls took a worker from 46 to 539 MB.
func TestUnauthenticatedCallsRefusedBeforeTheirMessage(t *testing.T) {
	reg := prometheus.NewRegistry()
	addr := serveWith(t, Options{Token: "s3cret", Registry: reg})
	c, err := dialH2(t, addr, "")
	if err != nil {
		t.Fatal(err)
	}
	const calls = 30
	msg := make([]byte, 5+1024)
	binary.BigEndian.PutUint32(msg[1:5], DefaultMaxMessageBytes)
	// Each stream must be answered, then reset: the server wants none of
	// the message that the client has not sent yet.
	answered, reset := map[uint32]bool{}, map[uint32]bool{}
	for i := range calls {
		id := uint32(2*i + 1)
		auth := []string{}
		if i%2 == 1 {
			auth = []string{"authorization", "Bearer guess"}
		}
		c.open(id, plumbv1.SandboxService_Write_FullMethodName, auth...)
		if err := c.fr.WriteData(id, false, msg); err != nil {
			t.Fatal(err)
		}
	}
	for len(answered) < calls || len(reset) < calls {
		f, err := c.next()
		if err != nil {
			t.Fatalf("%d of %d calls answered, %d reset: %v", len(answered), calls, len(reset), err)
		}
		switch f := f.(type) {
		case *http2.WindowUpdateFrame:
			t.Fatalf("the server asked for %d more bytes of stream %d: it reads an unauthenticated call's message", f.Increment, f.StreamID)
		case *http2.MetaHeadersFrame:
			if code := f.PseudoValue("status"); code != "200" {
				t.Fatalf("stream %d: HTTP status %q", f.StreamID, code)
			}
			if got := headerValue(f, "grpc-status"); got != "16" {
				t.Fatalf("stream %d: grpc-status %q (%s), want 16 (UNAUTHENTICATED)", f.StreamID, got, headerValue(f, "grpc-message"))
			}
			answered[f.StreamID] = true
		case *http2.RSTStreamFrame:
			if !answered[f.StreamID] {
				t.Fatalf("stream %d reset (%v) before an answer", f.StreamID, f.ErrCode)
			}
			reset[f.StreamID] = true
		case *http2.GoAwayFrame:
			t.Fatalf("server went away: %v", f.ErrCode)
		}
	}
	if got := refusedCount(t, reg, "unauthenticated"); got != calls {
		t.Errorf("plumb_grpc_server_refused_total{reason=\"unauthenticated\"} = %v, want %d", got, calls)
	}
}

// refusedCount reads plumb_grpc_server_refused_total{reason} from reg.
func refusedCount(t *testing.T, reg *prometheus.Registry, reason string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "plumb_grpc_server_refused_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" && l.GetValue() == reason {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

func headerValue(f *http2.MetaHeadersFrame, name string) string {
	for _, hf := range f.RegularFields() {
		if hf.Name == name {
			return hf.Value
		}
	}
	return ""
}

// TestStreamsPerConnectionBounded: the server announces its stream limit
// and refuses a call over it while the others are open.
func TestStreamsPerConnectionBounded(t *testing.T) {
	const limit = 4
	addr := serveWith(t, Options{Token: "s3cret", MaxStreamsPerConn: limit})
	c, err := dialH2(t, addr, "")
	if err != nil {
		t.Fatal(err)
	}
	f, err := c.fr.ReadFrame()
	if err != nil {
		t.Fatal(err)
	}
	sf, ok := f.(*http2.SettingsFrame)
	if !ok {
		t.Fatalf("first frame %v, want the server's settings", f)
	}
	if v, ok := sf.Value(http2.SettingMaxConcurrentStreams); !ok || v != limit {
		t.Fatalf("SETTINGS_MAX_CONCURRENT_STREAMS = %d (set: %v), want %d", v, ok, limit)
	}
	_ = c.fr.WriteSettingsAck()
	// Health watches need no token and stay open waiting for their request.
	for i := range limit + 1 {
		c.open(uint32(2*i+1), "/grpc.health.v1.Health/Watch")
	}
	over := uint32(2*limit + 1)
	for {
		f, err := c.next()
		if err != nil {
			t.Fatalf("stream %d never refused: %v", over, err)
		}
		if rst, ok := f.(*http2.RSTStreamFrame); ok {
			if rst.StreamID != over || rst.ErrCode != http2.ErrCodeRefusedStream {
				t.Fatalf("stream %d reset with %v; want only stream %d, REFUSED_STREAM", rst.StreamID, rst.ErrCode, over)
			}
			return
		}
	}
}

// TestConnectionsBounded: a peer over its connection limit, and any peer
// over the total, is closed at once; a closed connection frees its slot.
// Loopback has many addresses, so peers are 127.0.0.1, .2 and .3.
func TestConnectionsBounded(t *testing.T) {
	reg := prometheus.NewRegistry()
	addr := serveWith(t, Options{Token: "s3cret", MaxConnsPerPeer: 2, MaxConns: 3, Registry: reg})
	served := func(local string) (*h2Client, bool) {
		t.Helper()
		c, err := dialH2(t, addr, local)
		if err == nil {
			// The server's settings come first on a connection it serves.
			_, err = c.fr.ReadFrame()
		}
		if err != nil && !isClosedByPeer(err) {
			t.Fatalf("from %s: %v", local, err)
		}
		return c, err == nil
	}
	first, ok1 := served("127.0.0.1")
	_, ok2 := served("127.0.0.1")
	if !ok1 || !ok2 {
		t.Fatal("the first two connections from 127.0.0.1 were not served")
	}
	if _, ok := served("127.0.0.1"); ok {
		t.Fatal("a third connection from 127.0.0.1 was served over the per-peer limit of 2")
	}
	if _, ok := served("127.0.0.2"); !ok {
		t.Fatal("127.0.0.2's first connection was not served")
	}
	if _, ok := served("127.0.0.3"); ok {
		t.Fatal("a fourth connection was served over the total of 3")
	}
	if p, tot := refusedCount(t, reg, "peer_connections"), refusedCount(t, reg, "total_connections"); p != 1 || tot != 1 {
		t.Errorf("refused connections: peer %v, total %v; want 1 and 1", p, tot)
	}
	first.conn.Close()
	guard := time.Now().Add(2 * time.Minute)
	for {
		if _, ok := served("127.0.0.3"); ok {
			break
		}
		if time.Now().After(guard) {
			t.Fatal("a closed connection never freed its slot")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// isClosedByPeer reports the errors of using a connection the server
// closed: EOF, a reset when it closed with our preface unread, a broken
// pipe when we write after that.
func isClosedByPeer(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// TestSmallMethodsRefuseLargeMessages: a method that is not bulk takes
// messages up to MaxRecvBytes, unary or streaming; a bulk one up to
// MaxMessageBytes.
func TestSmallMethodsRefuseLargeMessages(t *testing.T) {
	ctx := context.Background()
	for _, bulk := range []bool{false, true} {
		o := Options{MaxRecvBytes: 1024}
		if bulk {
			o.BulkMethods = []string{plumbv1.SandboxService_GetSandbox_FullMethodName, plumbv1.SandboxService_ExecuteStream_FullMethodName}
		}
		addr := serveWith(t, o)
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		c := plumbv1.NewSandboxServiceClient(conn)
		big := strings.Repeat("x", 2048)
		wantUnary, wantStream := codes.ResourceExhausted, codes.ResourceExhausted
		if bulk {
			wantUnary, wantStream = codes.OK, codes.Aborted // whoami's answers
		}
		if _, err := c.GetSandbox(ctx, &plumbv1.GetSandboxRequest{SandboxId: big}); status.Code(err) != wantUnary {
			t.Errorf("bulk=%v: GetSandbox of 2 KiB: %v, want %v", bulk, err, wantUnary)
		}
		if _, err := c.GetSandbox(ctx, &plumbv1.GetSandboxRequest{SandboxId: "small"}); err != nil {
			t.Errorf("bulk=%v: small GetSandbox: %v", bulk, err)
		}
		s, err := c.ExecuteStream(ctx, &plumbv1.ExecuteStreamRequest{Command: &plumbv1.Command{Command: big}})
		if err == nil {
			_, err = s.Recv()
		}
		if status.Code(err) != wantStream {
			t.Errorf("bulk=%v: ExecuteStream of 2 KiB: %v, want %v", bulk, err, wantStream)
		}
	}
}

// TestTapAgreesWithInterceptors: the tap handle refuses exactly the calls
// the interceptors would, with the same code, for every kind of caller
// and method (health is open, reflection is not).
func TestTapAgreesWithInterceptors(t *testing.T) {
	path := filepath.Join(t.TempDir(), "creds")
	writeFile(t, path, "acme a-tok\nagentd fwd-tok forwarder\n")
	creds, err := LoadCredentials(path, "", false)
	if err != nil {
		t.Fatal(err)
	}
	methods := []string{plumbv1.SandboxService_Write_FullMethodName, "/grpc.health.v1.Health/Check",
		"/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"}
	headers := []metadata.MD{
		{},
		metadata.Pairs("authorization", "Bearer a-tok"),
		metadata.Pairs("authorization", "Bearer nope"),
		metadata.Pairs("authorization", "a-tok"),
		metadata.Pairs("authorization", "Bearer fwd-tok", tenant.MetadataKey, "beta"),
		metadata.Pairs("authorization", "Bearer fwd-tok", tenant.MetadataKey, "NO/PE"),
	}
	for _, cs := range []*Credentials{creds, nil} {
		tapFn := authTap(cs, nil)
		for _, m := range methods {
			for _, md := range headers {
				_, tapErr := tapFn(context.Background(), &tap.Info{FullMethodName: m, Header: md})
				_, authErr := authorize(metadata.NewIncomingContext(context.Background(), md), cs, m)
				if status.Code(tapErr) != status.Code(authErr) {
					t.Errorf("creds=%v %s %v: tap %v, interceptor %v", cs != nil, m, md, tapErr, authErr)
				}
			}
		}
	}
}

// TestTapFollowsReloadedCredentials: a token dropped from the credentials
// file is refused from the next call on, and a new one accepted.
func TestTapFollowsReloadedCredentials(t *testing.T) {
	path := filepath.Join(t.TempDir(), "creds")
	writeFile(t, path, "acme one\n")
	creds, err := LoadCredentials(path, "", false)
	if err != nil {
		t.Fatal(err)
	}
	addr := serveWith(t, Options{Credentials: creds})
	call := func(tok string) codes.Code {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithPerRPCCredentials(grpccreds.BearerToken(tok)))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_, err = plumbv1.NewSandboxServiceClient(conn).GetSandbox(context.Background(), &plumbv1.GetSandboxRequest{})
		return status.Code(err)
	}
	if got := call("one"); got != codes.OK {
		t.Fatalf("token one: %v", got)
	}
	writeFile(t, path, "acme two\n")
	if err := creds.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := call("one"); got != codes.Unauthenticated {
		t.Fatalf("dropped token one: %v, want UNAUTHENTICATED", got)
	}
	if got := call("two"); got != codes.OK {
		t.Fatalf("new token two: %v", got)
	}
}
