package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
)

// workspaceCommand runs `agentctl sandbox snapshot|snapshots|suspend|resume`
// (docs/workspaces.md).
func workspaceCommand(ctx context.Context, c plumbv1.SandboxServiceClient, cmd string, fs *flag.FlagSet, args []string, stdout io.Writer) error {
	switch cmd {
	case "snapshot":
		if len(args) != 1 {
			return errors.New("snapshot: want one sandbox id")
		}
		resp, err := c.SnapshotSandbox(ctx, &plumbv1.SnapshotSandboxRequest{SandboxId: args[0]})
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, resp.GetSnapshot().GetId())
		return nil
	case "snapshots":
		if len(args) > 0 && args[0] == "rm" {
			if len(args) == 1 {
				return errors.New("snapshots rm: missing snapshot id")
			}
			for _, id := range args[1:] {
				if _, err := c.DeleteSnapshot(ctx, &plumbv1.DeleteSnapshotRequest{SnapshotId: id}); err != nil {
					return fmt.Errorf("snapshots rm %s: %w", id, err)
				}
				fmt.Fprintln(stdout, id)
			}
			return nil
		}
		if len(args) > 0 {
			return fmt.Errorf("snapshots: unexpected %q (want nothing, or rm SNAPSHOT...)", args[0])
		}
		resp, err := c.ListSnapshots(ctx, &plumbv1.ListSnapshotsRequest{})
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tSANDBOX\tSIZE\tSTORED\tPARENT\tCREATED")
		for _, s := range resp.GetSnapshots() {
			if s.GetCorrupt() {
				fmt.Fprintf(tw, "%s\tCORRUPT\t\t\t\t\n", s.GetId())
				continue
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\n", s.GetId(), s.GetSandboxId(), s.GetSizeBytes(), s.GetStoredBytes(), s.GetParentId(),
				s.GetCreatedAt().AsTime().Local().Format(time.DateTime))
		}
		return tw.Flush()
	case "suspend":
		hibernate := fs.Bool("hibernate", false, "hibernate instead of pausing")
		var ids []string
		for len(args) > 0 { // the id may come before or after the flag
			if err := fs.Parse(args); err != nil {
				return err
			}
			args = fs.Args()
			if len(args) > 0 {
				ids, args = append(ids, args[0]), args[1:]
			}
		}
		if len(ids) != 1 {
			return errors.New("suspend: want one sandbox id")
		}
		mode := plumbv1.SuspendMode_SUSPEND_MODE_PAUSE
		if *hibernate {
			mode = plumbv1.SuspendMode_SUSPEND_MODE_HIBERNATE
		}
		resp, err := c.SuspendSandbox(ctx, &plumbv1.SuspendSandboxRequest{SandboxId: ids[0], Mode: mode})
		if err != nil {
			return err
		}
		state := strings.TrimPrefix(resp.GetSandbox().GetState().String(), "SANDBOX_STATE_")
		if resp.GetProcessesKept() {
			fmt.Fprintf(stdout, "%s %s (processes kept)\n", ids[0], state)
		} else {
			fmt.Fprintf(stdout, "%s %s snapshot %s (workspace only: processes end)\n", ids[0], state, resp.GetSnapshotId())
		}
		return nil
	case "resume":
		if len(args) != 1 {
			return errors.New("resume: want one sandbox id")
		}
		resp, err := c.ResumeSandbox(ctx, &plumbv1.ResumeSandboxRequest{SandboxId: args[0]})
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s %s\n", args[0], strings.TrimPrefix(resp.GetSandbox().GetState().String(), "SANDBOX_STATE_"))
		return nil
	}
	return fmt.Errorf("unknown sandbox command %q", cmd)
}
