package agentsvc_test

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/server/agentsvc"
	"github.com/plumbhq/plumb/pkg/model/modeltest"
)

func every(d time.Duration) *durationpb.Duration { return durationpb.New(d) }

// TestScheduleValidation: every bad field of a schedule is
// INVALID_ARGUMENT naming it.
func TestScheduleValidation(t *testing.T) {
	e := newEnv(t, withSchedules(-1))
	good := func() *plumbv1.RunRequest { return runReq("", "report") }
	cases := []struct {
		name  string
		req   *plumbv1.CreateScheduleRequest
		field []string
	}{
		{"no timing", &plumbv1.CreateScheduleRequest{Run: good()}, []string{"cron"}},
		{"both", &plumbv1.CreateScheduleRequest{Cron: "* * * * *", Interval: every(time.Minute), Run: good()}, []string{"interval"}},
		{"bad cron", &plumbv1.CreateScheduleRequest{Cron: "every monday", Run: good()}, []string{"cron"}},
		{"bad zone", &plumbv1.CreateScheduleRequest{Cron: "0 9 * * *", TimeZone: "Moon/Base", Run: good()}, []string{"time_zone"}},
		{"short interval", &plumbv1.CreateScheduleRequest{Interval: every(100 * time.Millisecond), Run: good()}, []string{"interval"}},
		{"negative interval", &plumbv1.CreateScheduleRequest{Interval: every(-time.Second), Run: good()}, []string{"interval"}},
		{"bad catch-up", &plumbv1.CreateScheduleRequest{Interval: every(time.Minute), CatchUp: 9, Run: good()}, []string{"catch_up"}},
		{"no run", &plumbv1.CreateScheduleRequest{Interval: every(time.Minute)}, []string{"run"}},
		{"no input", &plumbv1.CreateScheduleRequest{Interval: every(time.Minute), Run: &plumbv1.RunRequest{}}, []string{"run.input"}},
		{"unknown agent", &plumbv1.CreateScheduleRequest{Interval: every(time.Minute), Run: &plumbv1.RunRequest{Agent: "nobody", Input: good().Input}}, []string{"run.agent"}},
		{"bad label", &plumbv1.CreateScheduleRequest{Interval: every(time.Minute), Run: &plumbv1.RunRequest{Metadata: map[string]string{"Bad Key": "x"}, Input: good().Input}}, []string{`run.metadata["Bad Key"]`}},
		{"files", &plumbv1.CreateScheduleRequest{Interval: every(time.Minute), Run: &plumbv1.RunRequest{Files: map[string]string{"/a": "b"}, Input: good().Input}}, []string{"run.files"}},
		{"client tools", &plumbv1.CreateScheduleRequest{Interval: every(time.Minute), Run: &plumbv1.RunRequest{ClientTools: []*plumbv1.ClientTool{{Name: "ask"}}, Input: good().Input}}, []string{"run.client_tools"}},
		{"detach", &plumbv1.CreateScheduleRequest{Interval: every(time.Minute), Run: &plumbv1.RunRequest{Detach: true, Input: good().Input}}, []string{"run.detach"}},
		{"several", &plumbv1.CreateScheduleRequest{Cron: "nope", CatchUp: 9}, []string{"cron", "catch_up", "run"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.c.CreateSchedule(e.ctx(), tc.req)
			wantStatus(t, err, codes.InvalidArgument, agentsvc.ReasonInvalidArgument)
			if got := fields(err); len(got) != len(tc.field) || func() bool {
				for i := range got {
					if got[i] != tc.field[i] {
						return true
					}
				}
				return false
			}() {
				t.Fatalf("fields %v; want %v (%v)", got, tc.field, err)
			}
		})
	}
	_, err := e.c.UpdateSchedule(e.ctx(), &plumbv1.UpdateScheduleRequest{Interval: every(time.Minute), Run: good()})
	wantStatus(t, err, codes.InvalidArgument, agentsvc.ReasonInvalidArgument)
	if f := fields(err); len(f) != 1 || f[0] != "schedule_id" {
		t.Fatalf("update without an id: fields %v", f)
	}
	for _, id := range []string{"", "sch-nope"} {
		_, err := e.c.GetSchedule(e.ctx(), &plumbv1.GetScheduleRequest{ScheduleId: id})
		if id == "" {
			wantStatus(t, err, codes.InvalidArgument, agentsvc.ReasonInvalidArgument)
		} else {
			wantStatus(t, err, codes.NotFound, agentsvc.ReasonScheduleNotFound)
		}
	}
}

// TestScheduleLifecycle: create, get, list, update, pause, resume and
// delete, each showing the next fire time, within the caller's tenant;
// another tenant's schedule (or thread) is NOT_FOUND.
func TestScheduleLifecycle(t *testing.T) {
	e := newEnv(t, withSchedules(-1))
	acme, other := as(e.ctx(), "acme"), as(e.ctx(), "other")
	before := time.Now()
	cr, err := e.c.CreateSchedule(acme, &plumbv1.CreateScheduleRequest{Cron: "0 9 * * 1-5", TimeZone: "Europe/Paris", CatchUp: plumbv1.ScheduleCatchUp_SCHEDULE_CATCH_UP_SKIP,
		Run: &plumbv1.RunRequest{Input: []*plumbv1.InputMessage{{Content: "morning report"}}, Metadata: map[string]string{"kind": "report"}, MaxIterations: 3, Timeout: every(time.Minute)}})
	if err != nil {
		t.Fatal(err)
	}
	sc := cr.GetSchedule()
	next := sc.GetNextFireTime().AsTime()
	if paris, _ := time.LoadLocation("Europe/Paris"); !next.After(before) || next.In(paris).Hour() != 9 || next.In(paris).Weekday() == time.Saturday ||
		next.In(paris).Weekday() == time.Sunday || next.Sub(before) > 4*24*time.Hour {
		t.Fatalf("next fire %s is not the next weekday 9:00 in Paris", next)
	}
	if sc.GetRun().GetInput()[0].GetContent() != "morning report" || sc.GetRun().GetMaxIterations() != 3 || sc.GetRun().GetTimeout().AsDuration() != time.Minute ||
		sc.GetCatchUp() != plumbv1.ScheduleCatchUp_SCHEDULE_CATCH_UP_SKIP || sc.GetRun().GetMetadata()["kind"] != "report" {
		t.Fatalf("created schedule reads %v", sc)
	}
	id := sc.GetId()
	got, err := e.c.GetSchedule(acme, &plumbv1.GetScheduleRequest{ScheduleId: id})
	if err != nil || got.GetSchedule().GetNextFireTime().AsTime() != next {
		t.Fatalf("GetSchedule = %v, %v", got, err)
	}
	// Another tenant sees nothing of it.
	_, err = e.c.GetSchedule(other, &plumbv1.GetScheduleRequest{ScheduleId: id})
	wantStatus(t, err, codes.NotFound, agentsvc.ReasonScheduleNotFound)
	for what, call := range map[string]func() error{
		"update": func() error {
			_, err := e.c.UpdateSchedule(other, &plumbv1.UpdateScheduleRequest{ScheduleId: id, Interval: every(time.Minute), Run: runReq("", "x")})
			return err
		},
		"pause": func() error {
			_, err := e.c.PauseSchedule(other, &plumbv1.PauseScheduleRequest{ScheduleId: id})
			return err
		},
		"resume": func() error {
			_, err := e.c.ResumeSchedule(other, &plumbv1.ResumeScheduleRequest{ScheduleId: id})
			return err
		},
		"delete": func() error {
			_, err := e.c.DeleteSchedule(other, &plumbv1.DeleteScheduleRequest{ScheduleId: id})
			return err
		},
		"fires": func() error {
			_, err := e.c.ListScheduleFires(other, &plumbv1.ListScheduleFiresRequest{ScheduleId: id})
			return err
		},
	} {
		err := call()
		if err == nil {
			t.Fatalf("%s of another tenant's schedule passed", what)
		}
		wantStatus(t, err, codes.NotFound, agentsvc.ReasonScheduleNotFound)
	}
	if l, err := e.c.ListSchedules(other, &plumbv1.ListSchedulesRequest{}); err != nil || len(l.GetSchedules()) != 0 {
		t.Fatalf("other's list: %v, %v", l, err)
	}
	if l, err := e.c.ListSchedules(acme, &plumbv1.ListSchedulesRequest{}); err != nil || len(l.GetSchedules()) != 1 || l.GetSchedules()[0].GetId() != id {
		t.Fatalf("acme's list: %v, %v", l, err)
	}
	// A schedule on another tenant's thread is refused.
	th, err := e.c.CreateThread(other, &plumbv1.CreateThreadRequest{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.c.CreateSchedule(acme, &plumbv1.CreateScheduleRequest{Interval: every(time.Minute), Run: runReq(th.GetThread().GetId(), "x")})
	wantStatus(t, err, codes.NotFound, agentsvc.ReasonThreadNotFound)

	// Pause clears the next fire; resume computes it again.
	p, err := e.c.PauseSchedule(acme, &plumbv1.PauseScheduleRequest{ScheduleId: id})
	if err != nil || !p.GetSchedule().GetPaused() || p.GetSchedule().GetNextFireTime() != nil {
		t.Fatalf("PauseSchedule = %v, %v", p, err)
	}
	r, err := e.c.ResumeSchedule(acme, &plumbv1.ResumeScheduleRequest{ScheduleId: id})
	if err != nil || r.GetSchedule().GetPaused() || r.GetSchedule().GetNextFireTime().AsTime() != next {
		t.Fatalf("ResumeSchedule = %v, %v", r, err)
	}
	// Update replaces everything.
	u, err := e.c.UpdateSchedule(acme, &plumbv1.UpdateScheduleRequest{ScheduleId: id, Interval: every(time.Hour), Run: runReq("", "hourly")})
	if err != nil {
		t.Fatal(err)
	}
	us := u.GetSchedule()
	if us.GetCron() != "" || us.GetTimeZone() != "" || us.GetInterval().AsDuration() != time.Hour || us.GetCatchUp() != plumbv1.ScheduleCatchUp_SCHEDULE_CATCH_UP_FIRE_ONCE ||
		us.GetRun().GetMaxIterations() != 0 || us.GetRun().GetInput()[0].GetContent() != "hourly" || time.Until(us.GetNextFireTime().AsTime()) > time.Hour {
		t.Fatalf("updated schedule reads %v", us)
	}
	if _, err := e.c.DeleteSchedule(acme, &plumbv1.DeleteScheduleRequest{ScheduleId: id}); err != nil {
		t.Fatal(err)
	}
	_, err = e.c.GetSchedule(acme, &plumbv1.GetScheduleRequest{ScheduleId: id})
	wantStatus(t, err, codes.NotFound, agentsvc.ReasonScheduleNotFound)
}

// fires lists a schedule's fires, newest first.
func (e *env) fires(id string) []*plumbv1.ScheduleFire {
	e.t.Helper()
	res, err := e.c.ListScheduleFires(as(e.ctx(), "acme"), &plumbv1.ListScheduleFiresRequest{ScheduleId: id, PageSize: 500})
	if err != nil {
		e.t.Fatal(err)
	}
	return res.GetFires()
}

// TestScheduleFiresRuns: on one agentd with SQLite, an interval schedule
// starts a detached run on a new thread at each tick, as its tenant; the
// runs complete with the scripted model's answers.
func TestScheduleFiresRuns(t *testing.T) {
	e := newEnv(t, withSchedules(20*time.Millisecond))
	for range 20 {
		e.srv.Script("main", modeltest.Text("report done"))
	}
	acme := as(t.Context(), "acme")
	cr, err := e.c.CreateSchedule(acme, &plumbv1.CreateScheduleRequest{Interval: every(time.Second),
		Run: &plumbv1.RunRequest{Input: []*plumbv1.InputMessage{{Content: "report"}}, Metadata: map[string]string{"from": "schedule"}}})
	if err != nil {
		t.Fatal(err)
	}
	id := cr.GetSchedule().GetId()
	eventuallyLong(t, "three started fires", func() bool {
		return countStatus(e.fires(id), plumbv1.ScheduleFireStatus_SCHEDULE_FIRE_STATUS_STARTED) >= 3
	})
	if _, err := e.c.PauseSchedule(acme, &plumbv1.PauseScheduleRequest{ScheduleId: id}); err != nil {
		t.Fatal(err)
	}
	fires := e.fires(id)
	threads := map[string]bool{}
	var prev time.Time
	for i := len(fires) - 1; i >= 0; i-- {
		f := fires[i]
		if f.GetStatus() != plumbv1.ScheduleFireStatus_SCHEDULE_FIRE_STATUS_STARTED || f.GetRunId() == "" || f.GetThreadId() == "" {
			t.Fatalf("fire %v did not start a run", f)
		}
		if !prev.IsZero() && f.GetTick().AsTime().Sub(prev) < time.Second {
			t.Fatalf("ticks %s and %s are closer than the interval", prev, f.GetTick().AsTime())
		}
		prev = f.GetTick().AsTime()
		if threads[f.GetThreadId()] {
			t.Fatalf("two fires ran on thread %s; want a new thread each", f.GetThreadId())
		}
		threads[f.GetThreadId()] = true
		// The run is the tenant's, on a thread with the schedule's labels,
		// and completes.
		eventuallyLong(t, "the scheduled run to finish", func() bool {
			res, err := e.c.GetThread(acme, &plumbv1.GetThreadRequest{ThreadId: f.GetThreadId()})
			return err == nil && res.GetThread().GetStatus() == plumbv1.ThreadStatus_THREAD_STATUS_IDLE
		})
		res, err := e.c.GetThread(acme, &plumbv1.GetThreadRequest{ThreadId: f.GetThreadId(), View: plumbv1.ThreadView_THREAD_VIEW_FULL})
		if err != nil {
			t.Fatal(err)
		}
		th := res.GetThread()
		if th.GetMetadata()["from"] != "schedule" || th.GetLastRun().GetRunId() != f.GetRunId() || th.GetLastRun().GetStatus() != plumbv1.RunStatus_RUN_STATUS_COMPLETED {
			t.Fatalf("thread of fire %v: %v", f, th)
		}
		if _, err := e.c.GetThread(as(e.ctx(), "other"), &plumbv1.GetThreadRequest{ThreadId: f.GetThreadId()}); err == nil {
			t.Fatal("another tenant reached a scheduled run's thread")
		}
	}
	sc, err := e.c.GetSchedule(acme, &plumbv1.GetScheduleRequest{ScheduleId: id})
	if err != nil || sc.GetSchedule().GetLastRunId() != fires[0].GetRunId() || sc.GetSchedule().GetLastFireTime().AsTime() != fires[0].GetTick().AsTime() {
		t.Fatalf("schedule after its fires: %v, %v; newest fire %v", sc, err, fires[0])
	}
}

// TestScheduleBusyThread: a schedule on a thread whose run is still going
// records the tick as skipped (thread busy) and starts no second run.
func TestScheduleBusyThread(t *testing.T) {
	e := newEnv(t, withSchedules(20*time.Millisecond))
	acme := as(t.Context(), "acme")
	th, err := e.c.CreateThread(acme, &plumbv1.CreateThreadRequest{})
	if err != nil {
		t.Fatal(err)
	}
	thread := th.GetThread().GetId()
	e.srv.Script("main", modeltest.Calls(call("c1", "sleep", `{"ms":60000}`)))
	cr, err := e.c.CreateSchedule(acme, &plumbv1.CreateScheduleRequest{Interval: every(time.Second), Run: runReq(thread, "check")})
	if err != nil {
		t.Fatal(err)
	}
	id := cr.GetSchedule().GetId()
	eventuallyLong(t, "a skipped fire", func() bool {
		return countStatus(e.fires(id), plumbv1.ScheduleFireStatus_SCHEDULE_FIRE_STATUS_SKIPPED) >= 1
	})
	if _, err := e.c.DeleteSchedule(acme, &plumbv1.DeleteScheduleRequest{ScheduleId: id}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.Cancel(acme, &plumbv1.CancelRequest{ThreadId: thread}); err != nil {
		t.Fatal(err)
	}
	if n := e.srv.Count("main"); n != 1 {
		t.Fatalf("the model was called %d times; want once (one run)", n)
	}
}

func countStatus(fires []*plumbv1.ScheduleFire, st plumbv1.ScheduleFireStatus) int {
	n := 0
	for _, f := range fires {
		if f.GetStatus() == st {
			n++
		}
	}
	return n
}

// eventuallyLong polls cond for up to two minutes (a busy machine).
func eventuallyLong(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
