package boxagent

import (
	"context"
	"encoding/json"
	"io"
	"testing"

	"github.com/plumbhq/plumb/pkg/backend/fileops"
	"github.com/plumbhq/plumb/pkg/sandbox/agentproto"
)

// BenchmarkTransfer measures the agent's side of the pipelined transfers
// alone (no container, no Docker): 1 MiB chunks with agentproto.Window in
// flight, framed exactly as sandboxd sends them (binary payloads). Its CPU
// profile is the agent's cost per byte (docs/benchmarks.md, B7):
//
//	go test -run '^$' -bench Transfer -cpuprofile cpu.out ./pkg/sandbox/boxagent/
func BenchmarkTransfer(b *testing.B) {
	root := b.TempDir()
	eng, err := fileops.New(root, fileops.WithSync(false))
	if err != nil {
		b.Fatal(err)
	}
	defer eng.Close()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- Serve(context.Background(), inR, outW, Config{Files: eng, Root: root})
		outW.Close()
	}()
	w := agentproto.NewWriter(inW)
	fr := agentproto.NewReader(outR, 0)
	var id uint64
	send := func(op agentproto.Op, args any) {
		var payload []byte
		if p, ok := args.(withPayload); ok {
			args, payload = p.args, p.data
		}
		raw, _ := json.Marshal(args)
		id++
		if err := w.Write(agentproto.Request{ID: id, Op: op, Args: raw, Payload: payload}); err != nil {
			b.Fatal(err)
		}
	}
	recv := func(out any) {
		f, err := fr.Next()
		if err != nil {
			b.Fatal(err)
		}
		r, err := agentproto.DecodeResponse(f)
		if err != nil || r.Error != nil {
			b.Fatalf("%v %v", err, r.Error)
		}
		if r.Bin > 0 {
			if _, err := fr.ReadPayload(r.Bin); err != nil {
				b.Fatal(err)
			}
		}
		if out != nil {
			if err := json.Unmarshal(r.Result, out); err != nil {
				b.Fatal(err)
			}
		}
	}
	const chunks = 32
	data := make([]byte, agentproto.ChunkBytes)
	for i := range data {
		data[i] = byte(i * 7)
	}
	b.Run("upload", func(b *testing.B) {
		b.SetBytes(chunks * agentproto.ChunkBytes)
		for b.Loop() {
			var h agentproto.UploadHandle
			send(agentproto.OpUploadOpen, agentproto.PathArgs{Path: "/f"})
			recv(&h)
			for i := range chunks {
				if i >= agentproto.Window {
					recv(nil)
				}
				send(agentproto.OpUploadChunk, withPayload{agentproto.UploadChunkArgs{Handle: h.Handle, Offset: int64(i) * agentproto.ChunkBytes}, data})
			}
			for range agentproto.Window {
				recv(nil)
			}
			send(agentproto.OpUploadClose, agentproto.UploadCloseArgs{Handle: h.Handle, Commit: true, Size: chunks * agentproto.ChunkBytes})
			recv(nil)
		}
	})
	b.Run("download", func(b *testing.B) {
		b.SetBytes(chunks * agentproto.ChunkBytes)
		for b.Loop() {
			var h agentproto.DownloadHandle
			send(agentproto.OpDownloadOpen, agentproto.PathArgs{Path: "/f"})
			recv(&h)
			for i := range chunks {
				if i >= agentproto.Window {
					recv(nil)
				}
				send(agentproto.OpDownloadRead, agentproto.DownloadReadArgs{Handle: h.Handle, Offset: int64(i) * agentproto.ChunkBytes, Length: agentproto.ChunkBytes})
			}
			for range agentproto.Window {
				recv(nil)
			}
			send(agentproto.OpDownloadClose, agentproto.DownloadCloseArgs{Handle: h.Handle})
			recv(nil)
		}
	})
	inW.Close()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
}
