package state

import (
	"context"
	"encoding/json"
	"maps"
	"reflect"
	"slices"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/plumbhq/plumb/pkg/backend"
)

var ctx = context.Background()

func fixedClock() func() time.Time {
	t := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	return func() time.Time {
		t = t.Add(time.Second)
		return t
	}
}

func mustWrite(t *testing.T, b *Backend, p, content string) {
	t.Helper()
	if _, err := b.Write(ctx, p, []byte(content)); err != nil {
		t.Fatal(err)
	}
}

func TestTimestampsAndEncoding(t *testing.T) {
	b := New(WithClock(fixedClock()))
	mustWrite(t, b, "/a.txt", "x")
	mustWrite(t, b, "/a.txt", "y")
	res, err := b.Upload(ctx, []backend.UploadItem{{Path: "/x.dat", Content: []byte("\xff\xfe")}, {Path: "/t.txt", Content: []byte("é")}})
	if err != nil || res[0].Err != nil || res[1].Err != nil {
		t.Fatal(err, res)
	}
	files := b.Files()
	a := files["/a.txt"]
	if a.CreatedAt != "2026-11-22T10:00:01Z" || a.ModifiedAt != "2026-11-22T10:00:02Z" || a.Encoding != backend.EncodingUTF8 {
		t.Errorf("/a.txt = %+v", a)
	}
	if f := files["/x.dat"]; f.Encoding != backend.EncodingBase64 || string(f.Content) != "\xff\xfe" {
		t.Errorf("/x.dat = %+v", f)
	}
	if f := files["/t.txt"]; f.Encoding != backend.EncodingUTF8 {
		t.Errorf("/t.txt = %+v", f)
	}
	// An edit that leaves invalid UTF-8 behind switches to base64.
	mustWrite(t, b, "/h6.txt", "ok\n\xff bad\nok2\n")
	if _, err := b.Edit(ctx, backend.EditRequest{Path: "/h6.txt", Old: "ok2", New: "fine"}); err != nil {
		t.Fatal(err)
	}
	if f := b.Files()["/h6.txt"]; f.Encoding != backend.EncodingBase64 || string(f.Content) != "ok\n\xff bad\nfine\n" || f.CreatedAt == f.ModifiedAt {
		t.Errorf("/h6.txt = %+v", f)
	}
}

func TestFileJSON(t *testing.T) {
	for _, content := range []string{"", "plain\r\ntext <&>", "\xff\xfe", "a\x00b", "é"} {
		f := File{Content: []byte(content), Encoding: backendEncoding(content), CreatedAt: "c", ModifiedAt: "m"}
		data, err := json.Marshal(f)
		if err != nil {
			t.Fatal(err)
		}
		var back File
		if err := json.Unmarshal(data, &back); err != nil {
			t.Fatal(err)
		}
		if string(back.Content) != content || back.Encoding != f.Encoding || back.CreatedAt != "c" || back.ModifiedAt != "m" {
			t.Errorf("%q: round trip %s → %+v", content, data, back)
		}
	}
	data, _ := json.Marshal(File{Content: []byte("hi"), Encoding: backend.EncodingUTF8})
	if got := string(data); got != `{"content":"hi","encoding":"utf-8","created_at":"","modified_at":""}` {
		t.Errorf("JSON shape %s", got)
	}
	// A hand-built utf-8 File with invalid bytes is written as base64.
	data, _ = json.Marshal(File{Content: []byte{0xff}, Encoding: backend.EncodingUTF8})
	if got := string(data); got != `{"content":"/w==","encoding":"base64","created_at":"","modified_at":""}` {
		t.Errorf("JSON of invalid utf-8: %s", got)
	}
	var f File
	if err := json.Unmarshal([]byte(`{"content":"x","encoding":"latin1"}`), &f); err == nil {
		t.Error("unknown encoding accepted")
	}
	if err := json.Unmarshal([]byte(`{"content":"%%%","encoding":"base64"}`), &f); err == nil {
		t.Error("bad base64 accepted")
	}
}

func backendEncoding(s string) backend.Encoding {
	if utf8.ValidString(s) {
		return backend.EncodingUTF8
	}
	return backend.EncodingBase64
}

func TestSnapshotLoad(t *testing.T) {
	b := New(WithClock(fixedClock()))
	mustWrite(t, b, "/a/b.txt", "1")
	mustWrite(t, b, "/c.bin", "\xff")
	snap := b.Files()

	// Snapshots are copies.
	f := snap["/a/b.txt"]
	f.Content[0] = 'X'
	if got := b.Files()["/a/b.txt"].Content; string(got) != "1" {
		t.Fatalf("snapshot aliases the state: %q", got)
	}
	f.Content[0] = '1'

	// JSON → Load → identical state and behaviour.
	data, err := json.Marshal(snap)
	if err != nil {
		t.Fatal(err)
	}
	var decoded map[string]File
	if err := json.Unmarshal(data, &decoded); err != nil {
		t.Fatal(err)
	}
	r := New()
	if err := r.Load(decoded); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(r.Files(), snap) {
		t.Fatalf("restored %+v, want %+v", r.Files(), snap)
	}
	if ch := r.TakeChanges(); ch != nil {
		t.Errorf("Load left changes: %v", ch)
	}
	res, err := r.Ls(ctx, "/")
	if err != nil || len(res.Entries) != 2 || res.Entries[0].Path != "/a/" {
		t.Errorf("ls after load: %+v %v", res, err)
	}
	// Loading again replaces everything.
	if err := r.Load(map[string]File{"/z": {Content: []byte("z")}}); err != nil {
		t.Fatal(err)
	}
	if got := slices.Sorted(maps.Keys(r.Files())); !slices.Equal(got, []string{"/z"}) {
		t.Errorf("after second load: %q", got)
	}
	if f := r.Files()["/z"]; f.Encoding != backend.EncodingUTF8 {
		t.Errorf("encoding not recomputed: %+v", f)
	}
}

func TestLoadRejects(t *testing.T) {
	tests := map[string]map[string]File{
		"not normalized": {"a.txt": {}},
		"trailing slash": {"/a/": {}},
		"root":           {"/": {}},
		"traversal":      {"/a/../b": {}},
		"file and dir":   {"/a": {}, "/a/b/c": {}},
	}
	for name, files := range tests {
		t.Run(name, func(t *testing.T) {
			b := New()
			mustWrite(t, b, "/keep", "k")
			if err := b.Load(files); err == nil {
				t.Fatal("Load succeeded")
			}
			if _, ok := b.Files()["/keep"]; !ok {
				t.Error("a failed Load changed the state")
			}
		})
	}
}

func TestTakeChanges(t *testing.T) {
	b := New(WithClock(fixedClock()))
	if ch := b.TakeChanges(); ch != nil {
		t.Fatalf("new state has changes: %v", ch)
	}
	mustWrite(t, b, "/d/a", "1")
	mustWrite(t, b, "/d/b", "2")
	mustWrite(t, b, "/e", "3")
	persisted := map[string]File{}
	Apply(persisted, b.TakeChanges())
	if !reflect.DeepEqual(persisted, b.Files()) {
		t.Fatalf("first delta: %v", persisted)
	}

	if _, err := b.Delete(ctx, "/d"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Edit(ctx, backend.EditRequest{Path: "/e", Old: "3", New: "4"}); err != nil {
		t.Fatal(err)
	}
	ch := b.TakeChanges()
	if got := slices.Sorted(maps.Keys(ch)); !slices.Equal(got, []string{"/d/a", "/d/b", "/e"}) {
		t.Fatalf("second delta keys %q", got)
	}
	if ch["/d/a"] != nil || ch["/e"] == nil || string(ch["/e"].Content) != "4" {
		t.Errorf("second delta %v", ch)
	}
	Apply(persisted, ch)
	if !reflect.DeepEqual(persisted, b.Files()) {
		t.Fatalf("after second delta: %v, want %v", persisted, b.Files())
	}
	if ch := b.TakeChanges(); ch != nil {
		t.Errorf("changes not drained: %v", ch)
	}
	// Failed operations change nothing.
	b.Write(ctx, "/e/x", []byte("x"))
	b.Edit(ctx, backend.EditRequest{Path: "/e", Old: "zzz", New: "y"})
	if ch := b.TakeChanges(); ch != nil {
		t.Errorf("failed operations recorded changes: %v", ch)
	}
}

func TestNoExecutor(t *testing.T) {
	var b any = New()
	if _, ok := b.(backend.Executor); ok {
		t.Error("State implements backend.Executor")
	}
	if backend.Home(b) != "/" {
		t.Error("home is not /")
	}
}
