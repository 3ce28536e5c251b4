package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Schedule is a tenant's schedule record: when it fires (a cron
// expression in a time zone, or an interval; validated by pkg/schedule)
// and the run it starts each time. NextFire is the tick the next fire is
// for; replicas claim it with ClaimFire, so each tick fires at most once.
type Schedule struct {
	ID     string
	Tenant string
	// Cron and TimeZone, or Interval: the timing.
	Cron     string
	TimeZone string
	Interval time.Duration
	// CatchUp is the policy for missed ticks (pkg/schedule.CatchUp).
	CatchUp string
	Paused  bool
	// Run is what each fire starts.
	Run ScheduleRun
	// NextFire is the next tick (zero while paused).
	NextFire time.Time
	// LastFire is the last tick claimed (zero before the first).
	LastFire time.Time
	// LastRunID and LastThreadID name the run the last fire started;
	// LastError says why the last fire started none ("" when it did).
	LastRunID    string
	LastThreadID string
	LastError    string
	Created      time.Time
	Updated      time.Time
}

// ScheduleRun is the run a schedule starts: the fields of a RunRequest a
// schedule keeps (no files, no client tools: nobody is there to answer).
type ScheduleRun struct {
	// ThreadID is the thread to run on; "" starts a new thread each time.
	ThreadID         string            `json:"thread_id,omitempty"`
	Agent            string            `json:"agent,omitempty"`
	Model            string            `json:"model,omitempty"`
	Input            []string          `json:"input"`
	Metadata         map[string]string `json:"metadata,omitempty"`
	MaxIterations    int               `json:"max_iterations,omitempty"`
	Timeout          time.Duration     `json:"timeout,omitempty"`
	AbandonInterrupt bool              `json:"abandon_interrupt,omitempty"`
}

// FireStatus is the outcome of a schedule's fire.
type FireStatus string

// Fire outcomes.
const (
	// FirePending: claimed, the run not started yet (or the replica died
	// starting it).
	FirePending FireStatus = "pending"
	// FireStarted: the run started (RunID, ThreadID).
	FireStarted FireStatus = "started"
	// FireSkipped: no run, on purpose (Reason: the thread was busy, the
	// tick was too late under the skip policy).
	FireSkipped FireStatus = "skipped"
	// FireFailed: the run did not start (Reason: the error).
	FireFailed FireStatus = "failed"
)

// ScheduleFire records one claimed tick of a schedule; (ScheduleID,
// Tick) is unique.
type ScheduleFire struct {
	ScheduleID string
	Tick       time.Time
	// FiredAt is when the tick was claimed, Replica who claimed it.
	FiredAt time.Time
	Replica string
	Status  FireStatus
	// Missed counts the ticks folded into this one after downtime.
	Missed   int
	RunID    string
	ThreadID string
	Reason   string
}

// Errors of the schedule records.
var (
	// ErrScheduleNotFound: no schedule has that id.
	ErrScheduleNotFound = errors.New("schedule not found")
	// ErrFireLost: the tick was claimed by another replica, or the
	// schedule changed (updated, paused, deleted) since it was read.
	ErrFireLost = errors.New("schedule tick already claimed")
)

// ScheduleQuery selects a page of a tenant's schedules.
type ScheduleQuery struct {
	Tenant    string
	PageSize  int
	PageToken string
}

// Schedules keeps schedule records and their fires (deleting a schedule
// deletes its fires). Every implementation must pass
// storetest.RunSchedules.
type Schedules interface {
	// CreateSchedule stores s (its ID new).
	CreateSchedule(ctx context.Context, s Schedule) error
	// Schedule returns the record of id, or ErrScheduleNotFound.
	Schedule(ctx context.Context, id string) (Schedule, error)
	// ListSchedules returns one page of q.Tenant's schedules, newest
	// first, and the next page's token ("" at the end; a token it did not
	// issue is ErrBadPageToken).
	ListSchedules(ctx context.Context, q ScheduleQuery) ([]Schedule, string, error)
	// UpdateSchedule replaces the timing, policy, run, pause and next
	// fire of s.ID (and sets Updated), or returns ErrScheduleNotFound. A
	// claim of the old next fire in flight loses.
	UpdateSchedule(ctx context.Context, s Schedule) error
	// DeleteSchedule removes id and its fires, or returns
	// ErrScheduleNotFound.
	DeleteSchedule(ctx context.Context, id string) error
	// DueSchedules returns up to limit unpaused schedules whose NextFire
	// is at or before now, earliest first.
	DueSchedules(ctx context.Context, now time.Time, limit int) ([]Schedule, error)
	// ClaimFire moves schedule f.ScheduleID from next fire due to next,
	// and records f (status FirePending unless set) and LastFire =
	// f.Tick, in one compare-and-set: when the schedule's next fire is no
	// longer due (another replica claimed it, or it was updated, paused
	// or deleted) it changes nothing and returns ErrFireLost. A tick that
	// has a fire already is not recorded again: next fire still moves to
	// next (so the schedule is not due forever) and the answer is
	// ErrFireLost. It returns the schedule as claimed.
	ClaimFire(ctx context.Context, f ScheduleFire, due, next time.Time) (Schedule, error)
	// FinishFire records the outcome of the claimed fire f (status, run,
	// thread, reason) and, on the schedule, LastRunID, LastThreadID and
	// LastError. A schedule deleted meanwhile is not an error.
	FinishFire(ctx context.Context, f ScheduleFire) error
	// FailPendingFires marks FireFailed, with reason, the fires still
	// FirePending that were claimed before before (their replica stopped
	// between the claim and the run's start), and returns how many.
	FailPendingFires(ctx context.Context, before time.Time, reason string) (int, error)
	// ListScheduleFires returns one page of a schedule's fires, newest
	// tick first, and the next page's token.
	ListScheduleFires(ctx context.Context, scheduleID string, pageSize int, pageToken string) ([]ScheduleFire, string, error)
}

// PageSize defaults and caps a requested page size (default 50, max 500).
func PageSize(n int) int {
	if n <= 0 {
		return 50
	}
	return min(n, 500)
}

// OptNanos is Nanos, with 0 for the zero time (a time not set).
func OptNanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// FromOptNanos is FromNanos, with the zero time for 0.
func FromOptNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return FromNanos(n)
}

// ScheduleColumns are the schedules columns ScanSchedule reads, in order.
const ScheduleColumns = `id, tenant, cron, time_zone, interval_ns, catch_up, paused, run, next_fire, last_fire,
	last_run_id, last_thread_id, last_error, created_at, updated_at`

// ScanSchedule reads one row of ScheduleColumns.
func ScanSchedule(r Scanner) (Schedule, error) {
	var (
		s                                  Schedule
		interval, next, last, created, upd int64
		run                                string
	)
	if err := r.Scan(&s.ID, &s.Tenant, &s.Cron, &s.TimeZone, &interval, &s.CatchUp, &s.Paused, &run, &next, &last,
		&s.LastRunID, &s.LastThreadID, &s.LastError, &created, &upd); err != nil {
		return Schedule{}, err
	}
	if err := json.Unmarshal([]byte(run), &s.Run); err != nil {
		return Schedule{}, fmt.Errorf("schedule %s: run: %w", s.ID, err)
	}
	s.Interval = time.Duration(interval)
	s.NextFire, s.LastFire = FromOptNanos(next), FromOptNanos(last)
	s.Created, s.Updated = FromNanos(created), FromNanos(upd)
	return s, nil
}

// ScheduleFireColumns are the schedule_fires columns ScanScheduleFire
// reads, in order.
const ScheduleFireColumns = `schedule_id, tick, fired_at, replica, status, missed, run_id, thread_id, reason`

// ScanScheduleFire reads one row of ScheduleFireColumns.
func ScanScheduleFire(r Scanner) (ScheduleFire, error) {
	var (
		f           ScheduleFire
		tick, fired int64
		status      string
	)
	if err := r.Scan(&f.ScheduleID, &tick, &fired, &f.Replica, &status, &f.Missed, &f.RunID, &f.ThreadID, &f.Reason); err != nil {
		return ScheduleFire{}, err
	}
	f.Tick, f.FiredAt, f.Status = FromNanos(tick), FromNanos(fired), FireStatus(status)
	return f, nil
}

// SchedulePage cuts a schedule listing of one more than size (newest
// first) into a page and the next page's token.
func SchedulePage(list []Schedule, size int) ([]Schedule, string) {
	return cutPage(list, size, func(s Schedule) (int64, string) { return Nanos(s.Created), s.ID })
}

// ScheduleFirePage cuts a listing of one more than size of scheduleID's
// fires (newest tick first) into a page and the next page's token.
func ScheduleFirePage(list []ScheduleFire, size int, scheduleID string) ([]ScheduleFire, string) {
	return cutPage(list, size, func(f ScheduleFire) (int64, string) { return Nanos(f.Tick), scheduleID })
}
