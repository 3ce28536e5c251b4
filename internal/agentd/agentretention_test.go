package agentd

import (
	"testing"

	"google.golang.org/grpc/metadata"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/tenant"
	"github.com/plumbhq/plumb/pkg/model/modeltest"
)

// TestAgentCheckpointsKeep: agents.<name>.retention.checkpoints_keep
// reaches the thread store agentd opens: a run of that agent leaves its
// thread with that many checkpoints, and a run of the default agent with
// retention.checkpoints_keep.
func TestAgentCheckpointsKeep(t *testing.T) {
	s := serveCore(t, `retention: {checkpoints_keep: 50}
agents:
  brief: {retention: {checkpoints_keep: 2}}
`)
	todo := mcall("c1", "write_todos", `{"todos":[{"content":"a","status":"pending"}]}`)
	s.model.Script("main", modeltest.Calls(todo), modeltest.Text("done"))
	s.model.Script("brief", modeltest.Calls(todo), modeltest.Text("done"))
	ctx := metadata.AppendToOutgoingContext(t.Context(), tenant.MetadataKey, "acme")
	kept := func(agentName string) int {
		t.Helper()
		rs, err := s.c.Run(ctx, &plumbv1.RunRequest{Agent: agentName, Input: []*plumbv1.InputMessage{{Content: "work"}}})
		if err != nil {
			t.Fatal(err)
		}
		var thread string
		for {
			m, err := rs.Recv()
			if err != nil {
				t.Fatalf("run of agent %q: %v", agentName, err)
			}
			thread = m.GetEvent().GetThreadId()
			if f := m.GetEvent().GetRunFinished(); f != nil {
				if f.GetStatus() != plumbv1.RunStatus_RUN_STATUS_COMPLETED {
					t.Fatalf("run of agent %q ended %v", agentName, f)
				}
				break
			}
		}
		res, err := s.c.ListCheckpoints(ctx, &plumbv1.ListCheckpointsRequest{ThreadId: thread, PageSize: 500})
		if err != nil {
			t.Fatal(err)
		}
		return len(res.GetCheckpoints())
	}
	if n := kept(""); n <= 2 {
		t.Fatalf("the default agent's thread kept %d checkpoints; want its run's every one (more than 2, under 50)", n)
	}
	if n := kept("brief"); n != 2 {
		t.Fatalf("agent brief's thread kept %d checkpoints; want 2 (its checkpoints_keep)", n)
	}
}
