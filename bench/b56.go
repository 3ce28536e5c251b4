package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/plumbhq/plumb/pkg/backend"
)

// treeRoot is B5/B6's generated tree inside the sandbox.
const treeRoot = "/workspace/tree"

// needle is the literal B5 searches for; it is planted in every 100th
// file.
const needle = "zq_needle_literal"

// treeFiles generates files text files of about 10 KiB (lines of words),
// half of them .go, spread over dirs directories two levels deep.
func treeFiles(files int) []backend.UploadItem {
	words := strings.Fields("func return package import struct interface map slice channel error context value type const var range select defer go the of and to in is for on with that by")
	r := rand.New(rand.NewPCG(1, 2))
	items := make([]backend.UploadItem, 0, files)
	for i := range files {
		var b strings.Builder
		for line := 0; b.Len() < 10<<10; line++ {
			if i%100 == 0 && line == 60 {
				b.WriteString("\t// " + needle + " planted here\n")
				continue
			}
			w := 0
			for w < 72 {
				s := words[r.IntN(len(words))]
				b.WriteString(s + " ")
				w += len(s) + 1
			}
			b.WriteString("\n")
		}
		ext := ".txt"
		if i%2 == 0 {
			ext = ".go"
		}
		items = append(items, backend.UploadItem{
			Path:    fmt.Sprintf("%s/d%02d/s%d/f%04d%s", treeRoot, i%20, (i/20)%5, i, ext),
			Content: []byte(b.String()),
		})
	}
	return items
}

// runB5B6 generates a tree in a sandbox, then times grep of a literal
// (Grep RPC vs `grep -rF` through Execute) and glob **/*.go (Glob RPC vs
// `find -name` through Execute) on it, checking that both sides find the
// same files.
func runB5B6(ctx context.Context, e *env) ([]Row, error) {
	bx, err := e.newBox(ctx)
	if err != nil {
		return nil, err
	}
	defer e.dropBox(bx)
	files := e.scale(10000, 500)
	items := treeFiles(files)
	var total int64
	for start := 0; start < len(items); start += 250 {
		batch := items[start:min(start+250, len(items))]
		res, err := bx.b.Upload(ctx, batch)
		if err != nil {
			return nil, fmt.Errorf("generate tree: %w", err)
		}
		for i, r := range res {
			if r.Err != nil {
				return nil, fmt.Errorf("generate tree: %s: %v", r.Path, r.Err)
			}
			total += int64(len(batch[i].Content))
		}
	}
	scale := fmt.Sprintf("%d files / %.0f MB", files, float64(total)/1e6)
	wantHits, wantGo := (files+99)/100, (files+1)/2

	// The baselines' whole output comes back inline, as Grep's and
	// Glob's results do.
	execLines := func(ctx context.Context, cmd string) (int, error) {
		r, err := bx.b.Execute(ctx, backend.ExecuteRequest{Command: cmd, MaxOutputBytes: 1 << 20})
		if err != nil {
			return 0, err
		}
		if r.ExitCode == nil || *r.ExitCode != 0 || r.Truncated {
			code := -1
			if r.ExitCode != nil {
				code = *r.ExitCode
			}
			return 0, fmt.Errorf("%q: exit %d, truncated %v: %.200s", cmd, code, r.Truncated, r.Output)
		}
		return strings.Count(r.Output, "\n"), nil
	}
	count := func(what string, got, want int) error {
		if got != want {
			return fmt.Errorf("%s found %d, want %d", what, got, want)
		}
		return nil
	}

	grepOurs := &probe{name: "Grep", warm: 2, n: e.scale(10, 5), f: func(ctx context.Context) error {
		r, err := bx.b.Grep(ctx, backend.GrepRequest{Pattern: needle, Path: treeRoot, MaxCount: backend.GrepMaxMax})
		if err != nil {
			return err
		}
		if r.Truncated || r.FilesSearched != files {
			return fmt.Errorf("grep searched %d files, truncated %v (%s)", r.FilesSearched, r.Truncated, r.TruncationReason)
		}
		return count("Grep", len(r.Matches), wantHits)
	}}
	grepBase := &probe{name: "grep -rF", warm: 2, n: e.scale(10, 5), f: func(ctx context.Context) error {
		n, err := execLines(ctx, "grep -rF "+needle+" "+treeRoot)
		if err == nil {
			err = count("grep -rF", n, wantHits)
		}
		return err
	}}
	if err := interleave(ctx, grepOurs.n, grepOurs, grepBase); err != nil {
		return nil, err
	}
	// max_count must stop the search early and say so.
	capped, err := bx.b.Grep(ctx, backend.GrepRequest{Pattern: "func", Path: treeRoot, MaxCount: 5})
	if err != nil {
		return nil, err
	}
	if len(capped.Matches) != 5 || !capped.Truncated || capped.TruncationReason != backend.TruncatedMaxCount {
		return nil, fmt.Errorf("grep max_count 5: %d matches, truncated %v (%s)", len(capped.Matches), capped.Truncated, capped.TruncationReason)
	}
	g := latencyRow("B5", "grep literal, "+scale, unitMs, grepOurs.got)
	ratio := g.vsLatency("grep -rF via Execute", latencyRow("", "", unitMs, grepBase.got))
	g.Target = "≥ 1.0× (max_count and timeout honored)"
	g.judge(ratio >= 1)
	g.note("%d matches in %d files searched, both sides; max_count=5 checked (5 matches, truncated: max_count); the %v time budget is not exercised at this scale; "+
		"the baseline includes starting sh and busybox grep through Execute", wantHits, files, backend.GrepBudget)

	globOurs := &probe{name: "Glob", warm: 2, n: e.scale(10, 5), f: func(ctx context.Context) error {
		r, err := bx.b.Glob(ctx, backend.GlobRequest{Pattern: "**/*.go", Path: treeRoot})
		if err != nil {
			return err
		}
		if r.Truncated {
			return fmt.Errorf("glob truncated (%s)", r.TruncationReason)
		}
		return count("Glob", len(r.Matches), wantGo)
	}}
	globBase := &probe{name: "find -name", warm: 2, n: e.scale(10, 5), f: func(ctx context.Context) error {
		n, err := execLines(ctx, "find "+treeRoot+" -type f -name '*.go'")
		if err == nil {
			err = count("find", n, wantGo)
		}
		return err
	}}
	if err := interleave(ctx, globOurs.n, globOurs, globBase); err != nil {
		return []Row{g}, err
	}
	gl := latencyRow("B6", "glob **/*.go, "+scale, unitMs, globOurs.got)
	ratio = gl.vsLatency("find -name via Execute", latencyRow("", "", unitMs, globBase.got))
	gl.Target = "≥ 1.0×"
	gl.judge(ratio >= 1)
	gl.note("%d matches both sides; Glob returns sorted entries with size and mtime, find prints paths", wantGo)
	return []Row{g, gl}, nil
}
