// Command sandbox-agent is the small static program sandboxd copies into
// every sandbox container. It reads newline-delimited JSON request frames on
// stdin and writes response frames on stdout; file operations and commands
// run inside the container, never on the host.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"

	"github.com/plumbhq/plumb/internal/version"
)

// frame is one request or response on the agent channel.
type frame struct {
	ID    uint64 `json:"id"`
	Op    string `json:"op,omitempty"`
	OK    bool   `json:"ok,omitempty"`
	Error string `json:"error,omitempty"`
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "--version" {
		fmt.Println(version.String("sandbox-agent"))
		return
	}
	in := bufio.NewReader(os.Stdin)
	enc := json.NewEncoder(os.Stdout)
	for {
		line, err := in.ReadBytes('\n')
		if len(line) > 0 {
			var req frame
			resp := frame{}
			if jerr := json.Unmarshal(line, &req); jerr != nil {
				resp.Error = "malformed frame: " + jerr.Error()
			} else {
				resp.ID = req.ID
				switch req.Op {
				case "ping":
					resp.OK = true
				default:
					resp.Error = fmt.Sprintf("unknown op %q", req.Op)
				}
			}
			if werr := enc.Encode(resp); werr != nil {
				os.Exit(1)
			}
		}
		if err != nil {
			return
		}
	}
}
