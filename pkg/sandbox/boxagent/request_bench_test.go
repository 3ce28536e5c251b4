package boxagent

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/backend/fileops"
	"github.com/plumbhq/plumb/pkg/sandbox/agentproto"
)

// BenchmarkRequest measures the agent's side of one small request (B1's
// write, edit and read of a 4 KiB file, ls and glob of 20 entries, B2's execute of true) over real
// OS pipes, as in a container, with the host's frame writer and reader:
//
//	go test -run '^$' -bench Request -cpuprofile cpu.out ./pkg/sandbox/boxagent/
func BenchmarkRequest(b *testing.B) {
	root := b.TempDir()
	if err := os.MkdirAll(root+"/workspace/b1/src", 0o755); err != nil {
		b.Fatal(err)
	}
	e, err := fileops.New(root, fileops.WithSync(false))
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	inR, inW, err := os.Pipe()
	if err != nil {
		b.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		done <- Serve(context.Background(), inR, outW, Config{Files: e, Root: root, Workspace: root + "/workspace"})
		outW.Close()
	}()
	w := agentproto.NewWriter(inW)
	fr := agentproto.NewReader(outR, 0)
	var id uint64
	call := func(b *testing.B, op agentproto.Op, args any, payload []byte) {
		id++
		raw, err := json.Marshal(args)
		if err != nil {
			b.Fatal(err)
		}
		if err := w.Write(agentproto.Request{ID: id, Op: op, Args: raw, Payload: payload}); err != nil {
			b.Fatal(err)
		}
		f, err := fr.Next()
		if err != nil {
			b.Fatal(err)
		}
		r, err := agentproto.DecodeResponse(f)
		if err != nil {
			b.Fatal(err)
		}
		if !r.Done || r.Error != nil || r.ID != id {
			b.Fatalf("%s: %+v", op, r)
		}
	}
	var buf strings.Builder
	for i := range 64 {
		fmt.Fprintf(&buf, "line %04d %s\n", i+1, strings.Repeat("x", 53))
	}
	content := []byte(buf.String())
	const path = "/workspace/b1/file.txt"
	b.Run("write", func(b *testing.B) {
		for b.Loop() {
			call(b, agentproto.OpWrite, agentproto.WriteArgs{Path: path}, content)
		}
	})
	b.Run("edit", func(b *testing.B) {
		// From the written content on every run of this function (it
		// runs again under -count and -cpu; the loop's toggling may
		// have left the other text).
		call(b, agentproto.OpWrite, agentproto.WriteArgs{Path: path}, content)
		old, nu := "line 0032 x", "line 0032 y"
		for b.Loop() {
			call(b, agentproto.OpEdit, backend.EditRequest{Path: path, Old: old, New: nu}, nil)
			old, nu = nu, old
		}
	})
	b.Run("read", func(b *testing.B) {
		for b.Loop() {
			call(b, agentproto.OpRead, backend.ReadRequest{Path: path}, nil)
		}
	})
	// ls and glob over B1's directory of 10 .go and 10 .txt files.
	for i := range 10 {
		for _, name := range []string{fmt.Sprintf("file%02d.go", i), fmt.Sprintf("note%02d.txt", i)} {
			if err := os.WriteFile(root+"/workspace/b1/src/"+name, []byte("x\n"), 0o644); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("ls", func(b *testing.B) {
		for b.Loop() {
			call(b, agentproto.OpLs, agentproto.PathArgs{Path: "/workspace/b1/src"}, nil)
		}
	})
	b.Run("glob", func(b *testing.B) {
		for b.Loop() {
			call(b, agentproto.OpGlob, backend.GlobRequest{Pattern: "*.go", Path: "/workspace/b1/src"}, nil)
		}
	})
	b.Run("execute-true", func(b *testing.B) {
		for b.Loop() {
			call(b, agentproto.OpExecute, agentproto.ExecuteArgs{ExecuteRequest: backend.ExecuteRequest{Command: "true"}}, nil)
		}
	})
	inW.Close()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	inR.Close()
	outR.Close()
}
