package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/plumbhq/plumb/pkg/store"
)

var _ store.Schedules = (*Store)(nil)

// CreateSchedule implements store.Schedules.
func (s *Store) CreateSchedule(ctx context.Context, sc store.Schedule) error {
	run, err := store.JSON(sc.Run)
	if err != nil {
		return err
	}
	_, err = s.pool.Exec(ctx, `INSERT INTO schedules (id, tenant, cron, time_zone, interval_ns, catch_up, paused, run, next_fire, created_at, updated_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`,
		sc.ID, sc.Tenant, sc.Cron, sc.TimeZone, int64(sc.Interval), sc.CatchUp, sc.Paused, run, store.OptNanos(sc.NextFire),
		store.Nanos(sc.Created), store.Nanos(sc.Updated))
	return classify(err)
}

// Schedule implements store.Schedules.
func (s *Store) Schedule(ctx context.Context, id string) (store.Schedule, error) {
	sc, err := store.ScanSchedule(s.pool.QueryRow(ctx, `SELECT `+store.ScheduleColumns+` FROM schedules WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return store.Schedule{}, fmt.Errorf("schedule %s: %w", id, store.ErrScheduleNotFound)
	}
	return sc, classify(err)
}

func collectSchedules(rows pgx.Rows) ([]store.Schedule, error) {
	defer rows.Close()
	var out []store.Schedule
	for rows.Next() {
		sc, err := store.ScanSchedule(rows)
		if err != nil {
			return nil, classify(err)
		}
		out = append(out, sc)
	}
	return out, classify(rows.Err())
}

// ListSchedules implements store.Schedules.
func (s *Store) ListSchedules(ctx context.Context, q store.ScheduleQuery) ([]store.Schedule, string, error) {
	size := store.PageSize(q.PageSize)
	where, args := `tenant = $1`, []any{q.Tenant}
	if q.PageToken != "" {
		created, id, err := store.DecodePageToken(q.PageToken)
		if err != nil {
			return nil, "", err
		}
		where += ` AND (created_at, id) < ($2, $3)`
		args = append(args, created, id)
	}
	rows, err := s.pool.Query(ctx, fmt.Sprintf(`SELECT `+store.ScheduleColumns+` FROM schedules WHERE %s ORDER BY created_at DESC, id DESC LIMIT $%d`, where, len(args)+1),
		append(args, size+1)...)
	if err != nil {
		return nil, "", classify(err)
	}
	out, err := collectSchedules(rows)
	if err != nil {
		return nil, "", err
	}
	page, next := store.SchedulePage(out, size)
	return page, next, nil
}

// UpdateSchedule implements store.Schedules.
func (s *Store) UpdateSchedule(ctx context.Context, sc store.Schedule) error {
	run, err := store.JSON(sc.Run)
	if err != nil {
		return err
	}
	tag, err := s.pool.Exec(ctx, `UPDATE schedules SET cron = $1, time_zone = $2, interval_ns = $3, catch_up = $4, paused = $5, run = $6,
		next_fire = $7, updated_at = $8 WHERE id = $9`,
		sc.Cron, sc.TimeZone, int64(sc.Interval), sc.CatchUp, sc.Paused, run, store.OptNanos(sc.NextFire), store.Nanos(sc.Updated), sc.ID)
	if err != nil {
		return classify(err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("schedule %s: %w", sc.ID, store.ErrScheduleNotFound)
	}
	return nil
}

// DeleteSchedule implements store.Schedules.
func (s *Store) DeleteSchedule(ctx context.Context, id string) error {
	tag, err := s.pool.Exec(ctx, `DELETE FROM schedules WHERE id = $1`, id)
	if err != nil {
		return classify(err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("schedule %s: %w", id, store.ErrScheduleNotFound)
	}
	return nil
}

// DueSchedules implements store.Schedules.
func (s *Store) DueSchedules(ctx context.Context, now time.Time, limit int) ([]store.Schedule, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+store.ScheduleColumns+` FROM schedules WHERE NOT paused AND next_fire > 0 AND next_fire <= $1
		ORDER BY next_fire, id LIMIT $2`, store.Nanos(now), limit)
	if err != nil {
		return nil, classify(err)
	}
	return collectSchedules(rows)
}

// ClaimFire implements store.Schedules. The compare-and-set on next_fire
// is one UPDATE: of two replicas claiming the same tick, the second waits
// for the first's row lock, re-reads the row, no longer matches and
// claims nothing.
func (s *Store) ClaimFire(ctx context.Context, f store.ScheduleFire, due, next time.Time) (store.Schedule, error) {
	if f.Status == "" {
		f.Status = store.FirePending
	}
	var (
		sc  store.Schedule
		dup bool
	)
	err := s.tx(ctx, func(tx pgx.Tx) error {
		var err error
		sc, err = store.ScanSchedule(tx.QueryRow(ctx, `UPDATE schedules SET next_fire = $1, last_fire = $2 WHERE id = $3 AND next_fire = $4 AND NOT paused
			RETURNING `+store.ScheduleColumns, store.Nanos(next), store.Nanos(f.Tick), f.ScheduleID, store.Nanos(due)))
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("schedule %s tick %s: %w", f.ScheduleID, due.Format(time.RFC3339Nano), store.ErrFireLost)
		}
		if err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `INSERT INTO schedule_fires (schedule_id, tick, fired_at, replica, status, missed, run_id, thread_id, reason)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT DO NOTHING`,
			f.ScheduleID, store.Nanos(f.Tick), store.Nanos(f.FiredAt), f.Replica, string(f.Status), f.Missed, f.RunID, f.ThreadID, f.Reason)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			// Fired before (a resume on a replica whose clock is behind
			// can put next_fire back on a fired tick): the schedule moves
			// on, the tick does not fire again.
			dup = true
		}
		return nil
	})
	if err == nil && dup {
		return store.Schedule{}, fmt.Errorf("schedule %s tick %s fired before: %w", f.ScheduleID, f.Tick.Format(time.RFC3339Nano), store.ErrFireLost)
	}
	return sc, err
}

// FinishFire implements store.Schedules.
func (s *Store) FinishFire(ctx context.Context, f store.ScheduleFire) error {
	return s.tx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE schedule_fires SET status = $1, run_id = $2, thread_id = $3, reason = $4 WHERE schedule_id = $5 AND tick = $6`,
			string(f.Status), f.RunID, f.ThreadID, f.Reason, f.ScheduleID, store.Nanos(f.Tick)); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `UPDATE schedules SET last_run_id = $1, last_thread_id = $2, last_error = $3 WHERE id = $4 AND last_fire = $5`,
			f.RunID, f.ThreadID, f.Reason, f.ScheduleID, store.Nanos(f.Tick))
		return err
	})
}

// FailPendingFires implements store.Schedules.
func (s *Store) FailPendingFires(ctx context.Context, before time.Time, reason string) (int, error) {
	tag, err := s.pool.Exec(ctx, `UPDATE schedule_fires SET status = $1, reason = $2 WHERE status = $3 AND fired_at < $4`,
		string(store.FireFailed), reason, string(store.FirePending), store.Nanos(before))
	if err != nil {
		return 0, classify(err)
	}
	return int(tag.RowsAffected()), nil
}

// ListScheduleFires implements store.Schedules.
func (s *Store) ListScheduleFires(ctx context.Context, scheduleID string, pageSize int, pageToken string) ([]store.ScheduleFire, string, error) {
	size := store.PageSize(pageSize)
	where, args := `schedule_id = $1`, []any{scheduleID}
	if pageToken != "" {
		tick, id, err := store.DecodePageToken(pageToken)
		if err != nil || id != scheduleID {
			return nil, "", store.ErrBadPageToken
		}
		where += ` AND tick < $2`
		args = append(args, tick)
	}
	rows, err := s.pool.Query(ctx, fmt.Sprintf(`SELECT `+store.ScheduleFireColumns+`
		FROM schedule_fires WHERE %s ORDER BY tick DESC LIMIT $%d`, where, len(args)+1), append(args, size+1)...)
	if err != nil {
		return nil, "", classify(err)
	}
	defer rows.Close()
	var out []store.ScheduleFire
	for rows.Next() {
		f, err := store.ScanScheduleFire(rows)
		if err != nil {
			return nil, "", classify(err)
		}
		out = append(out, f)
	}
	if err := rows.Err(); err != nil {
		return nil, "", classify(err)
	}
	page, next := store.ScheduleFirePage(out, size, scheduleID)
	return page, next, nil
}
