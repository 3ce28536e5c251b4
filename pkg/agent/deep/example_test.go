package deep_test

import (
	"context"
	"fmt"

	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/agent/deep"
	"github.com/plumbhq/plumb/pkg/model/modeltest"
	"github.com/plumbhq/plumb/pkg/model/openai"
)

// Example wires a deep agent the way agentd does: models by key, the
// State backend per thread, the memory store, and a sink for the events.
func Example() {
	srv := modeltest.New(nil) // a scripted OpenAI-compatible server
	defer srv.Close()
	srv.Script("main", modeltest.Calls(modeltest.Call{ID: "c1", Name: "write_file", Args: `{"file_path":"/hello.txt","content":"hi"}`}), modeltest.Text("Saved /hello.txt."))

	chat, err := openai.New(openai.Config{BaseURL: srv.URL(), Model: "gpt-4.1"}, openai.WithHTTPClient(srv.Client()))
	if err != nil {
		panic(err)
	}
	rt, err := deep.New(deep.Config{
		Models:       map[string]deep.Model{"smart": {Chat: chat, Name: "gpt-4.1"}},
		DefaultModel: "smart",
		Backend:      deep.StateBackends(),
		Store:        agent.NewMemoryStore(),
	})
	if err != nil {
		panic(err)
	}
	res, err := rt.Run(context.Background(), agent.RunInput{Input: []string{"Save a greeting."}}, func(ev agent.Event) {
		switch p := ev.Payload.(type) {
		case agent.ToolResultEvent:
			fmt.Printf("%d %s %s: %s\n", ev.Sequence, p.Kind(), p.Name, p.Content)
		case agent.RunFinished:
			fmt.Printf("%d %s %s: %s\n", ev.Sequence, p.Kind(), p.Status, p.FinalText)
		}
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(res.Status)
	// Output:
	// 7 tool_result write_file: Wrote 2 bytes to /hello.txt (created it).
	// 13 run_finished COMPLETED: Saved /hello.txt.
	// COMPLETED
}
