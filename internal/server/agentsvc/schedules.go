package agentsvc

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/runhost/runs"
	"github.com/plumbhq/plumb/internal/scheduler"
	"github.com/plumbhq/plumb/internal/tenant"
	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/schedule"
	"github.com/plumbhq/plumb/pkg/store"
)

// ErrSchedulesOff: agentd keeps no schedules (its store has none).
var ErrSchedulesOff = errors.New("schedules are not available on this agentd")

// scheduleFields is a Create or Update request's schedule, as the
// adapter validates it.
type scheduleFields struct {
	cron, timeZone string
	interval       *durationpb.Duration
	catchUp        plumbv1.ScheduleCatchUp
	run            *plumbv1.RunRequest
	paused         bool
}

// scheduleRecord validates f (every bad field at once, as
// INVALID_ARGUMENT) and returns the record's timing, policy and run, with
// its next fire after now.
func (s *Service) scheduleRecord(f scheduleFields, now time.Time) (store.Schedule, error) {
	var vs violations
	var interval time.Duration
	if d := f.interval; d != nil {
		if err := d.CheckValid(); err != nil {
			vs.add("interval", "interval: %v", err)
		} else if interval = d.AsDuration(); interval == 0 {
			vs.add("interval", "interval must be positive")
		}
	}
	sc := store.Schedule{Cron: strings.TrimSpace(f.cron), TimeZone: f.timeZone, Interval: interval, Paused: f.paused}
	spec, err := schedule.Parse(f.cron, f.timeZone, interval)
	var fe *schedule.FieldError
	switch {
	case errors.As(err, &fe):
		if len(vs) == 0 {
			vs.add(fe.Field, "%s", fe.Msg)
		}
	case err != nil:
		vs.add("cron", "%v", err)
	}
	switch f.catchUp {
	case plumbv1.ScheduleCatchUp_SCHEDULE_CATCH_UP_UNSPECIFIED, plumbv1.ScheduleCatchUp_SCHEDULE_CATCH_UP_FIRE_ONCE:
		sc.CatchUp = string(schedule.FireOnce)
	case plumbv1.ScheduleCatchUp_SCHEDULE_CATCH_UP_SKIP:
		sc.CatchUp = string(schedule.Skip)
	default:
		vs.add("catch_up", "unknown catch_up %d", f.catchUp)
	}
	if f.run == nil {
		vs.add("run", "run is required: the run each tick starts, with its input")
	} else {
		in, err := s.runInput(f.run)
		var re *RequestError
		if errors.As(err, &re) {
			for _, v := range re.Violations {
				vs.add("run."+v.Field, "%s", v.Description)
			}
		}
		if len(f.run.GetFiles()) > 0 {
			vs.add("run.files", "a schedule does not carry files; put them in the thread's workspace or store")
		}
		if len(f.run.GetClientTools()) > 0 {
			vs.add("run.client_tools", "a scheduled run has no client to answer client tools")
		}
		if f.run.GetDetach() {
			vs.add("run.detach", "scheduled runs are always detached; leave detach unset")
		}
		sc.Run = store.ScheduleRun{
			ThreadID: in.ThreadID, Agent: in.Spec.Agent, Model: in.Spec.Model, Input: in.Input, Metadata: in.Metadata,
			MaxIterations: in.Spec.MaxIterations, Timeout: in.Spec.Timeout, AbandonInterrupt: in.AbandonInterrupt,
		}
	}
	if err := vs.err(); err != nil {
		return store.Schedule{}, err
	}
	if !sc.Paused {
		sc.NextFire = spec.Next(now)
	}
	return sc, nil
}

// ownSchedule loads schedule id for the caller's tenant: another tenant's
// is store.ErrScheduleNotFound.
func (s *Service) ownSchedule(ctx context.Context, id string) (store.Schedule, error) {
	if id == "" {
		return store.Schedule{}, InvalidField("schedule_id", "schedule_id is required")
	}
	if s.cfg.Schedules == nil {
		return store.Schedule{}, ErrSchedulesOff
	}
	sc, err := s.cfg.Schedules.Schedule(ctx, id)
	if err != nil {
		return store.Schedule{}, err
	}
	if tenant.Norm(sc.Tenant) != tenant.From(ctx) {
		return store.Schedule{}, fmt.Errorf("schedule %s: %w", id, store.ErrScheduleNotFound)
	}
	return sc, nil
}

// CreateSchedule implements plumbv1.AgentServiceServer.
func (s *Service) CreateSchedule(ctx context.Context, req *plumbv1.CreateScheduleRequest) (*plumbv1.CreateScheduleResponse, error) {
	now := s.now()
	sc, err := s.scheduleRecord(scheduleFields{req.GetCron(), req.GetTimeZone(), req.GetInterval(), req.GetCatchUp(), req.GetRun(), req.GetPaused()}, now)
	if err != nil {
		return nil, Status(err)
	}
	if s.cfg.Schedules == nil {
		return nil, Status(ErrSchedulesOff)
	}
	if sc.Run.ThreadID != "" {
		if err := s.checkOwner(ctx, sc.Run.ThreadID); err != nil {
			return nil, s.status("create schedule", err)
		}
	}
	sc.ID, sc.Tenant, sc.Created, sc.Updated = "sch-"+strings.ToLower(ulid.Make().String()), tenant.From(ctx), now, now
	if err := s.cfg.Schedules.CreateSchedule(ctx, sc); err != nil {
		return nil, s.status("create schedule", err)
	}
	return &plumbv1.CreateScheduleResponse{Schedule: scheduleToPB(sc)}, nil
}

// GetSchedule implements plumbv1.AgentServiceServer.
func (s *Service) GetSchedule(ctx context.Context, req *plumbv1.GetScheduleRequest) (*plumbv1.GetScheduleResponse, error) {
	sc, err := s.ownSchedule(ctx, req.GetScheduleId())
	if err != nil {
		return nil, s.status("get schedule", err)
	}
	return &plumbv1.GetScheduleResponse{Schedule: scheduleToPB(sc)}, nil
}

// ListSchedules implements plumbv1.AgentServiceServer.
func (s *Service) ListSchedules(ctx context.Context, req *plumbv1.ListSchedulesRequest) (*plumbv1.ListSchedulesResponse, error) {
	if req.GetPageSize() < 0 {
		return nil, Status(InvalidField("page_size", "page_size must not be negative"))
	}
	if s.cfg.Schedules == nil {
		return nil, Status(ErrSchedulesOff)
	}
	list, next, err := s.cfg.Schedules.ListSchedules(ctx, store.ScheduleQuery{Tenant: tenant.From(ctx), PageSize: int(req.GetPageSize()), PageToken: req.GetPageToken()})
	if errors.Is(err, store.ErrBadPageToken) {
		return nil, Status(InvalidField("page_token", "page_token %q was not issued by ListSchedules", req.GetPageToken()))
	}
	if err != nil {
		return nil, s.status("list schedules", err)
	}
	out := &plumbv1.ListSchedulesResponse{NextPageToken: next}
	for _, sc := range list {
		out.Schedules = append(out.Schedules, scheduleToPB(sc))
	}
	return out, nil
}

// UpdateSchedule implements plumbv1.AgentServiceServer: a full replace
// of the timing, policy, run and pause; the next fire is computed again
// from now, so a claim of the old one in flight on a replica loses.
func (s *Service) UpdateSchedule(ctx context.Context, req *plumbv1.UpdateScheduleRequest) (*plumbv1.UpdateScheduleResponse, error) {
	now := s.now()
	upd, err := s.scheduleRecord(scheduleFields{req.GetCron(), req.GetTimeZone(), req.GetInterval(), req.GetCatchUp(), req.GetRun(), req.GetPaused()}, now)
	if err != nil {
		return nil, Status(err)
	}
	sc, err := s.ownSchedule(ctx, req.GetScheduleId())
	if err != nil {
		return nil, s.status("update schedule", err)
	}
	if upd.Run.ThreadID != "" {
		if err := s.checkOwner(ctx, upd.Run.ThreadID); err != nil {
			return nil, s.status("update schedule", err)
		}
	}
	sc.Cron, sc.TimeZone, sc.Interval, sc.CatchUp, sc.Run, sc.Paused, sc.NextFire, sc.Updated =
		upd.Cron, upd.TimeZone, upd.Interval, upd.CatchUp, upd.Run, upd.Paused, upd.NextFire, now
	if err := s.cfg.Schedules.UpdateSchedule(ctx, sc); err != nil {
		return nil, s.status("update schedule", err)
	}
	return &plumbv1.UpdateScheduleResponse{Schedule: scheduleToPB(sc)}, nil
}

// DeleteSchedule implements plumbv1.AgentServiceServer.
func (s *Service) DeleteSchedule(ctx context.Context, req *plumbv1.DeleteScheduleRequest) (*plumbv1.DeleteScheduleResponse, error) {
	if _, err := s.ownSchedule(ctx, req.GetScheduleId()); err != nil {
		return nil, s.status("delete schedule", err)
	}
	if err := s.cfg.Schedules.DeleteSchedule(ctx, req.GetScheduleId()); err != nil {
		return nil, s.status("delete schedule", err)
	}
	return &plumbv1.DeleteScheduleResponse{}, nil
}

// PauseSchedule implements plumbv1.AgentServiceServer.
func (s *Service) PauseSchedule(ctx context.Context, req *plumbv1.PauseScheduleRequest) (*plumbv1.PauseScheduleResponse, error) {
	sc, err := s.setPaused(ctx, req.GetScheduleId(), true)
	if err != nil {
		return nil, s.status("pause schedule", err)
	}
	return &plumbv1.PauseScheduleResponse{Schedule: scheduleToPB(sc)}, nil
}

// ResumeSchedule implements plumbv1.AgentServiceServer.
func (s *Service) ResumeSchedule(ctx context.Context, req *plumbv1.ResumeScheduleRequest) (*plumbv1.ResumeScheduleResponse, error) {
	sc, err := s.setPaused(ctx, req.GetScheduleId(), false)
	if err != nil {
		return nil, s.status("resume schedule", err)
	}
	return &plumbv1.ResumeScheduleResponse{Schedule: scheduleToPB(sc)}, nil
}

// setPaused pauses (no next fire) or resumes (next fire after now) a
// schedule; the same state again changes nothing.
func (s *Service) setPaused(ctx context.Context, id string, paused bool) (store.Schedule, error) {
	sc, err := s.ownSchedule(ctx, id)
	if err != nil || sc.Paused == paused {
		return sc, err
	}
	spec, err := schedule.Parse(sc.Cron, sc.TimeZone, sc.Interval)
	if err != nil {
		return store.Schedule{}, fmt.Errorf("schedule %s: stored timing: %w", id, err)
	}
	now := s.now()
	sc.Paused, sc.NextFire, sc.Updated = paused, time.Time{}, now
	if !paused {
		sc.NextFire = spec.Next(now)
	}
	return sc, s.cfg.Schedules.UpdateSchedule(ctx, sc)
}

// ListScheduleFires implements plumbv1.AgentServiceServer.
func (s *Service) ListScheduleFires(ctx context.Context, req *plumbv1.ListScheduleFiresRequest) (*plumbv1.ListScheduleFiresResponse, error) {
	if req.GetPageSize() < 0 {
		return nil, Status(InvalidField("page_size", "page_size must not be negative"))
	}
	if _, err := s.ownSchedule(ctx, req.GetScheduleId()); err != nil {
		return nil, s.status("list schedule fires", err)
	}
	list, next, err := s.cfg.Schedules.ListScheduleFires(ctx, req.GetScheduleId(), int(req.GetPageSize()), req.GetPageToken())
	if errors.Is(err, store.ErrBadPageToken) {
		return nil, Status(InvalidField("page_token", "page_token %q was not issued by ListScheduleFires for this schedule", req.GetPageToken()))
	}
	if err != nil {
		return nil, s.status("list schedule fires", err)
	}
	out := &plumbv1.ListScheduleFiresResponse{NextPageToken: next}
	for _, f := range list {
		out.Fires = append(out.Fires, fireToPB(f))
	}
	return out, nil
}

// startScheduled is the scheduler's Starter: sc's run, detached, as sc's
// tenant, through the run host (the path of a Run RPC with detach). A
// thread that cannot take a run now is scheduler.ErrBusy.
func (s *Service) startScheduled(ctx context.Context, sc store.Schedule) (scheduler.Started, error) {
	ctx = tenant.With(ctx, tenant.Norm(sc.Tenant))
	in := agent.RunInput{
		ThreadID: sc.Run.ThreadID, Metadata: sc.Run.Metadata, Input: sc.Run.Input, AbandonInterrupt: sc.Run.AbandonInterrupt,
		Spec: agent.RunSpec{Agent: sc.Run.Agent, Model: sc.Run.Model, MaxIterations: sc.Run.MaxIterations, Timeout: sc.Run.Timeout},
	}
	if in.ThreadID != "" {
		if err := s.checkOwner(ctx, in.ThreadID); err != nil {
			return scheduler.Started{}, err
		}
	}
	runID, threadID, err := s.host.Start(ctx, in)
	var pe *agent.PendingInterruptError
	switch {
	case errors.Is(err, agent.ErrThreadBusy), errors.Is(err, runs.ErrRunning):
		return scheduler.Started{}, fmt.Errorf("%w: %w", scheduler.ErrBusy, err)
	case errors.As(err, &pe):
		return scheduler.Started{}, fmt.Errorf("%w: %w", scheduler.ErrBusy, err)
	case err != nil:
		return scheduler.Started{}, err
	}
	return scheduler.Started{RunID: runID, ThreadID: threadID}, nil
}

func catchUpToPB(c string) plumbv1.ScheduleCatchUp {
	if c == string(schedule.Skip) {
		return plumbv1.ScheduleCatchUp_SCHEDULE_CATCH_UP_SKIP
	}
	return plumbv1.ScheduleCatchUp_SCHEDULE_CATCH_UP_FIRE_ONCE
}

func optTime(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

func scheduleToPB(sc store.Schedule) *plumbv1.Schedule {
	run := &plumbv1.RunRequest{
		ThreadId: sc.Run.ThreadID, Metadata: sc.Run.Metadata, Agent: sc.Run.Agent, Model: sc.Run.Model,
		MaxIterations:    int32(sc.Run.MaxIterations), //nolint:gosec // validated against limits.max_iterations
		AbandonInterrupt: sc.Run.AbandonInterrupt,
	}
	for _, m := range sc.Run.Input {
		run.Input = append(run.Input, &plumbv1.InputMessage{Content: m})
	}
	if sc.Run.Timeout > 0 {
		run.Timeout = durationpb.New(sc.Run.Timeout)
	}
	out := &plumbv1.Schedule{
		Id: sc.ID, Cron: sc.Cron, TimeZone: sc.TimeZone, CatchUp: catchUpToPB(sc.CatchUp), Run: run, Paused: sc.Paused,
		NextFireTime: optTime(sc.NextFire), LastFireTime: optTime(sc.LastFire),
		LastRunId: sc.LastRunID, LastThreadId: sc.LastThreadID, LastError: sc.LastError,
		CreateTime: timestamppb.New(sc.Created), UpdateTime: timestamppb.New(sc.Updated),
	}
	if sc.Interval > 0 {
		out.Interval = durationpb.New(sc.Interval)
	}
	return out
}

var fireStatusToPB = map[store.FireStatus]plumbv1.ScheduleFireStatus{
	store.FirePending: plumbv1.ScheduleFireStatus_SCHEDULE_FIRE_STATUS_PENDING,
	store.FireStarted: plumbv1.ScheduleFireStatus_SCHEDULE_FIRE_STATUS_STARTED,
	store.FireSkipped: plumbv1.ScheduleFireStatus_SCHEDULE_FIRE_STATUS_SKIPPED,
	store.FireFailed:  plumbv1.ScheduleFireStatus_SCHEDULE_FIRE_STATUS_FAILED,
}

func fireToPB(f store.ScheduleFire) *plumbv1.ScheduleFire {
	return &plumbv1.ScheduleFire{
		Tick: timestamppb.New(f.Tick), FireTime: timestamppb.New(f.FiredAt), Replica: f.Replica, Status: fireStatusToPB[f.Status],
		Missed: int32(min(f.Missed, 1<<30)), //nolint:gosec // bounded
		RunId:  f.RunID, ThreadId: f.ThreadID, Reason: f.Reason,
	}
}
