package sandboxapi_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/plumbhq/plumb/pkg/sandbox/sandboxapi"
)

func TestWorkerOf(t *testing.T) {
	for _, tt := range []struct {
		id, worker string
	}{
		{"sbx-w1-abc", "w1"},
		{"sbx-eu-west.1-abc", "eu-west.1"},
		{"sbx-w1-", ""},
		{"sbx--abc", ""},
		{"sbx-abc", ""},
		{"w1-abc", ""},
		{"", ""},
	} {
		if got := sandboxapi.WorkerOf(tt.id); got != tt.worker {
			t.Errorf("WorkerOf(%q) = %q, want %q", tt.id, got, tt.worker)
		}
	}
}

func TestNewIDNamesItsWorker(t *testing.T) {
	for _, w := range []string{"w1", "eu-west-1", "a.b"} {
		a, b := sandboxapi.NewID(w), sandboxapi.NewID(w)
		if a == b {
			t.Errorf("NewID(%q) twice = %q", w, a)
		}
		if got := sandboxapi.WorkerOf(a); got != w {
			t.Errorf("WorkerOf(NewID(%q)) = %q (id %q)", w, got, a)
		}
	}
}

func FuzzWorkerOf(f *testing.F) {
	for _, s := range []string{"w1", "eu-west-1", "sbx-w1-abc", "", "-", "sbx-"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		w := sandboxapi.WorkerOf(s)
		if w != "" && !strings.HasPrefix(s, "sbx-"+w+"-") {
			t.Fatalf("WorkerOf(%q) = %q, not the id's worker part", s, w)
		}
		if s != "" && !strings.ContainsAny(s, " /") {
			if got := sandboxapi.WorkerOf(sandboxapi.NewID(s)); got != s {
				t.Fatalf("WorkerOf(NewID(%q)) = %q", s, got)
			}
		}
	})
}

func TestCodeOf(t *testing.T) {
	e := &sandboxapi.Error{Code: sandboxapi.CodeQuota, Message: "full", Err: errors.New("cause")}
	for _, tt := range []struct {
		err  error
		code sandboxapi.Code
	}{
		{e, sandboxapi.CodeQuota},
		{fmt.Errorf("create: %w", e), sandboxapi.CodeQuota},
		{errors.New("plain"), ""},
		{nil, ""},
	} {
		if got := sandboxapi.CodeOf(tt.err); got != tt.code {
			t.Errorf("CodeOf(%v) = %q, want %q", tt.err, got, tt.code)
		}
	}
	if e.Error() != "full: cause" || !errors.Is(e, e.Err) {
		t.Errorf("Error() = %q, Unwrap lost the cause", e.Error())
	}
}

func TestVolumeWorkerOf(t *testing.T) {
	for _, tt := range []struct{ id, worker string }{
		{"vol-w1-abc", "w1"},
		{"vol-eu-west.1-abc", "eu-west.1"},
		{"vol-w1-", ""},
		{"vol--abc", ""},
		{"vol-abc", ""},
		{"sbx-w1-abc", ""},
		{"data", ""},
		{"", ""},
	} {
		if got := sandboxapi.VolumeWorkerOf(tt.id); got != tt.worker {
			t.Errorf("VolumeWorkerOf(%q) = %q, want %q", tt.id, got, tt.worker)
		}
	}
	id := sandboxapi.NewVolumeID("w-7")
	if sandboxapi.VolumeWorkerOf(id) != "w-7" || sandboxapi.WorkerOf(id) != "" || sandboxapi.NewVolumeID("w-7") == id {
		t.Errorf("NewVolumeID = %q", id)
	}
}
