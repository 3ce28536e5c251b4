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

// workspaceCommand runs `agentctl sandbox snapshot|snapshots|suspend|resume|
// fork|volumes` (docs/workspaces.md).
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
		switch {
		case resp.GetProcessesKept() && resp.GetSnapshotId() != "":
			fmt.Fprintf(stdout, "%s %s snapshot %s (processes kept)\n", ids[0], state, resp.GetSnapshotId())
		case resp.GetProcessesKept():
			fmt.Fprintf(stdout, "%s %s (processes kept)\n", ids[0], state)
		default:
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
	case "fork":
		if len(args) == 0 || strings.HasPrefix(args[0], "-") {
			return errors.New("fork: want the snapshot id first")
		}
		snap := args[0]
		count := fs.Int("count", 1, "how many boxes")
		build := createFlags(fs)
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		if fs.NArg() > 0 {
			return fmt.Errorf("fork: unexpected %q", fs.Arg(0))
		}
		req, err := build()
		if err != nil {
			return err
		}
		resp, err := c.ForkSandbox(ctx, &plumbv1.ForkSandboxRequest{SnapshotId: snap, Count: int32(*count), Sandbox: req})
		if err != nil {
			return err
		}
		for _, sb := range resp.GetSandboxes() {
			fmt.Fprintln(stdout, sb.GetId())
		}
		return nil
	case "volumes":
		return volumesCommand(ctx, c, fs, args, stdout)
	}
	return fmt.Errorf("unknown sandbox command %q", cmd)
}

// volumesCommand runs `agentctl sandbox volumes [create NAME [--size
// BYTES] | rm NAME...]`.
func volumesCommand(ctx context.Context, c plumbv1.SandboxServiceClient, fs *flag.FlagSet, args []string, stdout io.Writer) error {
	switch {
	case len(args) == 0:
		resp, err := c.ListVolumes(ctx, &plumbv1.ListVolumesRequest{})
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tID\tSIZE\tCREATED\tSANDBOXES")
		for _, v := range resp.GetVolumes() {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", v.GetName(), v.GetId(), v.GetSizeBytes(),
				v.GetCreatedAt().AsTime().Local().Format(time.DateTime), strings.Join(v.GetSandboxIds(), ","))
		}
		return tw.Flush()
	case args[0] == "create":
		size := fs.Int64("size", 0, "size in bytes (0 = the worker's default)")
		var names []string
		rest := args[1:]
		for len(rest) > 0 { // the name may come before or after the flag
			if err := fs.Parse(rest); err != nil {
				return err
			}
			rest = fs.Args()
			if len(rest) > 0 {
				names, rest = append(names, rest[0]), rest[1:]
			}
		}
		if len(names) != 1 {
			return errors.New("volumes create: want one volume name")
		}
		resp, err := c.CreateVolume(ctx, &plumbv1.CreateVolumeRequest{Name: names[0], SizeBytes: *size})
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, resp.GetVolume().GetId())
		return nil
	case args[0] == "rm":
		if len(args) == 1 {
			return errors.New("volumes rm: missing volume name")
		}
		for _, name := range args[1:] {
			if _, err := c.DeleteVolume(ctx, &plumbv1.DeleteVolumeRequest{Name: name}); err != nil {
				return fmt.Errorf("volumes rm %s: %w", name, err)
			}
			fmt.Fprintln(stdout, name)
		}
		return nil
	}
	return fmt.Errorf("volumes: unexpected %q (want nothing, create NAME or rm NAME...)", args[0])
}
