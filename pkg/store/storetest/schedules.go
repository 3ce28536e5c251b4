package storetest

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/plumbhq/plumb/pkg/schedule"
	"github.com/plumbhq/plumb/pkg/store"
)

// ScheduleStore is a durable store with schedule records.
type ScheduleStore interface {
	store.Schedules
}

// RunSchedules runs the store.Schedules contract against a fresh store
// from newStore: records round-trip and page per tenant, updates replace,
// only unpaused due schedules are due, a tick is claimed once however
// many claim it at once, a claim after an update or a pause loses, fires
// record their outcome and page newest first, a schedule due long ago
// folds its missed ticks into one fire (schedule.Plan), and deleting a
// schedule deletes its fires.
func RunSchedules(t *testing.T, newStore func(t *testing.T) ScheduleStore) {
	t.Helper()
	s := newStore(t)
	mk := func(i int, tenant string) store.Schedule {
		return store.Schedule{
			ID: fmt.Sprintf("sc%02d", i), Tenant: tenant, Interval: 10 * time.Second, CatchUp: string(schedule.FireOnce),
			Run:      store.ScheduleRun{Input: []string{"hello"}, Metadata: map[string]string{"k": "v"}, Agent: "a", Timeout: time.Minute},
			NextFire: t0.Add(10 * time.Second), Created: t0.Add(time.Duration(i) * time.Second), Updated: t0.Add(time.Duration(i) * time.Second),
		}
	}
	for i := range 5 {
		if err := s.CreateSchedule(ctx(), mk(i, "acme")); err != nil {
			t.Fatalf("create %d: %v", i, err)
		}
	}
	other := mk(9, "other")
	other.Cron, other.TimeZone, other.Interval = "0 9 * * *", "Europe/Paris", 0
	other.Run.ThreadID, other.NextFire = "th", t0.Add(24*time.Hour)
	if err := s.CreateSchedule(ctx(), other); err != nil {
		t.Fatal(err)
	}
	got, err := s.Schedule(ctx(), "sc09")
	if err != nil || !reflect.DeepEqual(got, other) {
		t.Fatalf("Schedule(sc09) = %+v, %v; want %+v", got, err, other)
	}
	if _, err := s.Schedule(ctx(), "nope"); !errors.Is(err, store.ErrScheduleNotFound) {
		t.Fatalf("Schedule(nope): %v", err)
	}

	// Pages of acme's schedules, newest first; other's never in them.
	var ids []string
	tok := ""
	for range 10 {
		page, next, err := s.ListSchedules(ctx(), store.ScheduleQuery{Tenant: "acme", PageSize: 2, PageToken: tok})
		if err != nil {
			t.Fatal(err)
		}
		for _, sc := range page {
			ids = append(ids, sc.ID)
		}
		if tok = next; tok == "" {
			break
		}
	}
	if want := []string{"sc04", "sc03", "sc02", "sc01", "sc00"}; !reflect.DeepEqual(ids, want) {
		t.Fatalf("listed %v; want %v", ids, want)
	}
	if _, _, err := s.ListSchedules(ctx(), store.ScheduleQuery{Tenant: "acme", PageToken: "garbage!"}); !errors.Is(err, store.ErrBadPageToken) {
		t.Fatalf("a bad page token: %v", err)
	}

	// Update replaces; a paused schedule is not due.
	up := mk(1, "acme")
	up.Interval, up.Paused, up.NextFire, up.Updated = time.Minute, true, time.Time{}, t0.Add(time.Hour)
	up.Run.Input = []string{"changed"}
	if err := s.UpdateSchedule(ctx(), up); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Schedule(ctx(), "sc01"); !reflect.DeepEqual(got, up) {
		t.Fatalf("updated schedule reads %+v; want %+v", got, up)
	}
	if err := s.UpdateSchedule(ctx(), store.Schedule{ID: "nope", Updated: t0}); !errors.Is(err, store.ErrScheduleNotFound) {
		t.Fatalf("UpdateSchedule(nope): %v", err)
	}
	due, err := s.DueSchedules(ctx(), t0.Add(10*time.Second), 100)
	if err != nil {
		t.Fatal(err)
	}
	if ids := scheduleIDs(due); !reflect.DeepEqual(ids, []string{"sc00", "sc02", "sc03", "sc04"}) {
		t.Fatalf("due %v; want sc00 sc02 sc03 sc04 (sc01 paused, sc09 not due)", ids)
	}
	if due, _ := s.DueSchedules(ctx(), t0.Add(9*time.Second), 100); len(due) != 0 {
		t.Fatalf("due before their time: %v", scheduleIDs(due))
	}
	if due, _ := s.DueSchedules(ctx(), t0.Add(time.Hour), 2); len(due) != 2 {
		t.Fatalf("the limit was not applied: %v", scheduleIDs(due))
	}

	// Eight claimers of one tick at once: exactly one wins.
	tick := t0.Add(10 * time.Second)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		wins int
	)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f := store.ScheduleFire{ScheduleID: "sc00", Tick: tick, FiredAt: tick, Replica: fmt.Sprintf("r%d", i)}
			sc, err := s.ClaimFire(ctx(), f, tick, tick.Add(10*time.Second))
			switch {
			case err == nil:
				mu.Lock()
				wins++
				mu.Unlock()
				if !sc.LastFire.Equal(tick) || !sc.NextFire.Equal(tick.Add(10*time.Second)) || sc.Run.Input[0] != "hello" {
					t.Errorf("claimed schedule reads %+v", sc)
				}
			case errors.Is(err, store.ErrFireLost), errors.Is(err, store.ErrBusy):
			default:
				t.Errorf("claim %d: %v", i, err)
			}
		}()
	}
	wg.Wait()
	if wins != 1 {
		t.Fatalf("%d claims of one tick won; want 1", wins)
	}
	if _, err := s.ClaimFire(ctx(), store.ScheduleFire{ScheduleID: "sc00", Tick: tick, FiredAt: tick}, tick, tick.Add(time.Hour)); !errors.Is(err, store.ErrFireLost) {
		t.Fatalf("a second claim of a claimed tick: %v", err)
	}
	// A fire of a tick recorded before is refused even when next_fire
	// matches (the belt to the compare-and-set's braces), and the
	// schedule moves on instead of staying due on it.
	next := tick.Add(10 * time.Second)
	if _, err := s.ClaimFire(ctx(), store.ScheduleFire{ScheduleID: "sc00", Tick: tick, FiredAt: next}, next, next.Add(5*time.Second)); !errors.Is(err, store.ErrFireLost) {
		t.Fatalf("a second fire of one tick: %v", err)
	}
	if got, _ := s.Schedule(ctx(), "sc00"); !got.NextFire.Equal(next.Add(5*time.Second)) || !got.LastFire.Equal(tick) {
		t.Fatalf("after a refused second fire of a tick the schedule reads next %s, last %s", got.NextFire, got.LastFire)
	}
	if fires, _, _ := s.ListScheduleFires(ctx(), "sc00", 0, ""); len(fires) != 1 || !fires[0].FiredAt.Equal(tick) {
		t.Fatalf("fires after a refused second fire of a tick: %+v", fires)
	}
	// Put next_fire back on the grid for what follows.
	sc00, _ := s.Schedule(ctx(), "sc00")
	sc00.NextFire = next
	if err := s.UpdateSchedule(ctx(), sc00); err != nil {
		t.Fatal(err)
	}
	// A paused schedule cannot be claimed.
	if _, err := s.ClaimFire(ctx(), store.ScheduleFire{ScheduleID: "sc01", Tick: tick, FiredAt: tick}, time.Time{}, tick); !errors.Is(err, store.ErrFireLost) {
		t.Fatalf("claim of a paused schedule: %v", err)
	}
	if _, err := s.ClaimFire(ctx(), store.ScheduleFire{ScheduleID: "nope", Tick: tick, FiredAt: tick}, tick, tick); !errors.Is(err, store.ErrFireLost) {
		t.Fatalf("claim of a missing schedule: %v", err)
	}

	// The outcome is recorded on the fire and the schedule.
	done := store.ScheduleFire{ScheduleID: "sc00", Tick: tick, Status: store.FireStarted, RunID: "run1", ThreadID: "th1"}
	if err := s.FinishFire(ctx(), done); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Schedule(ctx(), "sc00"); got.LastRunID != "run1" || got.LastThreadID != "th1" || got.LastError != "" {
		t.Fatalf("after a started fire the schedule reads %+v", got)
	}
	tick2 := next
	if _, err := s.ClaimFire(ctx(), store.ScheduleFire{ScheduleID: "sc00", Tick: tick2, FiredAt: tick2, Replica: "r9", Missed: 2}, tick2, tick2.Add(10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := s.FinishFire(ctx(), store.ScheduleFire{ScheduleID: "sc00", Tick: tick2, Status: store.FireSkipped, Reason: "thread busy"}); err != nil {
		t.Fatal(err)
	}
	// A late outcome of the older fire does not overwrite the newer's.
	if err := s.FinishFire(ctx(), done); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Schedule(ctx(), "sc00"); got.LastError != "thread busy" || got.LastRunID != "" || !got.LastFire.Equal(tick2) {
		t.Fatalf("after a skipped fire the schedule reads %+v", got)
	}
	fires, tok, err := s.ListScheduleFires(ctx(), "sc00", 1, "")
	if err != nil || len(fires) != 1 || tok == "" {
		t.Fatalf("first page of fires: %+v %q %v", fires, tok, err)
	}
	want := store.ScheduleFire{ScheduleID: "sc00", Tick: tick2, FiredAt: tick2, Replica: "r9", Status: store.FireSkipped, Missed: 2, Reason: "thread busy"}
	if fires[0] != want {
		t.Fatalf("newest fire %+v; want %+v", fires[0], want)
	}
	fires, tok, err = s.ListScheduleFires(ctx(), "sc00", 1, tok)
	if err != nil || len(fires) != 1 || tok != "" || fires[0].RunID != "run1" || fires[0].Status != store.FireStarted {
		t.Fatalf("second page of fires: %+v %q %v", fires, tok, err)
	}
	if _, _, err := s.ListScheduleFires(ctx(), "sc02", 1, store.EncodePageToken(1, "sc00")); !errors.Is(err, store.ErrBadPageToken) {
		t.Fatalf("another schedule's page token: %v", err)
	}

	// Catch-up after downtime, with an injected clock: sc02 was due at
	// t0+10s and is found at t0+1h; its missed ticks fold into one fire.
	spec, err := schedule.Parse("", "", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	sc02, _ := s.Schedule(ctx(), "sc02")
	now := t0.Add(time.Hour + 3*time.Second)
	plan := spec.Plan(sc02.NextFire, now, schedule.FireOnce)
	if _, err := s.ClaimFire(ctx(), store.ScheduleFire{ScheduleID: "sc02", Tick: plan.Tick, FiredAt: now, Missed: plan.Missed}, sc02.NextFire, plan.Next); err != nil {
		t.Fatal(err)
	}
	if due, _ := s.DueSchedules(ctx(), now, 100); slices.Contains(scheduleIDs(due), "sc02") {
		t.Fatal("sc02 is still due after its catch-up fire")
	}
	fires, _, _ = s.ListScheduleFires(ctx(), "sc02", 0, "")
	if len(fires) != 1 || !fires[0].Tick.Equal(t0.Add(time.Hour)) || fires[0].Missed != 359 {
		t.Fatalf("catch-up fires %+v; want one for t0+1h with 359 missed", fires)
	}

	// Fires left pending (their replica died before starting the run:
	// sc02's catch-up fire above, and one of sc03) are failed once old
	// enough; finished fires are left alone.
	pend := t0.Add(2 * time.Hour)
	if _, err := s.ClaimFire(ctx(), store.ScheduleFire{ScheduleID: "sc03", Tick: t0.Add(10 * time.Second), FiredAt: pend}, t0.Add(10*time.Second), pend.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if n, err := s.FailPendingFires(ctx(), t0.Add(time.Hour), "gone"); err != nil || n != 0 {
		t.Fatalf("FailPendingFires before any pending fire: %d, %v", n, err)
	}
	if n, err := s.FailPendingFires(ctx(), pend.Add(time.Second), "replica gone"); err != nil || n != 2 {
		t.Fatalf("FailPendingFires after them: %d, %v; want 2 (sc02's and sc03's)", n, err)
	}
	for _, id := range []string{"sc02", "sc03"} {
		if fires, _, _ := s.ListScheduleFires(ctx(), id, 0, ""); len(fires) != 1 || fires[0].Status != store.FireFailed || fires[0].Reason != "replica gone" {
			t.Fatalf("%s's fires after FailPendingFires: %+v", id, fires)
		}
	}
	if fires, _, _ := s.ListScheduleFires(ctx(), "sc00", 0, ""); len(fires) != 2 || fires[0].Status != store.FireSkipped || fires[1].Status != store.FireStarted {
		t.Fatalf("FailPendingFires changed finished fires: %+v", fires)
	}

	// Deleting a schedule deletes its fires.
	if err := s.DeleteSchedule(ctx(), "sc00"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteSchedule(ctx(), "sc00"); !errors.Is(err, store.ErrScheduleNotFound) {
		t.Fatalf("DeleteSchedule twice: %v", err)
	}
	if fires, _, err := s.ListScheduleFires(ctx(), "sc00", 0, ""); err != nil || len(fires) != 0 {
		t.Fatalf("a deleted schedule's fires: %+v, %v", fires, err)
	}
	// Its late outcome is no error.
	if err := s.FinishFire(ctx(), done); err != nil {
		t.Fatalf("FinishFire of a deleted schedule: %v", err)
	}
}

func scheduleIDs(list []store.Schedule) []string {
	var out []string
	for _, s := range list {
		out = append(out, s.ID)
	}
	return out
}
