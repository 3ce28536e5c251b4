// Command runagent is a small client of plumb.v1.AgentService: it runs an agent on
// a prompt, prints the streamed text and tool calls as they arrive, asks on
// stdin for a decision whenever the run waits for an approval, resumes the
// run with it, and prints the final answer.
//
//	go run ./examples/go/runagent --addr 127.0.0.1:7070 [--token T] "Write hello.txt"
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:7070", "agentd gRPC address")
	token := flag.String("token", "", "bearer token, for an agentd started with --token-file")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: runagent [--addr ADDR] [--token T] PROMPT")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	// Ctrl-C cancels the stream, and agentd cancels the run.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *addr, *token, flag.Arg(0)); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, addr, token, prompt string) error {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("connect to %s: %w", addr, err)
	}
	defer conn.Close()
	if token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	}
	client := plumbv1.NewAgentServiceClient(conn)

	stream, err := client.Run(ctx, &plumbv1.RunRequest{Input: []*plumbv1.InputMessage{{Content: prompt}}})
	if err != nil {
		return fmt.Errorf("run: %w", err)
	}
	next := func() (*plumbv1.Event, error) { m, err := stream.Recv(); return m.GetEvent(), err }
	stdin := bufio.NewReader(os.Stdin)
	for {
		// Every stream ends with one of run_finished, interrupted or error.
		ev, err := follow(next)
		if err != nil {
			return err
		}
		switch p := ev.Payload.(type) {
		case *plumbv1.Event_RunFinished:
			fmt.Printf("final answer (%s): %s\n", p.RunFinished.GetStatus(), p.RunFinished.GetFinalText())
			return nil
		case *plumbv1.Event_Error:
			return fmt.Errorf("run failed: %s: %s", p.Error.GetCode(), p.Error.GetMessage())
		case *plumbv1.Event_Interrupted:
			// The run waits: answer every pending call at once, then
			// follow the resumed run on a new stream.
			req := &plumbv1.ResumeRequest{ThreadId: ev.GetThreadId(), InterruptId: p.Interrupted.GetInterruptId()}
			for _, r := range p.Interrupted.GetRequests() {
				req.Decisions = append(req.Decisions, decide(stdin, r))
			}
			resumed, err := client.Resume(ctx, req)
			if err != nil {
				return fmt.Errorf("resume: %w", err)
			}
			next = func() (*plumbv1.Event, error) { m, err := resumed.Recv(); return m.GetEvent(), err }
		default:
			return fmt.Errorf("the stream ended with %T", p)
		}
	}
}

// follow prints a stream's events as they arrive and returns the last one.
func follow(next func() (*plumbv1.Event, error)) (*plumbv1.Event, error) {
	var last *plumbv1.Event
	for {
		ev, err := next()
		if errors.Is(err, io.EOF) {
			if last == nil {
				return nil, errors.New("the stream ended without events")
			}
			return last, nil
		}
		if err != nil {
			return nil, fmt.Errorf("receive: %w", err)
		}
		last = ev
		switch p := ev.Payload.(type) {
		case *plumbv1.Event_RunStarted:
			fmt.Printf("[thread %s, run %s, resumed %t]\n", p.RunStarted.GetThreadId(), p.RunStarted.GetRunId(), p.RunStarted.GetResumed())
		case *plumbv1.Event_MessageDelta:
			// Subagents stream too; this example shows the main agent's text.
			if ev.GetParentToolCallId() == "" {
				fmt.Print(p.MessageDelta.GetText())
			}
		case *plumbv1.Event_Message:
			// The complete message follows its deltas: end the line.
			if ev.GetParentToolCallId() == "" && p.Message.GetText() != "" {
				fmt.Println()
			}
		case *plumbv1.Event_ToolCallStarted:
			fmt.Printf("→ %s %s\n", p.ToolCallStarted.GetName(), p.ToolCallStarted.GetArgsJson())
		case *plumbv1.Event_ToolResult:
			fmt.Printf("← %s: %s\n", p.ToolResult.GetName(), firstLine(p.ToolResult.GetContent()))
		}
	}
}

// decide asks the human about one pending call: y approves it, anything
// else rejects it.
func decide(stdin *bufio.Reader, r *plumbv1.InterruptRequest) *plumbv1.Decision {
	fmt.Printf("approve %s %s? [y/N] ", r.GetToolName(), r.GetArgsJson())
	answer, _ := stdin.ReadString('\n')
	d := &plumbv1.Decision{ToolCallId: r.GetToolCallId(), AgentPath: r.GetAgentPath(), Type: plumbv1.DecisionType_DECISION_TYPE_APPROVE}
	if a := strings.ToLower(strings.TrimSpace(answer)); a != "y" && a != "yes" {
		d.Type, d.Message = plumbv1.DecisionType_DECISION_TYPE_REJECT, "the user declined"
	}
	return d
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
