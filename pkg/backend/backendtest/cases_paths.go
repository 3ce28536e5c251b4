package backendtest

import (
	"fmt"
	"strings"

	"github.com/plumbhq/plumb/pkg/backend"
)

// pathRow is one row of the docs/file-tools.md §2 table: raw inputs and the normalized path
// they give, or "" when they are invalid_path.
type pathRow struct {
	id   int
	raws []string
	want string
}

var pathRows = []pathRow{
	{1, []string{"/src/main.go"}, "/src/main.go"},
	{2, []string{"src/main.go"}, "/src/main.go"},
	{3, []string{"/src//main.go"}, "/src/main.go"},
	{4, []string{"/./src/./main.go"}, "/src/main.go"},
	{5, []string{"/src/"}, "/src"},
	{6, []string{"/", "//", ".", "./"}, "/"},
	{7, []string{"./src"}, "/src"},
	{8, []string{""}, ""},
	{9, []string{"/docs/report..final.md"}, "/docs/report..final.md"},
	{10, []string{"/app/[...slug]/page.tsx"}, "/app/[...slug]/page.tsx"},
	{11, []string{"/a/..."}, "/a/..."},
	{12, []string{"..", "/..", "a/.."}, ""},
	{13, []string{"/a/../b"}, ""},
	{14, []string{"../../etc/passwd"}, ""},
	{15, []string{`a\..\b`}, ""},
	{16, []string{`dir\file.txt`}, "/dir/file.txt"},
	{17, []string{"~", "~/secret", "~root/x"}, ""},
	{18, []string{"/home/~user/x"}, "/home/~user/x"},
	{19, []string{`C:\Users\x`, "c:/x", "c:"}, ""},
	{20, []string{"/c:/x"}, "/c:/x"},
	{21, []string{"/a\x00b"}, ""},
	{22, []string{"/a\nb", "/a\tb"}, ""},
	{23, []string{"/" + strings.Repeat("a", 256)}, ""},
	{24, []string{"/" + strings.Repeat("a", 255)}, "/" + strings.Repeat("a", 255)},
	{25, []string{strings.Repeat("/abcdefg", 512) + "x"}, ""},
	{26, []string{"/é/ü.txt"}, "/é/ü.txt"},
	{27, []string{"/a\xff"}, ""},
	{28, []string{"/a/ b .txt"}, "/a/ b .txt"},
	{29, []string{"/%2e%2e/x"}, "/%2e%2e/x"},
	{30, []string{"/a\uFF0F.."}, "/a\uFF0F.."},
}

// pathCases are P01–P30: the docs/file-tools.md §2 table through the backend operations.
// A valid input is written (or, for "/", listed), and the result path, a
// download and a read of the normalized path prove where it went. An
// invalid input is refused with invalid_path by read, write, ls and
// upload. With a Prefix, valid inputs are sent as Prefix+"/"+raw (which
// normalizes to Prefix+want); invalid ones are sent as they are, since
// they must be rejected before any routing.
func pathCases() []testCase {
	var out []testCase
	for _, row := range pathRows {
		out = append(out, testCase{name: fmt.Sprintf("P%02d", row.id), run: func(e *env) {
			if row.want == "" {
				for _, raw := range row.raws {
					what := fmt.Sprintf("%q", clip(raw))
					_, err := e.b.Read(e.ctx, backend.ReadRequest{Path: raw, Limit: 1})
					e.wantCode("read "+what, err, backend.CodeInvalidPath)
					_, err = e.b.Write(e.ctx, raw, []byte("x"))
					e.wantCode("write "+what, err, backend.CodeInvalidPath)
					_, err = e.b.Ls(e.ctx, raw)
					e.wantCode("ls "+what, err, backend.CodeInvalidPath)
					res, err := e.b.Upload(e.ctx, []backend.UploadItem{{Path: raw, Content: []byte("x")}})
					if e.noErr("upload "+what, err) && len(res) == 1 {
						e.wantItemCode("upload "+what, res[0].Err, backend.CodeInvalidPath)
					}
				}
				e.wantList("ls / after invalid inputs", e.lsPaths("/"), nil)
				return
			}
			send := func(raw string) string {
				if e.h.Prefix == "" {
					return raw
				}
				return e.h.Prefix + "/" + raw
			}
			if row.want == "/" {
				e.seed(map[string]string{"/sentinel.txt": "s"})
				for _, raw := range row.raws {
					res, err := e.b.Ls(e.ctx, send(raw))
					if !e.noErr(fmt.Sprintf("ls %q", raw), err) {
						continue
					}
					var got []string
					for _, fi := range res.Entries {
						if !e.ignored(fi.Path) {
							got = append(got, e.v(fi.Path))
						}
					}
					e.wantList(fmt.Sprintf("ls %q", raw), got, []string{"/sentinel.txt"})
				}
				return
			}
			for i, raw := range row.raws {
				content := fmt.Sprintf("content %d of P%02d\n", i, row.id)
				w, err := e.b.Write(e.ctx, send(raw), []byte(content))
				if !e.noErr(fmt.Sprintf("write %q", raw), err) {
					continue
				}
				if w.Path != e.p(row.want) {
					e.t.Errorf("write %q: result path %q, want %q", raw, w.Path, e.p(row.want))
				}
				e.wantContent(row.want, content)
				r := e.mustRead(row.want, 0, 10)
				if r.Content != strings.TrimSuffix(content, "\n") {
					e.t.Errorf("read %q = %q, want %q", row.want, r.Content, content)
				}
			}
		}})
	}
	return out
}
