// Command scriptmodel is a scripted OpenAI-compatible chat model for the
// Kubernetes end-to-end suite (scripts/k8s/e2e.sh), whose agentd pods
// reach it over the node's bridge: the tests' modeltest server is a
// testing helper and listens on loopback only.
//
// Its script, by the last user message: "run: CMD" is answered with one
// `execute` call of CMD, then a final text "result: " and that call's
// output; "loop: N: CMD" with N `execute` calls of CMD, one per model
// call, then "result: " and the last call's output; anything else with
// "ok". Streamed (SSE) or not, as the request asks.
//
//	scriptmodel --addr 10.227.0.1:27916
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/plumbhq/plumb/pkg/model/chatwire"
)

type message struct {
	Role    string `json:"role"`
	Content any    `json:"content"`
}

type request struct {
	Model    string    `json:"model"`
	Stream   bool      `json:"stream"`
	Messages []message `json:"messages"`
}

// reply is one scripted answer: a text, or one execute call.
type reply struct {
	text    string
	command string
}

var calls atomic.Int64

func answer(msgs []message) reply {
	user, results, last := "", 0, ""
	for _, m := range msgs {
		switch m.Role {
		case "user":
			user, results, last = text(m.Content), 0, ""
		case "tool":
			results++
			last = text(m.Content)
		}
	}
	want, command := 0, ""
	if c, ok := strings.CutPrefix(user, "run: "); ok {
		want, command = 1, c
	} else if rest, ok := strings.CutPrefix(user, "loop: "); ok {
		n, c, _ := strings.Cut(rest, ": ")
		want, _ = strconv.Atoi(n)
		command = c
	}
	switch {
	case command == "":
		return reply{text: "ok"}
	case results < want:
		return reply{command: command}
	}
	return reply{text: "result: " + last}
}

// text flattens a message content (a string or a list of parts).
func text(c any) string {
	switch v := c.(type) {
	case string:
		return v
	case []any:
		var b strings.Builder
		for _, p := range v {
			if m, ok := p.(map[string]any); ok {
				if s, ok := m["text"].(string); ok {
					b.WriteString(s)
				}
			}
		}
		return b.String()
	}
	return ""
}

func serve(w http.ResponseWriter, r *http.Request) {
	var req request
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, `{"error":{"message":"bad request body"}}`, http.StatusBadRequest)
		return
	}
	n := calls.Add(1)
	rep := answer(req.Messages)
	log.Printf("call %d: %d messages -> text %q command %q", n, len(req.Messages), rep.text, rep.command)
	finish := "stop"
	delta := chatwire.Delta{Role: "assistant", Content: rep.text}
	if rep.command != "" {
		args, _ := json.Marshal(map[string]string{"command": rep.command})
		zero := 0
		finish = "tool_calls"
		delta = chatwire.Delta{Role: "assistant", ToolCalls: []chatwire.ToolCall{{
			Index: &zero, ID: fmt.Sprintf("call_%d", n), Type: "function",
			Function: chatwire.Function{Name: "execute", Arguments: string(args)},
		}}}
	}
	usage := &chatwire.Usage{PromptTokens: 10, CompletionTokens: 5, TotalTokens: 15}
	base := chatwire.Chunk{ID: fmt.Sprintf("chatcmpl-%d", n), Object: "chat.completion.chunk", Created: time.Now().Unix(), Model: req.Model}
	if !req.Stream {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"id": base.ID, "object": "chat.completion", "created": base.Created, "model": req.Model,
			"choices": []map[string]any{{"index": 0, "message": map[string]any{
				"role": "assistant", "content": delta.Content, "tool_calls": delta.ToolCalls}, "finish_reason": finish}},
			"usage": usage,
		})
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	send := func(c chatwire.Chunk) {
		b, _ := json.Marshal(c)
		fmt.Fprintf(w, "data: %s\n\n", b)
	}
	c := base
	c.Choices = []chatwire.Choice{{Delta: delta}}
	send(c)
	c.Choices = []chatwire.Choice{{FinishReason: &finish}}
	send(c)
	c.Choices, c.Usage = []chatwire.Choice{}, usage
	send(c)
	fmt.Fprint(w, "data: [DONE]\n\n")
}

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "listen address")
	flag.Parse()
	http.HandleFunc("POST /v1/chat/completions", serve)
	log.Printf("scripted model on http://%s/v1", *addr)
	log.Fatal(http.ListenAndServe(*addr, nil))
}
