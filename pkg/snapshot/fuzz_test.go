package snapshot

import (
	"archive/tar"
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// FuzzParseManifest: whatever the store returns, a manifest that parses
// has only clean relative paths, parents that are directories, and round
// trips.
func FuzzParseManifest(f *testing.F) {
	good := &Manifest{Version: 1, ID: "snap-0123456789abcdef01234567", Tenant: "t", Created: time.Unix(1, 0).UTC(), Size: 3, Entries: []Entry{
		{Path: "d", Type: TypeDir, Mode: 0o755},
		{Path: "d/f", Type: TypeFile, Mode: 0o644, Size: 3, Chunks: []Chunk{{Hash: strings.Repeat("ab", 32), Size: 3, Stored: 12}}},
		{Path: "d/h", Type: TypeHardlink, Link: "d/f"},
		{Path: "l", Type: TypeSymlink, Link: "../../etc"},
	}}
	b, err := good.Marshal()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add([]byte(manifestMagic + "00\n{}"))
	f.Add(b[:len(b)/2])
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := ParseManifest(data)
		if err != nil {
			if CodeOf(err) != CodeDataLoss {
				t.Fatalf("a bad manifest is %v, not data loss", err)
			}
			return
		}
		for _, e := range m.Entries {
			if checkPath(e.Path) != nil || strings.HasPrefix(e.Path, "/") || strings.Contains("/"+e.Path+"/", "/../") {
				t.Fatalf("parsed an unsafe path %q", e.Path)
			}
		}
		again, err := m.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ParseManifest(again); err != nil {
			t.Fatalf("a parsed manifest does not parse again: %v", err)
		}
	})
}

// FuzzCapture: a hostile workspace archive never panics, and what it
// captures is a valid manifest that restores to a tar whose names are the
// manifest's clean paths.
func FuzzCapture(f *testing.F) {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	_ = tw.WriteHeader(&tar.Header{Name: "workspace/", Typeflag: tar.TypeDir, Mode: 0o755})
	_ = tw.WriteHeader(&tar.Header{Name: "workspace/a", Typeflag: tar.TypeReg, Mode: 0o4755, Size: 2})
	_, _ = tw.Write([]byte("hi"))
	_ = tw.WriteHeader(&tar.Header{Name: "workspace/l", Typeflag: tar.TypeSymlink, Linkname: "/etc/passwd"})
	_ = tw.WriteHeader(&tar.Header{Name: "workspace/h", Typeflag: tar.TypeLink, Linkname: "workspace/a"})
	_ = tw.WriteHeader(&tar.Header{Name: "workspace/../x", Typeflag: tar.TypeReg})
	_ = tw.Close()
	f.Add(b.Bytes())
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		store, err := NewDir(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		r, err := NewRepo(store, 0)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		m, err := r.Capture(ctx, Meta{Tenant: "t"}, bytes.NewReader(data), "workspace", 1<<20)
		if err != nil {
			return
		}
		var out bytes.Buffer
		if _, err := r.Restore(ctx, "t", m.ID, &out, 1000, 1000); err != nil {
			t.Fatalf("restore of a fresh capture: %v", err)
		}
		tr := tar.NewReader(&out)
		for {
			h, err := tr.Next()
			if err != nil {
				break
			}
			name := strings.TrimSuffix(h.Name, "/")
			if checkPath(name) != nil || h.Mode&^0o777 != 0 || h.Uid != 1000 || h.Typeflag == tar.TypeChar || h.Typeflag == tar.TypeBlock {
				t.Fatalf("restore wrote %q mode %o uid %d type %c", h.Name, h.Mode, h.Uid, h.Typeflag)
			}
		}
	})
}
