// Command approvalhook shows a product built on plumb's run resources and
// webhooks, without holding a stream while the agent works:
//
//  1. it makes the tenant's webhook signing key (RotateWebhookKey) and
//     listens for deliveries;
//  2. it starts a detached run with a webhook_url and lets the stream go;
//  3. when the signed run.interrupted webhook arrives, it verifies the
//     signature (pkg/webhook.Verify), shows the calls waiting for approval
//     and approves them (Resume, detached);
//  4. it waits for the run's result with WaitRun, and for the signed
//     webhook of its end.
//
// The listener must be reachable by agentd and allowed by agentd's
// webhook policy (webhooks.allow_http and webhooks.allow for a receiver
// on loopback, as in docs/webhooks.md).
//
//	go run ./examples/go/approvalhook --addr 127.0.0.1:7070 --token T --listen 127.0.0.1:0 "Write hello.txt"
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"time"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/pkg/webhook"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/durationpb"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:7070", "agentd gRPC address")
	token := flag.String("token", "", "bearer token, for an agentd started with --token-file")
	listen := flag.String("listen", "127.0.0.1:0", "address the webhook receiver listens on")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: approvalhook [--addr ADDR] [--token T] [--listen ADDR] PROMPT")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *addr, *token, *listen, flag.Arg(0)); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, addr, token, listen, prompt string) error {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("connect to %s: %w", addr, err)
	}
	defer conn.Close()
	if token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	}
	client := plumbv1.NewAgentServiceClient(conn)

	// 1. The signing key (shown once: a real product stores it as a
	// secret) and the receiver.
	key, err := client.RotateWebhookKey(ctx, &plumbv1.RotateWebhookKeyRequest{})
	if err != nil {
		return fmt.Errorf("rotate the webhook key: %w", err)
	}
	hooks, url, err := receive(listen, key.GetKey())
	if err != nil {
		return err
	}

	// 2. A detached run: once it has started, the stream can go.
	started, err := startDetached(ctx, func(ctx context.Context) (recv, error) {
		s, err := client.Run(ctx, &plumbv1.RunRequest{
			Input: []*plumbv1.InputMessage{{Content: prompt}}, Detach: true, WebhookUrl: url})
		return func() (*plumbv1.Event, error) { m, err := s.Recv(); return m.GetEvent(), err }, err
	})
	if err != nil {
		return fmt.Errorf("run: %w", err)
	}
	fmt.Printf("started run %s on thread %s; the stream is closed\n", started.GetRunId(), started.GetThreadId())

	// 3. The run pauses for an approval: its webhook says what waits.
	p, err := await(ctx, hooks, started.GetRunId(), webhook.RunInterrupted)
	if err != nil {
		return err
	}
	req := &plumbv1.ResumeRequest{ThreadId: p.ThreadID, InterruptId: p.Interrupt.ID, Detach: true}
	for _, r := range p.Interrupt.Requests {
		fmt.Printf("approving %s %s\n", r.ToolName, r.Args)
		req.Decisions = append(req.Decisions, &plumbv1.Decision{
			ToolCallId: r.ToolCallID, AgentPath: r.AgentPath, Type: plumbv1.DecisionType_DECISION_TYPE_APPROVE})
	}
	if _, err := startDetached(ctx, func(ctx context.Context) (recv, error) {
		s, err := client.Resume(ctx, req)
		return func() (*plumbv1.Event, error) { m, err := s.Recv(); return m.GetEvent(), err }, err
	}); err != nil {
		return fmt.Errorf("resume: %w", err)
	}

	// 4. Wait for the result, on any agentd replica.
	rec, err := waitEnd(ctx, client, started.GetRunId())
	if err != nil {
		return err
	}
	fmt.Printf("run %s: %s\n", rec.GetRunId(), rec.GetStatus())
	end, err := await(ctx, hooks, started.GetRunId(), webhook.RunSucceeded, webhook.RunFailed, webhook.RunCancelled)
	if err != nil {
		return err
	}
	fmt.Printf("final webhook %s: status %s\n", end.Type, end.Status)
	return nil
}

// recv reads a stream's next event.
type recv func() (*plumbv1.Event, error)

// startDetached opens a detached Run or Resume stream, reads up to its
// run_started event and closes it: the run goes on in agentd.
func startDetached(ctx context.Context, open func(context.Context) (recv, error)) (*plumbv1.RunStarted, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // closes the stream; a detached run does not notice
	next, err := open(ctx)
	if err != nil {
		return nil, err
	}
	for {
		ev, err := next()
		if err != nil {
			return nil, fmt.Errorf("the stream ended before the run started: %w", err)
		}
		if s := ev.GetRunStarted(); s != nil {
			return s, nil
		}
		if e := ev.GetError(); e != nil {
			return nil, fmt.Errorf("%s: %s", e.GetCode(), e.GetMessage())
		}
	}
}

// receive serves the webhook receiver on listen and returns the verified
// deliveries, once each, and the URL to give agentd.
func receive(listen, key string) (<-chan webhook.Payload, string, error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, "", fmt.Errorf("listen for webhooks: %w", err)
	}
	out := make(chan webhook.Payload, 16)
	seen := map[string]bool{}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			http.Error(w, "read", http.StatusBadRequest)
			return
		}
		// Verify before parsing: only agentd knows the key.
		if err := webhook.Verify(r.Header.Get(webhook.SignatureHeader), body, []string{key}, 5*time.Minute, time.Now()); err != nil {
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		var p webhook.Payload
		if err := json.Unmarshal(body, &p); err != nil {
			http.Error(w, "bad body", http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusNoContent)
		if !seen[p.ID] { // a retry of a delivery we already have
			seen[p.ID] = true
			fmt.Printf("webhook %s for run %s: signature verified\n", p.Type, p.RunID)
			out <- p
		}
	})
	srv := &http.Server{Handler: serialized(h), ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln) //nolint:errcheck // ends with the process
	return out, "http://" + ln.Addr().String() + "/hooks/plumb", nil
}

// serialized runs one request at a time (seen is not shared).
func serialized(h http.Handler) http.Handler {
	lock := make(chan struct{}, 1)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		lock <- struct{}{}
		defer func() { <-lock }()
		h.ServeHTTP(w, r)
	})
}

// await returns the first delivery of run with one of the types.
func await(ctx context.Context, hooks <-chan webhook.Payload, run string, types ...webhook.EventType) (webhook.Payload, error) {
	for {
		select {
		case <-ctx.Done():
			return webhook.Payload{}, fmt.Errorf("waiting for the %v webhook: %w", types, ctx.Err())
		case p := <-hooks:
			for _, t := range types {
				if p.RunID == run && p.Type == t {
					return p, nil
				}
			}
		}
	}
}

// waitEnd calls WaitRun until the run has ended. A wait returns early when
// it times out or while the run is still marked interrupted (the resumed
// segment has not recorded itself yet).
func waitEnd(ctx context.Context, client plumbv1.AgentServiceClient, run string) (*plumbv1.RunRecord, error) {
	for {
		w, err := client.WaitRun(ctx, &plumbv1.WaitRunRequest{RunId: run, Timeout: durationpb.New(time.Minute)})
		if err != nil {
			return nil, fmt.Errorf("wait for run %s: %w", run, err)
		}
		switch w.GetRun().GetStatus() {
		case plumbv1.RunStatus_RUN_STATUS_RUNNING, plumbv1.RunStatus_RUN_STATUS_QUEUED, plumbv1.RunStatus_RUN_STATUS_INTERRUPTED:
			select {
			case <-ctx.Done():
				return nil, errors.Join(errors.New("the run did not end"), ctx.Err())
			case <-time.After(200 * time.Millisecond):
			}
		default:
			return w.GetRun(), nil
		}
	}
}
