package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/pkg/skills"
)

// skills runs `agentctl skills put DIR|list|get NAME [--out DIR]|delete
// NAME`. put reads and validates the folder locally (the same rules as
// agentd's, so a bad skill is refused before it is sent) and uploads its
// files under the folder's name.
func (a *agentCmd) skills(ctx context.Context, args []string) error {
	fs := newFlags("skills")
	jsonOut := fs.Bool("json", false, "print protojson")
	out := fs.String("out", "", "get: write the skill's files into this directory (created; existing files are not replaced)")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return errors.New("skills: want put DIR, list, get NAME, or delete NAME")
	}
	uctx, cancel := a.unary(ctx)
	defer cancel()
	switch verb := pos[0]; {
	case verb == "list" && len(pos) == 1:
		resp, err := a.c.ListSkills(uctx, &plumbv1.ListSkillsRequest{})
		if err != nil {
			return rpcError(err)
		}
		if *jsonOut {
			return printJSON(a.sio.out, resp)
		}
		tw := tabwriter.NewWriter(a.sio.out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tFILES\tBYTES\tUPDATED\tDESCRIPTION")
		for _, s := range resp.GetSkills() {
			desc := s.GetDescription()
			if len(desc) > 60 {
				desc = desc[:57] + "..."
			}
			fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\n", s.GetName(), s.GetFileCount(), s.GetSizeBytes(), s.GetUpdateTime().AsTime().Format(time.RFC3339), desc)
		}
		return tw.Flush()
	case verb == "put" && len(pos) == 2:
		sk, err := skills.LoadDir(pos[1])
		if err != nil {
			return fmt.Errorf("skills put: %w", err)
		}
		resp, err := a.c.PutSkill(uctx, &plumbv1.PutSkillRequest{Name: sk.Name, Files: sk.Files})
		if err != nil {
			return rpcError(err)
		}
		if *jsonOut {
			return printJSON(a.sio.out, resp)
		}
		what := "updated"
		if resp.GetCreated() {
			what = "created"
		}
		fmt.Fprintf(a.sio.out, "skill %s %s (%d files, %d bytes)\n", resp.GetSkill().GetName(), what, resp.GetSkill().GetFileCount(), resp.GetSkill().GetSizeBytes())
		return nil
	case verb == "get" && len(pos) == 2:
		resp, err := a.c.GetSkill(uctx, &plumbv1.GetSkillRequest{Name: pos[1]})
		if err != nil {
			return rpcError(err)
		}
		if *out != "" {
			return writeSkill(*out, resp.GetFiles())
		}
		if *jsonOut {
			return printJSON(a.sio.out, resp)
		}
		s := resp.GetSkill()
		fmt.Fprintf(a.sio.out, "name: %s\ndescription: %s\nsha256: %s\nfiles:\n", s.GetName(), s.GetDescription(), s.GetSha256())
		paths := make([]string, 0, len(resp.GetFiles()))
		for p := range resp.GetFiles() {
			paths = append(paths, p)
		}
		sort.Strings(paths)
		for _, p := range paths {
			fmt.Fprintf(a.sio.out, "  %s (%d bytes)\n", p, len(resp.GetFiles()[p]))
		}
		return nil
	case verb == "delete" && len(pos) == 2:
		if _, err := a.c.DeleteSkill(uctx, &plumbv1.DeleteSkillRequest{Name: pos[1]}); err != nil {
			return rpcError(err)
		}
		fmt.Fprintf(a.sio.out, "skill %s deleted\n", pos[1])
		return nil
	}
	return fmt.Errorf("skills: unexpected %q (want put DIR, list, get NAME, or delete NAME)", strings.Join(pos, " "))
}

// writeSkill writes files under dir, refusing paths that leave it and
// files that exist.
func writeSkill(dir string, files map[string][]byte) error {
	for p, c := range files {
		if err := skills.ValidPath(p); err != nil {
			return fmt.Errorf("skills get: %s: %w", p, err)
		}
		dst := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return fmt.Errorf("skills get: %w", err)
		}
		f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			return fmt.Errorf("skills get: %w", err)
		}
		_, err = f.Write(c)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("skills get: %w", err)
		}
	}
	return nil
}
