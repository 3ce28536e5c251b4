package boxagent

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"testing"

	"github.com/plumbhq/plumb/pkg/sandbox/agentproto"
)

// BenchmarkExecuteStream measures the agent's side of a streaming execute
// (B10) alone: `head -c` of zeros through the command's output pipe, the
// agent, and its channel, here real OS pipes as in a container (so pipe
// sizes count), read and decoded by the host's frame reader:
//
//	go test -run '^$' -bench ExecuteStream -cpuprofile cpu.out ./pkg/sandbox/boxagent/
func BenchmarkExecuteStream(b *testing.B) {
	const size = 64 << 20
	root := b.TempDir()
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
		done <- Serve(context.Background(), inR, outW, Config{Root: root, Workspace: root})
		outW.Close()
	}()
	w := agentproto.NewWriter(inW)
	fr := agentproto.NewReader(outR, 0)
	args, _ := json.Marshal(agentproto.ExecuteArgs{Stream: true})
	var id uint64
	b.SetBytes(size)
	for b.Loop() {
		id++
		var a agentproto.ExecuteArgs
		_ = json.Unmarshal(args, &a)
		a.Command = fmt.Sprintf("head -c %d /dev/zero", size)
		raw, _ := json.Marshal(a)
		if err := w.Write(agentproto.Request{ID: id, Op: agentproto.OpExecute, Args: raw}); err != nil {
			b.Fatal(err)
		}
		got := 0
		for {
			f, err := fr.Next()
			if err != nil {
				b.Fatal(err)
			}
			r, err := agentproto.DecodeResponse(f)
			if err != nil {
				b.Fatal(err)
			}
			if r.Bin > 0 {
				p, err := fr.ReadPayload(r.Bin)
				if err != nil {
					b.Fatal(err)
				}
				got += len(p)
			}
			if r.Done {
				if r.Error != nil {
					b.Fatal(r.Error)
				}
				break
			}
		}
		if got != size {
			b.Fatalf("streamed %d bytes, want %d", got, size)
		}
	}
	inW.Close()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	inR.Close()
	outR.Close()
}
