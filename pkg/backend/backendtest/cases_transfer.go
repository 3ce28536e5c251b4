package backendtest

import (
	"bytes"

	"github.com/plumbhq/plumb/pkg/backend"
)

// transferCases are docs/file-tools.md §7 rows 71–73: upload and download (§4.9).
func transferCases() []testCase {
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	return []testCase{
		{name: "B71_upload_per_item_errors", run: func(e *env) {
			e.seed(map[string]string{"/d/x.txt": "x"})
			items := []backend.UploadItem{
				{Path: e.p("/a.bin"), Content: all},
				{Path: "/../x", Content: []byte("x")},
				{Path: e.p("/d"), Content: []byte("d")},
			}
			res, err := e.b.Upload(e.ctx, items)
			if err != nil || len(res) != 3 {
				e.t.Fatalf("upload: %d results, %v", len(res), err)
			}
			for i, it := range items {
				if res[i].Path != it.Path {
					e.t.Errorf("upload result %d path %q, want %q (input order, path as given)", i, res[i].Path, it.Path)
				}
			}
			if res[0].Err != nil || res[0].BytesWritten != 256 {
				e.t.Errorf("upload /a.bin = %+v, want 256 bytes written", res[0])
			}
			e.wantItemCode("upload /../x", res[1].Err, backend.CodeInvalidPath)
			e.wantItemCode("upload /d", res[2].Err, backend.CodeIsDirectory)
			if got := e.download("/a.bin"); !bytes.Equal(got, all) {
				e.t.Errorf("/a.bin does not round-trip: %d bytes", len(got))
			}
		}},
		{name: "B72_download_per_item_errors", run: func(e *env) {
			e.seedBytes(map[string][]byte{"/a.bin": all, "/d/x.txt": []byte("x")})
			paths := []string{e.p("/missing"), e.p("/a.bin"), e.p("/d")}
			res, err := e.b.Download(e.ctx, paths)
			if err != nil || len(res) != 3 {
				e.t.Fatalf("download: %d results, %v", len(res), err)
			}
			for i, p := range paths {
				if res[i].Path != p {
					e.t.Errorf("download result %d path %q, want %q", i, res[i].Path, p)
				}
			}
			e.wantItemCode("download /missing", res[0].Err, backend.CodeFileNotFound)
			if res[1].Err != nil || !bytes.Equal(res[1].Content, all) || res[1].Size != 256 {
				e.t.Errorf("download /a.bin: err %v, %d bytes, size %d; want the 256 bytes", res[1].Err, len(res[1].Content), res[1].Size)
			}
			e.wantItemCode("download /d", res[2].Err, backend.CodeIsDirectory)
		}},
		{name: "B73_upload_invalid_utf8", run: func(e *env) {
			e.seedBytes(map[string][]byte{"/x.dat": []byte("\xff\xfe")})
			if got := e.download("/x.dat"); !bytes.Equal(got, []byte("\xff\xfe")) {
				e.t.Errorf("download /x.dat = %q, want \\xff\\xfe", got)
			}
			_, err := e.read("/x.dat", 0, 10)
			e.wantCode("read /x.dat", err, backend.CodeNotText)
		}},
	}
}
