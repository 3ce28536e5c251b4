package sandbox

import (
	"archive/tar"
	"bytes"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// A checkpoint directory goes through tarDir and untar unchanged:
// directories and files, their bytes.
func TestMemoryImageTarRoundTrip(t *testing.T) {
	src := t.TempDir()
	files := map[string]string{"checkpoint.img": "state", "pages.img": string(bytes.Repeat([]byte{7}, 70000)), "sub/pages_meta.img": "meta"}
	for name, data := range files {
		if err := os.MkdirAll(filepath.Join(src, filepath.Dir(name)), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(src, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var b bytes.Buffer
	if err := tarDir(&b, src, "image"); err != nil {
		t.Fatal(err)
	}
	// Repo.Capture strips the root; untar gets names relative to it.
	var rel bytes.Buffer
	tr, tw := tar.NewReader(&b), tar.NewWriter(&rel)
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		if h.Name == "image/" {
			continue
		}
		h.Name = h.Name[len("image/"):]
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(tw, tr); err != nil {
			t.Fatal(err)
		}
	}
	tw.Close()
	dst := t.TempDir()
	if err := untar(&rel, dst, 0, 0, false); err != nil {
		t.Fatal(err)
	}
	for name, data := range files {
		got, err := os.ReadFile(filepath.Join(dst, name))
		if err != nil || string(got) != data {
			t.Errorf("%s: %d bytes, %v", name, len(got), err)
		}
	}
}

// untar writes nothing outside its directory, whatever the tar holds; for
// a memory image (links false) only directories and regular files.
func FuzzUntar(f *testing.F) {
	for _, hs := range [][]tar.Header{
		{{Name: "a", Typeflag: tar.TypeReg, Size: 1}},
		{{Name: "../escape", Typeflag: tar.TypeReg, Size: 1}},
		{{Name: "d/", Typeflag: tar.TypeDir}, {Name: "d/../../x", Typeflag: tar.TypeReg, Size: 1}},
		{{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "/"}, {Name: "l/x", Typeflag: tar.TypeReg, Size: 1}},
		{{Name: "/abs", Typeflag: tar.TypeReg, Size: 1}},
	} {
		var b bytes.Buffer
		tw := tar.NewWriter(&b)
		for _, h := range hs {
			_ = tw.WriteHeader(&h)
			if h.Size > 0 {
				_, _ = tw.Write([]byte("x"))
			}
		}
		tw.Close()
		f.Add(b.Bytes(), false)
		f.Add(b.Bytes(), true)
	}
	f.Fuzz(func(t *testing.T, data []byte, links bool) {
		parent := t.TempDir()
		dir := filepath.Join(parent, "image")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		_ = untar(bytes.NewReader(data), dir, os.Getuid(), os.Getgid(), links)
		_ = filepath.WalkDir(parent, func(p string, d fs.DirEntry, err error) error {
			if err != nil || p == parent || p == dir {
				return nil
			}
			if rel, _ := filepath.Rel(dir, p); !filepath.IsLocal(rel) {
				t.Fatalf("%s written outside %s", p, dir)
			}
			if !links && !d.IsDir() && !d.Type().IsRegular() {
				t.Fatalf("%s is %v, neither a directory nor a file", p, d.Type())
			}
			return nil
		})
	})
}
