package agentproto

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// TestWriteBuffers: a frame with a payload arrives whole and in order over
// every kind of writer the channel uses (a pipe, as the agent's stdout; a
// Unix socket, as the worker's attach; a writer without a descriptor),
// also when the payload is larger than the pipe or socket buffer, so that
// writev returns short and waits for the reader.
func TestWriteBuffers(t *testing.T) {
	header := []byte(`{"id":1,"bin":N}` + "\n")
	for _, size := range []int{1, 4 << 10, ChunkBytes} {
		payload := bytes.Repeat([]byte{0, 1, 2, '\n', 0xff}, size/5+1)[:size]
		want := append(append([]byte{}, header...), payload...)
		kinds := map[string]func(t *testing.T) (io.Writer, io.Reader, func()){
			"pipe": func(t *testing.T) (io.Writer, io.Reader, func()) {
				r, w, err := os.Pipe()
				if err != nil {
					t.Fatal(err)
				}
				return w, r, func() { w.Close(); r.Close() }
			},
			"unix socket": func(t *testing.T) (io.Writer, io.Reader, func()) {
				ln, err := net.Listen("unix", t.TempDir()+"/s")
				if err != nil {
					t.Fatal(err)
				}
				defer ln.Close()
				accepted := make(chan net.Conn, 1)
				go func() {
					c, _ := ln.Accept()
					accepted <- c
				}()
				c, err := net.Dial("unix", ln.Addr().String())
				if err != nil {
					t.Fatal(err)
				}
				s := <-accepted
				if s == nil {
					t.Fatal("accept failed")
				}
				return c, s, func() { c.Close(); s.Close() }
			},
			"no descriptor": func(t *testing.T) (io.Writer, io.Reader, func()) {
				r, w := io.Pipe()
				return w, r, func() { w.Close(); r.Close() }
			},
		}
		for name, open := range kinds {
			t.Run(name, func(t *testing.T) {
				w, r, closeAll := open(t)
				defer closeAll()
				got := make(chan []byte, 1)
				go func() {
					b := make([]byte, len(want))
					n, _ := io.ReadFull(r, b)
					got <- b[:n]
				}()
				if err := writeBuffers(w, [][]byte{header, nil, payload}); err != nil {
					t.Fatal(err)
				}
				if b := <-got; !bytes.Equal(b, want) {
					t.Fatalf("read %d bytes, want the %d written in order", len(b), len(want))
				}
			})
		}
	}
}

// TestWriteBuffersDeadline: a writev into a full pipe nobody reads ends at
// the writer's deadline, as net.Buffers' does.
func TestWriteBuffersDeadline(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if err := w.SetWriteDeadline(time.Now().Add(50 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 4<<20) // more than any pipe buffer
	if err := writeBuffers(w, [][]byte{[]byte("header\n"), big}); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("writev into a full pipe: %v, want the deadline", err)
	}
}

func TestConsume(t *testing.T) {
	for _, tt := range []struct {
		name string
		n    int
		want []string
	}{
		{"none", 0, []string{"ab", "cde"}},
		{"inside the first", 1, []string{"b", "cde"}},
		{"the first exactly", 2, []string{"cde"}},
		{"into the second", 3, []string{"de"}},
		{"all", 5, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := consume([][]byte{[]byte("ab"), []byte("cde")}, tt.n)
			if len(got) != len(tt.want) {
				t.Fatalf("consume(%d) = %q, want %q", tt.n, got, tt.want)
			}
			for i := range got {
				if string(got[i]) != tt.want[i] {
					t.Fatalf("consume(%d) = %q, want %q", tt.n, got, tt.want)
				}
			}
		})
	}
}
