package main

import (
	"context"
	"fmt"

	"github.com/moby/moby/client"
)

// runB20 reports the gVisor memory-checkpoint rows (issue 19 items 4 and
// 9): hibernate with a checkpoint of the box's memory, and the wake that
// restores it, each beside its workspace-only baseline under runsc. They
// are not implemented (docs/workspaces.md, "Not yet"): gVisor's restore
// kills every process descended from an exec, and every command plumb runs
// descends from its exec'd agent. The rows say so, and what this engine
// would offer, instead of timing something plumb does not do.
func runB20(ctx context.Context, e *env) ([]Row, error) {
	cli, err := e.engineClient(ctx)
	if err != nil {
		return nil, err
	}
	info, err := cli.Info(ctx, client.InfoOptions{})
	if err != nil {
		return nil, fmt.Errorf("engine info: %w", err)
	}
	_, runsc := info.Info.Runtimes["runsc"]
	engine := fmt.Sprintf("this engine: experimental %v, runsc registered %v", info.Info.ExperimentalBuild, runsc)
	why := "not measured: hibernation keeps the workspace only under every runtime, because gVisor's restore kills every process descended from a docker exec and every box command descends from the exec'd agent (docs/workspaces.md, Not yet)"
	rows := []Row{
		{Scenario: "B20", Name: "hibernate with a gVisor memory checkpoint (time, image bytes)", Unit: unitNoData, Target: "— (info)", Verdict: verdictNotImpl},
		{Scenario: "B20", Name: "wake from a gVisor memory checkpoint → first Execute", Unit: unitNoData, Target: "— (info)", Verdict: verdictNotImpl},
	}
	for i := range rows {
		rows[i].note("%s", why)
		rows[i].note("%s", engine)
	}
	return rows, nil
}
