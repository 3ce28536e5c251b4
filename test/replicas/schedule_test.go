package replicas

import (
	"syscall"
	"testing"
	"time"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	goopenai "github.com/sashabaranov/go-openai"
	"google.golang.org/protobuf/types/known/durationpb"
)

// TestScheduleOncePerTick: an interval schedule on two replicas sharing
// one PostgreSQL fires every tick exactly once: each fire starts one run
// (one model call with its run id, nowhere a second), and each run
// completes. Both replicas poll for due schedules every 200 ms and race
// for every tick; to see both fire, replica b is paused (SIGSTOP) while a
// fires the first ticks, then a stops (SIGTERM) and b, resumed, fires
// the next ones (the ticks missed meanwhile fold into one fire).
func TestScheduleOncePerTick(t *testing.T) {
	f := startFleet(t, config{leaseTTL: 30 * time.Second, graceA: 10 * time.Second})
	const (
		scenario = textOnly + "schedule"
		interval = 2 * time.Second
	)
	if err := f.b.proc.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := true
	t.Cleanup(func() {
		if stopped {
			_ = f.b.proc.Signal(syscall.SIGCONT)
		}
	})
	cr, err := f.a.c.CreateSchedule(f.ctx, &plumbv1.CreateScheduleRequest{Interval: durationpb.New(interval),
		Run: &plumbv1.RunRequest{Input: []*plumbv1.InputMessage{{Content: scenario}}, Metadata: map[string]string{"from": "schedule"}}})
	if err != nil {
		t.Fatal(err)
	}
	id := cr.GetSchedule().GetId()
	first := cr.GetSchedule().GetNextFireTime().AsTime()
	via := f.a
	fires := func() []*plumbv1.ScheduleFire {
		res, err := via.c.ListScheduleFires(f.ctx, &plumbv1.ListScheduleFiresRequest{ScheduleId: id, PageSize: 500})
		if err != nil {
			t.Fatalf("ListScheduleFires on replica %s: %v", via.name, err)
		}
		return res.GetFires()
	}
	waitFor(t, "two fires by replica a", func() bool { return len(fires()) >= 2 })
	if err := f.b.proc.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	stopped, via = false, f.b
	if err := f.a.proc.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := f.a.proc.Wait(hangGuard); code == -1 {
		t.Fatal("replica a did not exit on SIGTERM")
	}
	aFires := len(fires()) // a may have claimed more while b resumed
	waitFor(t, "more fires by replica b", func() bool { return len(fires()) >= aFires+3 })
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
			th, err := f.b.c.GetThread(f.ctx, &plumbv1.GetThreadRequest{ThreadId: thread})
			return err == nil && th.GetThread().GetLastRun().GetStatus() == plumbv1.RunStatus_RUN_STATUS_COMPLETED
		})
		th, err := f.b.c.GetThread(f.ctx, &plumbv1.GetThreadRequest{ThreadId: thread})
		if err != nil || th.GetThread().GetLastRun().GetRunId() != fr.GetRunId() || th.GetThread().GetMetadata()["from"] != "schedule" {
			t.Fatalf("thread of fire %v: %v, %v", fr, th, err)
		}
	}
	// The model saw exactly the fires' runs: no run without a fire, no
	// second run for a tick. (A run in flight when replica a stopped may
	// be continued by b, so a run may call the model more than once.)
	calls := map[string]int{}
	for _, r := range f.model.Requests("main") {
		if msgs := r.Body.Messages; lastUser(msgs) == scenario {
			calls[r.RunID]++
		}
	}
	if len(calls) != len(list) {
		t.Fatalf("the model saw %d scheduled runs; %d fires were recorded", len(calls), len(list))
	}
	for _, fr := range list {
		if calls[fr.GetRunId()] == 0 {
			t.Fatalf("run %s of tick %s never called the model", fr.GetRunId(), fr.GetTick().AsTime())
		}
	}
	t.Logf("%d ticks fired once each; fires per replica: %v", len(list), replicas)
	if len(replicas) != 2 {
		t.Fatalf("fires per replica %v; want fires by both", replicas)
	}
	sc, err := f.b.c.GetSchedule(f.ctx, &plumbv1.GetScheduleRequest{ScheduleId: id})
	if err != nil || !sc.GetSchedule().GetPaused() || sc.GetSchedule().GetNextFireTime() != nil || sc.GetSchedule().GetLastRunId() != list[0].GetRunId() {
		t.Fatalf("schedule after its fires: %v, %v; newest fire %v", sc, err, list[0])
	}
}

// lastUser is the content of the last user message.
func lastUser(msgs []goopenai.ChatCompletionMessage) string {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == "user" {
			return msgs[i].Content
		}
	}
	return ""
}
