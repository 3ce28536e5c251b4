package backend_test

import (
	"context"
	"slices"
	"testing"

	"github.com/plumbhq/plumb/pkg/backend"
)

// TestNotices: notices reach the innermost collector of the context, in
// order and once each; without a collector they are dropped.
func TestNotices(t *testing.T) {
	if backend.Notify(context.Background(), "nobody listens") {
		t.Error("a notice without a collector was taken")
	}

	outer, outerTake := backend.WithNotices(context.Background())
	if !backend.Notify(outer, "a") {
		t.Error("the collector did not take a notice")
	}
	inner, innerTake := backend.WithNotices(outer)
	backend.Notify(inner, "b")
	backend.Notify(inner, "c")
	backend.Notify(inner, "b")
	backend.Notify(inner, "")
	if got := innerTake(); !slices.Equal(got, []string{"b", "c"}) {
		t.Errorf("inner notices %q", got)
	}
	if got := outerTake(); !slices.Equal(got, []string{"a"}) {
		t.Errorf("outer notices %q", got)
	}
}

func TestReportLost(t *testing.T) {
	if backend.ReportLost(context.Background(), backend.WorkerLost{Worker: "w1"}) {
		t.Fatal("a report without a collector was taken")
	}
	ctx, lost := backend.WithLostWorkers(context.Background())
	for _, w := range []backend.WorkerLost{
		{Worker: "w1", SandboxID: "sbx-w1-a", Message: "unreachable"},
		{Worker: "w1", SandboxID: "sbx-w1-a", Message: "again"},
		{Worker: "w2", SandboxID: "sbx-w2-b"},
		{SandboxID: "no worker"},
	} {
		backend.ReportLost(ctx, w)
	}
	got := lost()
	if len(got) != 2 || got[0].Worker != "w1" || got[0].Message != "unreachable" || got[1].Worker != "w2" {
		t.Fatalf("reports = %+v", got)
	}
}
