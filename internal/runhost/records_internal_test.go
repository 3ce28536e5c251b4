package runhost

import (
	"context"
	"sync/atomic"
	"testing"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/pkg/store"
	"go.uber.org/zap"
)

// lateRuns is a run-record store whose run appears after a number of
// reads (the first checkpoint racing the client).
type lateRuns struct {
	store.Runs
	reads   atomic.Int32
	appears int32
}

func (r *lateRuns) GetRun(_ context.Context, runID string) (store.RunInfo, error) {
	if r.reads.Add(1) < r.appears {
		return store.RunInfo{}, store.ErrRunNotFound
	}
	return store.RunInfo{ThreadID: "t"}, nil
}

// TestStartedWhenRecorded: run_started reaches send only once the run's
// record reads back; the events after it, and every event of a host
// without run records, pass at once.
func TestStartedWhenRecorded(t *testing.T) {
	tests := []struct {
		name      string
		runs      *lateRuns
		wantReads int32
	}{
		{"record already stored", &lateRuns{appears: 1}, 1},
		{"record stored after three reads", &lateRuns{appears: 3}, 3},
		{"no run records", nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := &Host{lg: zap.NewNop()}
			if tt.runs != nil {
				h.cfg.Runs = tt.runs
			}
			var sent []*plumbv1.Event
			send := h.startedWhenRecorded(func(e *plumbv1.Event) error {
				if tt.runs != nil && tt.runs.reads.Load() < tt.wantReads {
					t.Errorf("event %d sent after %d reads of the record; want %d first", e.GetSequence(), tt.runs.reads.Load(), tt.wantReads)
				}
				sent = append(sent, e)
				return nil
			})
			started := &plumbv1.Event{RunId: "r", Sequence: 1, Payload: &plumbv1.Event_RunStarted{RunStarted: &plumbv1.RunStarted{ThreadId: "t"}}}
			next := &plumbv1.Event{RunId: "r", Sequence: 2}
			for _, e := range []*plumbv1.Event{started, next} {
				if err := send(e); err != nil {
					t.Fatal(err)
				}
			}
			if len(sent) != 2 {
				t.Fatalf("sent %d events; want 2", len(sent))
			}
			if tt.runs != nil && tt.runs.reads.Load() != tt.wantReads {
				t.Errorf("the record was read %d times; want %d (only for run_started)", tt.runs.reads.Load(), tt.wantReads)
			}
		})
	}
}
