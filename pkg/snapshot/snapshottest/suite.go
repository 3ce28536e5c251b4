package snapshottest

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/plumbhq/plumb/pkg/snapshot"
)

// File is one entry of a test workspace.
type File struct {
	Name     string
	Type     byte // tar type flag
	Mode     int64
	Data     []byte
	Linkname string
}

// Tar builds the engine-style archive of a workspace directory named root.
func Tar(t testing.TB, root string, files []File) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(tw.WriteHeader(&tar.Header{Name: root + "/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: time.Unix(1, 0)}))
	for _, f := range files {
		h := &tar.Header{Name: root + "/" + f.Name, Typeflag: f.Type, Mode: f.Mode, Linkname: f.Linkname, ModTime: time.Unix(1_700_000_000, 0), Uid: 1000, Gid: 1000}
		if f.Type == tar.TypeReg {
			h.Size = int64(len(f.Data))
		}
		if f.Type == tar.TypeDir {
			h.Name += "/"
		}
		if f.Type == tar.TypeLink {
			h.Linkname = root + "/" + f.Linkname
		}
		must(tw.WriteHeader(h))
		if f.Type == tar.TypeReg {
			_, err := tw.Write(f.Data)
			must(err)
		}
	}
	must(tw.Close())
	return b.Bytes()
}

// Random returns n random bytes (incompressible).
func Random(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}

// Workspace is the suite's sample: a directory, small and multi-chunk
// files, a setuid file, a symlink pointing outside, a hard link, a FIFO.
func Workspace() []File {
	return []File{
		{Name: "big.bin", Type: tar.TypeReg, Mode: 0o644, Data: Random(2*snapshot.ChunkSize + 12345)},
		{Name: "dir", Type: tar.TypeDir, Mode: 0o750},
		{Name: "dir/notes.txt", Type: tar.TypeReg, Mode: 0o600, Data: []byte("hello\n")},
		{Name: "dir/empty", Type: tar.TypeReg, Mode: 0o644},
		{Name: "dir/suid", Type: tar.TypeReg, Mode: 0o4755, Data: []byte("#!/bin/sh\n")},
		{Name: "escape", Type: tar.TypeSymlink, Linkname: "/etc/shadow"},
		{Name: "fifo", Type: tar.TypeFifo, Mode: 0o644},
		{Name: "hard", Type: tar.TypeLink, Linkname: "dir/notes.txt"},
	}
}

// Run runs the suite; newStore returns an empty store.
func Run(t *testing.T, newStore func(t *testing.T) snapshot.Store) {
	ctx := context.Background()
	repo := func(t *testing.T, quota int64) (*snapshot.Repo, snapshot.Store) {
		s := newStore(t)
		r, err := snapshot.NewRepo(s, quota)
		if err != nil {
			t.Fatal(err)
		}
		return r, s
	}
	capture := func(t *testing.T, r *snapshot.Repo, tenant string, files []File) *snapshot.Manifest {
		t.Helper()
		m, err := r.Capture(ctx, snapshot.Meta{Tenant: tenant, Sandbox: "sbx-w-1"}, bytes.NewReader(Tar(t, "workspace", files)), "workspace", 0)
		if err != nil {
			t.Fatalf("capture: %v", err)
		}
		return m
	}

	t.Run("objects", func(t *testing.T) {
		s := newStore(t)
		if _, err := s.GetChunk(ctx, "aa/bb"); !errors.Is(err, snapshot.ErrNotExist) {
			t.Fatalf("get missing chunk: %v, want ErrNotExist", err)
		}
		if ok, err := s.HasChunk(ctx, "aa/bb"); ok || err != nil {
			t.Fatalf("has missing chunk: %v %v", ok, err)
		}
		if err := s.PutChunk(ctx, "aa/bb", []byte("x")); err != nil {
			t.Fatal(err)
		}
		if b, err := s.GetChunk(ctx, "aa/bb"); err != nil || string(b) != "x" {
			t.Fatalf("get chunk: %q %v", b, err)
		}
		if ok, err := s.HasChunk(ctx, "aa/bb"); !ok || err != nil {
			t.Fatalf("has chunk: %v %v", ok, err)
		}
		if err := s.DeleteChunk(ctx, "aa/bb"); err != nil {
			t.Fatal(err)
		}
		if err := s.DeleteChunk(ctx, "aa/bb"); err != nil {
			t.Fatalf("delete a missing chunk: %v", err)
		}
		for _, k := range []string{"t1/m1", "t1/m2", "t2/m1"} {
			if err := s.PutManifest(ctx, k, []byte(k)); err != nil {
				t.Fatal(err)
			}
		}
		keys, err := s.ListManifests(ctx, "t1/")
		if err != nil || strings.Join(keys, ",") != "t1/m1,t1/m2" {
			t.Fatalf("list: %v %v", keys, err)
		}
		if err := s.DeleteManifest(ctx, "t1/m1"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.GetManifest(ctx, "t1/m1"); !errors.Is(err, snapshot.ErrNotExist) {
			t.Fatalf("get deleted manifest: %v", err)
		}
	})

	t.Run("round trip", func(t *testing.T) {
		r, _ := repo(t, 0)
		files := Workspace()
		m := capture(t, r, "acme", files)
		if m.Size != int64(2*snapshot.ChunkSize+12345+6+10) {
			t.Errorf("size %d", m.Size)
		}
		var out bytes.Buffer
		if _, err := r.Restore(ctx, "acme", m.ID, &out, 1000, 1000); err != nil {
			t.Fatalf("restore: %v", err)
		}
		got := readTar(t, out.Bytes())
		want := map[string]string{
			"big.bin":       "file 644 " + string(files[0].Data),
			"dir":           "dir 750",
			"dir/notes.txt": "file 600 hello\n",
			"dir/empty":     "file 644 ",
			"dir/suid":      "file 755 #!/bin/sh\n", // setuid dropped
			"escape":        "symlink /etc/shadow",
			"fifo":          "fifo 644",
			"hard":          "hardlink dir/notes.txt",
		}
		if len(got) != len(want) {
			t.Errorf("restored %d entries, want %d: %v", len(got), len(want), keys(got))
		}
		for k, v := range want {
			if got[k] != v {
				g := got[k]
				if len(g) > 60 {
					g = g[:60] + "…"
				}
				t.Errorf("%s: restored %q", k, g)
			}
		}
	})

	t.Run("dedup", func(t *testing.T) {
		r, _ := repo(t, 0)
		files := Workspace()
		first := capture(t, r, "acme", files)
		second := capture(t, r, "acme", files)
		if second.StoredBytes != 0 {
			t.Errorf("an unchanged second snapshot stored %d bytes (first %d)", second.StoredBytes, first.StoredBytes)
		}
		files[2].Data = []byte("changed\n")
		third := capture(t, r, "acme", files)
		if third.StoredBytes == 0 || third.StoredBytes > 1024 {
			t.Errorf("one small changed file stored %d bytes", third.StoredBytes)
		}
		used, err := r.Usage(ctx, "acme")
		if err != nil || used != first.StoredBytes+third.StoredBytes {
			t.Errorf("usage %d (%v), want %d", used, err, first.StoredBytes+third.StoredBytes)
		}
	})

	t.Run("delete collects chunks", func(t *testing.T) {
		r, s := repo(t, 0)
		files := Workspace()
		a := capture(t, r, "acme", files)
		files[0].Data = Random(100)
		b := capture(t, r, "acme", files)
		if err := r.Delete(ctx, "acme", a.ID); err != nil {
			t.Fatal(err)
		}
		// a's big.bin chunks are gone, the shared ones stay.
		if has(t, s, "acme", a.Entries[0].Chunks[0].Hash) {
			t.Error("a chunk only the deleted snapshot named is still stored")
		}
		for _, e := range b.Entries {
			for _, c := range e.Chunks {
				if !has(t, s, "acme", c.Hash) {
					t.Errorf("chunk of %s collected while another snapshot names it", e.Path)
				}
			}
		}
		if _, err := r.Restore(ctx, "acme", b.ID, io.Discard, 0, 0); err != nil {
			t.Fatalf("restore the remaining snapshot: %v", err)
		}
		if err := r.Delete(ctx, "acme", b.ID); err != nil {
			t.Fatal(err)
		}
		if used, _ := r.Usage(ctx, "acme"); used != 0 {
			t.Errorf("usage %d after every delete", used)
		}
		for _, e := range b.Entries {
			for _, c := range e.Chunks {
				if has(t, s, "acme", c.Hash) {
					t.Errorf("chunk of %s left after every delete", e.Path)
				}
			}
		}
		if err := r.Delete(ctx, "acme", b.ID); snapshot.CodeOf(err) != snapshot.CodeNotFound {
			t.Errorf("delete again: %v, want not found", err)
		}
	})

	t.Run("corruption is data loss", func(t *testing.T) {
		for _, tc := range []struct {
			name  string
			spoil func(t *testing.T, s snapshot.Store, m *snapshot.Manifest)
		}{
			{"flipped chunk byte", func(t *testing.T, s snapshot.Store, m *snapshot.Manifest) {
				k := snapshot.ChunkKey("acme", m.Entries[0].Chunks[1].Hash)
				b, _ := s.GetChunk(ctx, k)
				b[len(b)/2] ^= 0xff
				_ = s.PutChunk(ctx, k, b)
			}},
			{"truncated chunk", func(t *testing.T, s snapshot.Store, m *snapshot.Manifest) {
				k := snapshot.ChunkKey("acme", m.Entries[0].Chunks[0].Hash)
				b, _ := s.GetChunk(ctx, k)
				_ = s.PutChunk(ctx, k, b[:len(b)-10])
			}},
			{"missing chunk", func(t *testing.T, s snapshot.Store, m *snapshot.Manifest) {
				_ = s.DeleteChunk(ctx, snapshot.ChunkKey("acme", m.Entries[0].Chunks[2].Hash))
			}},
			{"truncated manifest", func(t *testing.T, s snapshot.Store, m *snapshot.Manifest) {
				k := snapshot.ManifestKey("acme", m.ID)
				b, _ := s.GetManifest(ctx, k)
				_ = s.PutManifest(ctx, k, b[:len(b)/2])
			}},
			{"edited manifest", func(t *testing.T, s snapshot.Store, m *snapshot.Manifest) {
				k := snapshot.ManifestKey("acme", m.ID)
				b, _ := s.GetManifest(ctx, k)
				_ = s.PutManifest(ctx, k, bytes.Replace(b, []byte("notes.txt"), []byte("../x/y.tx"), 1))
			}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				r, s := repo(t, 0)
				m := capture(t, r, "acme", Workspace())
				tc.spoil(t, s, m)
				_, err := r.Restore(ctx, "acme", m.ID, io.Discard, 0, 0)
				if snapshot.CodeOf(err) != snapshot.CodeDataLoss {
					t.Fatalf("restore: %v, want data loss", err)
				}
			})
		}
	})

	t.Run("tenancy", func(t *testing.T) {
		r, _ := repo(t, 0)
		m := capture(t, r, "acme", Workspace())
		if _, err := r.Get(ctx, "evil", m.ID); snapshot.CodeOf(err) != snapshot.CodeNotFound {
			t.Errorf("get as another tenant: %v", err)
		}
		if _, err := r.Restore(ctx, "evil", m.ID, io.Discard, 0, 0); snapshot.CodeOf(err) != snapshot.CodeNotFound {
			t.Errorf("restore as another tenant: %v", err)
		}
		if err := r.Delete(ctx, "evil", m.ID); snapshot.CodeOf(err) != snapshot.CodeNotFound {
			t.Errorf("delete as another tenant: %v", err)
		}
		if l, err := r.List(ctx, "evil"); err != nil || len(l) != 0 {
			t.Errorf("list as another tenant: %v %v", l, err)
		}
		if l, err := r.List(ctx, "acme"); err != nil || len(l) != 1 || l[0].ID != m.ID || l[0].Size != m.Size {
			t.Errorf("list: %+v %v", l, err)
		}
		if _, err := r.Get(ctx, "acme", "snap-../../x"); snapshot.CodeOf(err) != snapshot.CodeNotFound {
			t.Errorf("a malformed id: %v", err)
		}
	})

	// A memory image is no workspace: nothing that reads workspaces sees
	// it, only GetMemory, while its bytes count in the tenant's usage and
	// Delete collects them.
	t.Run("memory images", func(t *testing.T) {
		r, _ := repo(t, 0)
		ws := capture(t, r, "acme", Workspace()[:1])
		before, _ := r.Usage(ctx, "acme")
		img := []File{{Name: "checkpoint.img", Type: tar.TypeReg, Mode: 0o600, Data: Random(snapshot.ChunkSize + 3)}}
		m, err := r.Capture(ctx, snapshot.Meta{Tenant: "acme", Parent: ws.ID, Kind: snapshot.KindMemory}, bytes.NewReader(Tar(t, "image", img)), "image", 0)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := r.GetMemory(ctx, "acme", m.ID); err != nil || got.Kind != snapshot.KindMemory || got.Parent != ws.ID {
			t.Fatalf("GetMemory: %+v %v", got, err)
		}
		if _, err := r.GetMemory(ctx, "acme", ws.ID); snapshot.CodeOf(err) != snapshot.CodeNotFound {
			t.Errorf("GetMemory of a workspace: %v, want NOT_FOUND", err)
		}
		if _, err := r.GetMemory(ctx, "evil", m.ID); snapshot.CodeOf(err) != snapshot.CodeNotFound {
			t.Errorf("GetMemory as another tenant: %v, want NOT_FOUND", err)
		}
		if _, err := r.Get(ctx, "acme", m.ID); snapshot.CodeOf(err) != snapshot.CodeNotFound {
			t.Errorf("Get of a memory image: %v, want NOT_FOUND", err)
		}
		if _, err := r.Restore(ctx, "acme", m.ID, io.Discard, 0, 0); snapshot.CodeOf(err) != snapshot.CodeNotFound {
			t.Errorf("Restore of a memory image: %v, want NOT_FOUND", err)
		}
		if err := r.Verify(ctx, "acme", m.ID); err != nil {
			t.Errorf("Verify of a memory image: %v", err)
		}
		if l, err := r.List(ctx, "acme"); err != nil || len(l) != 1 || l[0].ID != ws.ID {
			t.Errorf("List: %+v %v, want the workspace only", l, err)
		}
		if after, _ := r.Usage(ctx, "acme"); after <= before {
			t.Errorf("usage %d with the memory image, %d without: it must count", after, before)
		}
		if err := r.Delete(ctx, "acme", m.ID); err != nil {
			t.Fatal(err)
		}
		if after, _ := r.Usage(ctx, "acme"); after != before {
			t.Errorf("usage %d after deleting the memory image, want %d", after, before)
		}
	})

	t.Run("quota", func(t *testing.T) {
		r, s := repo(t, 1<<20)
		files := Workspace()
		_, err := r.Capture(ctx, snapshot.Meta{Tenant: "acme"}, bytes.NewReader(Tar(t, "workspace", files)), "workspace", 0)
		var e *snapshot.Error
		if !errors.As(err, &e) || e.Code != snapshot.CodeQuota || e.Limit != snapshot.QuotaLimit || !strings.Contains(e.Message, snapshot.QuotaLimit) {
			t.Fatalf("over quota: %v", err)
		}
		for i := range 2 {
			if has(t, s, "acme", hashOf(files[0].Data[i*snapshot.ChunkSize:(i+1)*snapshot.ChunkSize])) {
				t.Errorf("chunk %d of the refused snapshot is left in the store", i)
			}
		}
		if l, _ := r.List(ctx, "acme"); len(l) != 0 {
			t.Errorf("a refused snapshot is listed: %v", l)
		}
		// Another tenant has a quota of its own.
		if _, err := r.Capture(ctx, snapshot.Meta{Tenant: "other"}, bytes.NewReader(Tar(t, "workspace", files[1:3])), "workspace", 0); err != nil {
			t.Errorf("another tenant: %v", err)
		}
	})

	t.Run("hostile archives", func(t *testing.T) {
		r, _ := repo(t, 0)
		for _, tc := range []struct {
			name  string
			files []File
		}{
			{"device", []File{{Name: "null", Type: tar.TypeChar, Mode: 0o666}}},
			{"dotdot", []File{{Name: "../etc/passwd", Type: tar.TypeReg, Data: []byte("x")}}},
			{"hard link outside", []File{{Name: "h", Type: tar.TypeLink, Linkname: "../../etc/shadow"}}},
			{"control character", []File{{Name: "a\nb", Type: tar.TypeReg}}},
			{"duplicate", []File{{Name: "a", Type: tar.TypeReg}, {Name: "a", Type: tar.TypeReg}}},
			{"under a symlink", []File{{Name: "l", Type: tar.TypeSymlink, Linkname: "/etc"}, {Name: "l/x", Type: tar.TypeReg}}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				_, err := r.Capture(ctx, snapshot.Meta{Tenant: "acme"}, bytes.NewReader(Tar(t, "workspace", tc.files)), "workspace", 0)
				if snapshot.CodeOf(err) != snapshot.CodeInvalid {
					t.Fatalf("capture: %v, want invalid", err)
				}
			})
		}
		_, err := r.Capture(ctx, snapshot.Meta{Tenant: "acme"}, bytes.NewReader(Tar(t, "workspace", Workspace())), "workspace", 1<<20)
		if snapshot.CodeOf(err) != snapshot.CodeInvalid {
			t.Fatalf("over the size bound: %v, want invalid", err)
		}
	})
}

func has(t *testing.T, s snapshot.Store, tenant, hash string) bool {
	t.Helper()
	ok, err := s.HasChunk(context.Background(), snapshot.ChunkKey(tenant, hash))
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// readTar maps each entry to "type mode content" ("symlink target",
// "hardlink target").
func readTar(t *testing.T, b []byte) map[string]string {
	t.Helper()
	out := map[string]string{}
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Uid != 1000 || h.Gid != 1000 {
			t.Errorf("%s owned by %d:%d", h.Name, h.Uid, h.Gid)
		}
		name := strings.TrimSuffix(h.Name, "/")
		mode := strings.TrimLeft(strings.TrimPrefix(modeString(h.Mode), "0"), "")
		switch h.Typeflag {
		case tar.TypeDir:
			out[name] = "dir " + mode
		case tar.TypeReg:
			data, _ := io.ReadAll(tr)
			out[name] = "file " + mode + " " + string(data)
		case tar.TypeSymlink:
			out[name] = "symlink " + h.Linkname
		case tar.TypeLink:
			out[name] = "hardlink " + h.Linkname
		case tar.TypeFifo:
			out[name] = "fifo " + mode
		default:
			out[name] = "other"
		}
	}
}

func modeString(m int64) string {
	const digits = "01234567"
	return string([]byte{digits[m>>6&7], digits[m>>3&7], digits[m&7]})
}

func keys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func hashOf(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
