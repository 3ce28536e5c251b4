package mcptest

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// Options shape the test server.
type Options struct {
	// HangForever makes hang ignore cancellation (a stdio process whose
	// only way out is being killed).
	HangForever bool
	// Stdout is where garbage writes in stdio mode (nil: garbage reports
	// that it only works over stdio).
	Stdout io.Writer
	// BadSchemas adds to the tool list two tools whose input schemas are
	// not objects ("scalar": type string, "list": type array), which the
	// SDK would refuse to register.
	BadSchemas bool
}

// A 1x1 transparent PNG.
var pngPixel, _ = base64.StdEncoding.DecodeString("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII=")

type echoIn struct {
	Text string `json:"text" jsonschema:"the text to echo"`
}

type addIn struct {
	A int `json:"a"`
	B int `json:"b"`
}

type addOut struct {
	Sum int `json:"sum"`
}

type hugeIn struct {
	Chars int `json:"chars" jsonschema:"how many characters to return"`
}

type envIn struct {
	Name string `json:"name"`
}

type none struct{}

func text(s string) *sdk.CallToolResult {
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: s}}}
}

// NewServer returns the test server.
func NewServer(o Options) *sdk.Server {
	s := sdk.NewServer(&sdk.Implementation{Name: "plumb-mcptest", Version: "1"}, &sdk.ServerOptions{Logger: slog.New(slog.DiscardHandler)})
	sdk.AddTool(s, &sdk.Tool{Name: "echo", Description: "Echoes text."}, func(_ context.Context, _ *sdk.CallToolRequest, in echoIn) (*sdk.CallToolResult, none, error) {
		return text(in.Text), none{}, nil
	})
	sdk.AddTool(s, &sdk.Tool{Name: "add", Description: "Adds two integers."}, func(_ context.Context, _ *sdk.CallToolRequest, in addIn) (*sdk.CallToolResult, addOut, error) {
		return nil, addOut{Sum: in.A + in.B}, nil
	})
	sdk.AddTool(s, &sdk.Tool{Name: "hang", Description: "Never answers."}, func(ctx context.Context, _ *sdk.CallToolRequest, _ none) (*sdk.CallToolResult, none, error) {
		if o.HangForever {
			select {}
		}
		<-ctx.Done()
		return nil, none{}, ctx.Err()
	})
	sdk.AddTool(s, &sdk.Tool{Name: "huge", Description: "Returns many characters."}, func(_ context.Context, _ *sdk.CallToolRequest, in hugeIn) (*sdk.CallToolResult, none, error) {
		line := strings.Repeat("x", 99) + "\n"
		return text(strings.Repeat(line, in.Chars/100+1)[:in.Chars]), none{}, nil
	})
	sdk.AddTool(s, &sdk.Tool{Name: "fail", Description: "Always fails."}, func(context.Context, *sdk.CallToolRequest, none) (*sdk.CallToolResult, none, error) {
		return nil, none{}, errors.New("it failed on purpose")
	})
	sdk.AddTool(s, &sdk.Tool{Name: "image", Description: "Returns a picture."}, func(context.Context, *sdk.CallToolRequest, none) (*sdk.CallToolResult, none, error) {
		return &sdk.CallToolResult{Content: []sdk.Content{
			&sdk.TextContent{Text: "a pixel:"},
			&sdk.ImageContent{Data: pngPixel, MIMEType: "image/png"},
			&sdk.ResourceLink{URI: "file:///pixel.png", Name: "pixel"},
		}}, none{}, nil
	})
	sdk.AddTool(s, &sdk.Tool{Name: "garbage", Description: "Writes something that is not JSON-RPC to stdout."}, func(context.Context, *sdk.CallToolRequest, none) (*sdk.CallToolResult, none, error) {
		if o.Stdout == nil {
			return text("garbage only works over stdio"), none{}, nil
		}
		fmt.Fprintln(o.Stdout, "this is not JSON-RPC")
		return text("sent garbage"), none{}, nil
	})
	sdk.AddTool(s, &sdk.Tool{Name: "pid", Description: "Returns the server's process id."}, func(context.Context, *sdk.CallToolRequest, none) (*sdk.CallToolResult, none, error) {
		return text(fmt.Sprint(os.Getpid())), none{}, nil
	})
	sdk.AddTool(s, &sdk.Tool{Name: "env", Description: "Returns an environment variable."}, func(_ context.Context, _ *sdk.CallToolRequest, in envIn) (*sdk.CallToolResult, none, error) {
		return text(os.Getenv(in.Name)), none{}, nil
	})
	if o.BadSchemas {
		s.AddReceivingMiddleware(func(next sdk.MethodHandler) sdk.MethodHandler {
			return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
				res, err := next(ctx, method, req)
				if lt, ok := res.(*sdk.ListToolsResult); ok && err == nil {
					lt.Tools = append(lt.Tools,
						&sdk.Tool{Name: "scalar", Description: "Takes a bare string.", InputSchema: map[string]any{"type": "string"}},
						&sdk.Tool{Name: "list", Description: "Takes an array.", InputSchema: map[string]any{"type": "array", "items": map[string]any{"type": "string"}}})
				}
				return res, err
			}
		})
	}
	return s
}

// Handler serves the test server over streamable HTTP; requests must
// carry header "Authorization: <auth>" when auth is not empty.
func Handler(o Options, auth string) http.Handler {
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return NewServer(o) }, nil)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if auth != "" && r.Header.Get("Authorization") != auth {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// Stdio modes of Serve.
const (
	// ModeServe serves the tools over stdin and stdout.
	ModeServe = "serve"
	// ModeGarbage writes lines that are not JSON-RPC and never serves.
	ModeGarbage = "garbage"
	// ModeExit writes a message to stderr and exits with status 3.
	ModeExit = "exit"
	// ModeSilent reads its input and never answers.
	ModeSilent = "silent"
	// ModeCrash writes a long log to stderr, ending with the line
	// CrashLine, and exits with status 1, as a server whose startup
	// fails deep inside its code does.
	ModeCrash = "crash"
)

// CrashLine is the last line ModeCrash writes to stderr.
const CrashLine = "FATAL: cannot read /etc/mcp/config.yaml: permission denied"

// Serve runs the server over stdio in the given mode and returns its exit
// status.
func Serve(mode string) int {
	switch mode {
	case ModeGarbage:
		for range 3 {
			fmt.Println("hello, I am not an MCP server")
		}
		_, _ = io.Copy(io.Discard, os.Stdin)
		return 0
	case ModeExit:
		fmt.Fprintln(os.Stderr, "mcptest: cannot open the database")
		return 3
	case ModeSilent:
		_, _ = io.Copy(io.Discard, os.Stdin)
		return 0
	case ModeCrash:
		for i := range 200 {
			fmt.Fprintf(os.Stderr, "debug: loading module %03d of the server's plugins\n", i)
		}
		fmt.Fprintln(os.Stderr, CrashLine)
		return 1
	}
	s := NewServer(Options{HangForever: true, Stdout: os.Stdout})
	if err := s.Run(context.Background(), &sdk.StdioTransport{}); err != nil {
		fmt.Fprintln(os.Stderr, "mcptest:", err)
		return 1
	}
	return 0
}
