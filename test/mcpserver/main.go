// Command mcpserver is the MCP server of plumb's tests (package mcptest)
// as a binary: build it statically (CGO_ENABLED=0) to run it inside a
// sandbox as a stdio server, or give it -http to serve streamable HTTP.
//
//	mcpserver [-mode serve|garbage|exit|silent] [-http 127.0.0.1:8080]
package main

import (
	"flag"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/plumbhq/plumb/pkg/agent/tools/mcptool/mcptest"
)

func main() {
	mode := flag.String("mode", mcptest.ModeServe, "stdio mode: serve, garbage, exit, silent or crash")
	addr := flag.String("http", "", "serve streamable HTTP on this address instead of stdio")
	auth := flag.String("auth", "", "required Authorization header value (HTTP)")
	flag.Parse()
	if *addr == "" {
		os.Exit(mcptest.Serve(*mode))
	}
	srv := &http.Server{Addr: *addr, Handler: mcptest.Handler(mcptest.Options{}, *auth), ReadHeaderTimeout: 10 * time.Second}
	if err := srv.ListenAndServe(); err != nil {
		fmt.Fprintln(os.Stderr, "mcpserver:", err)
		os.Exit(1)
	}
}
