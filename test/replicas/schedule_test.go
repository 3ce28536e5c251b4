package replicas

import (
	"testing"
	"time"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"google.golang.org/protobuf/types/known/durationpb"
)

// TestScheduleOncePerTick: an interval schedule on two replicas sharing
// one PostgreSQL fires every tick exactly once: each fire starts one run
// (one model call with its run id, nowhere a second), on one replica or
// the other, and each run completes; both replicas poll for due
// schedules every 200 ms, so they race for every tick.
func TestScheduleOncePerTick(t *testing.T) {
	f := startFleet(t, config{leaseTTL: 30 * time.Second, graceA: 10 * time.Second})
	const (
		scenario = textOnly + "schedule"
		interval = 2 * time.Second
		ticks    = 5
	)
	cr, err := f.a.c.CreateSchedule(f.ctx, &plumbv1.CreateScheduleRequest{Interval: durationpb.New(interval),
		Run: &plumbv1.RunRequest{Input: []*plumbv1.InputMessage{{Content: scenario}}, Metadata: map[string]string{"from": "schedule"}}})
	if err != nil {
		t.Fatal(err)
	}
	id := cr.GetSchedule().GetId()
	first := cr.GetSchedule().GetNextFireTime().AsTime()
	fires := func() []*plumbv1.ScheduleFire {
		res, err := f.b.c.ListScheduleFires(f.ctx, &plumbv1.ListScheduleFiresRequest{ScheduleId: id, PageSize: 500})
		if err != nil {
			t.Fatalf("ListScheduleFires on replica b: %v", err)
		}
		return res.GetFires()
	}
	waitFor(t, "five fires", func() bool { return len(fires()) >= ticks })
	if _, err := f.b.c.PauseSchedule(f.ctx, &plumbv1.PauseScheduleRequest{ScheduleId: id}); err != nil {
		t.Fatal(err)
	}
	// A claim in flight when the pause landed finishes; then nothing more.
	list := fires()
	for _, fr := range list {
		if fr.GetStatus() == plumbv1.ScheduleFireStatus_SCHEDULE_FIRE_STATUS_PENDING {
			waitFor(t, "the pending fire to start its run", func() bool {
				for _, g := range fires() {
					if g.GetTick().AsTime().Equal(fr.GetTick().AsTime()) {
						return g.GetStatus() != plumbv1.ScheduleFireStatus_SCHEDULE_FIRE_STATUS_PENDING
					}
				}
				return false
			})
		}
	}
	list = fires()
	seen := map[time.Time]bool{}
	replicas := map[string]int{}
	for _, fr := range list {
		tick := fr.GetTick().AsTime()
		if seen[tick] {
			t.Fatalf("tick %s fired twice: %v", tick, list)
		}
		seen[tick] = true
		if off := tick.Sub(first); off < 0 || off%interval != 0 {
			t.Errorf("tick %s is off the schedule's grid (first %s, every %s)", tick, first, interval)
		}
		if fr.GetStatus() != plumbv1.ScheduleFireStatus_SCHEDULE_FIRE_STATUS_STARTED || fr.GetRunId() == "" {
			t.Fatalf("fire %v did not start a run", fr)
		}
		replicas[fr.GetReplica()]++
		// One run per fire, and it completes.
		thread := fr.GetThreadId()
		waitFor(t, "the scheduled run to complete", func() bool {
			th, err := f.a.c.GetThread(f.ctx, &plumbv1.GetThreadRequest{ThreadId: thread})
			return err == nil && th.GetThread().GetLastRun().GetStatus() == plumbv1.RunStatus_RUN_STATUS_COMPLETED
		})
		th, err := f.b.c.GetThread(f.ctx, &plumbv1.GetThreadRequest{ThreadId: thread})
		if err != nil || th.GetThread().GetLastRun().GetRunId() != fr.GetRunId() || th.GetThread().GetMetadata()["from"] != "schedule" {
			t.Fatalf("thread of fire %v: %v, %v", fr, th, err)
		}
	}
	// The model saw one call per fire and no run it was not told of.
	calls := map[string]int{}
	for _, r := range f.model.Requests("main") {
		if msgs := r.Body.Messages; len(msgs) > 0 && msgs[len(msgs)-1].Content == scenario {
			calls[r.RunID]++
		}
	}
	if len(calls) != len(list) {
		t.Fatalf("the model saw %d scheduled runs; %d fires were recorded", len(calls), len(list))
	}
	for _, fr := range list {
		if calls[fr.GetRunId()] != 1 {
			t.Fatalf("run %s of tick %s called the model %d times; want once", fr.GetRunId(), fr.GetTick().AsTime(), calls[fr.GetRunId()])
		}
	}
	t.Logf("%d ticks fired once each; fires per replica: %v", len(list), replicas)
	sc, err := f.a.c.GetSchedule(f.ctx, &plumbv1.GetScheduleRequest{ScheduleId: id})
	if err != nil || !sc.GetSchedule().GetPaused() || sc.GetSchedule().GetNextFireTime() != nil || sc.GetSchedule().GetLastRunId() != list[0].GetRunId() {
		t.Fatalf("schedule after its fires: %v, %v; newest fire %v", sc, err, list[0])
	}
}
