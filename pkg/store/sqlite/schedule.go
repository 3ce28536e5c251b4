package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/plumbhq/plumb/pkg/store"
)

var _ store.Schedules = (*Store)(nil)

// CreateSchedule implements store.Schedules.
func (s *Store) CreateSchedule(ctx context.Context, sc store.Schedule) error {
	run, err := store.JSON(sc.Run)
	if err != nil {
		return err
	}
	_, err = s.db.ExecContext(ctx, `INSERT INTO schedules (id, tenant, cron, time_zone, interval_ns, catch_up, paused, run, next_fire, created_at, updated_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		sc.ID, sc.Tenant, sc.Cron, sc.TimeZone, int64(sc.Interval), sc.CatchUp, sc.Paused, run, store.OptNanos(sc.NextFire),
		store.Nanos(sc.Created), store.Nanos(sc.Updated))
	return classify(err)
}

// Schedule implements store.Schedules.
func (s *Store) Schedule(ctx context.Context, id string) (store.Schedule, error) {
	sc, err := store.ScanSchedule(s.db.QueryRowContext(ctx, `SELECT `+store.ScheduleColumns+` FROM schedules WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return store.Schedule{}, fmt.Errorf("schedule %s: %w", id, store.ErrScheduleNotFound)
	}
	return sc, classify(err)
}

// ListSchedules implements store.Schedules.
func (s *Store) ListSchedules(ctx context.Context, q store.ScheduleQuery) ([]store.Schedule, string, error) {
	size := store.PageSize(q.PageSize)
	where, args := `tenant = ?`, []any{q.Tenant}
	if q.PageToken != "" {
		created, id, err := store.DecodePageToken(q.PageToken)
		if err != nil {
			return nil, "", err
		}
		where += ` AND (created_at < ? OR (created_at = ? AND id < ?))`
		args = append(args, created, created, id)
	}
	rows, err := s.db.QueryContext(ctx, `SELECT `+store.ScheduleColumns+` FROM schedules WHERE `+where+` ORDER BY created_at DESC, id DESC LIMIT ?`,
		append(args, size+1)...)
	if err != nil {
		return nil, "", classify(err)
	}
	defer rows.Close()
	var out []store.Schedule
	for rows.Next() {
		sc, err := store.ScanSchedule(rows)
		if err != nil {
			return nil, "", classify(err)
		}
		out = append(out, sc)
	}
	if err := rows.Err(); err != nil {
		return nil, "", classify(err)
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
	res, err := s.db.ExecContext(ctx, `UPDATE schedules SET cron = ?, time_zone = ?, interval_ns = ?, catch_up = ?, paused = ?, run = ?,
		next_fire = ?, updated_at = ? WHERE id = ?`,
		sc.Cron, sc.TimeZone, int64(sc.Interval), sc.CatchUp, sc.Paused, run, store.OptNanos(sc.NextFire), store.Nanos(sc.Updated), sc.ID)
	if err != nil {
		return classify(err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("schedule %s: %w", sc.ID, store.ErrScheduleNotFound)
	}
	return nil
}

// DeleteSchedule implements store.Schedules.
func (s *Store) DeleteSchedule(ctx context.Context, id string) error {
	res, err := s.db.ExecContext(ctx, `DELETE FROM schedules WHERE id = ?`, id)
	if err != nil {
		return classify(err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("schedule %s: %w", id, store.ErrScheduleNotFound)
	}
	return nil
}

// DueSchedules implements store.Schedules.
func (s *Store) DueSchedules(ctx context.Context, now time.Time, limit int) ([]store.Schedule, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+store.ScheduleColumns+` FROM schedules WHERE NOT paused AND next_fire > 0 AND next_fire <= ?
		ORDER BY next_fire, id LIMIT ?`, store.Nanos(now), limit)
	if err != nil {
		return nil, classify(err)
	}
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

// ClaimFire implements store.Schedules.
func (s *Store) ClaimFire(ctx context.Context, f store.ScheduleFire, due, next time.Time) (store.Schedule, error) {
	if f.Status == "" {
		f.Status = store.FirePending
	}
	var (
		sc  store.Schedule
		dup bool
	)
	err := s.tx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE schedules SET next_fire = ?, last_fire = ? WHERE id = ? AND next_fire = ? AND NOT paused`,
			store.Nanos(next), store.Nanos(f.Tick), f.ScheduleID, store.Nanos(due))
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("schedule %s tick %s: %w", f.ScheduleID, due.Format(time.RFC3339Nano), store.ErrFireLost)
		}
		res, err = tx.ExecContext(ctx, `INSERT INTO schedule_fires (schedule_id, tick, fired_at, replica, status, missed, run_id, thread_id, reason)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`,
			f.ScheduleID, store.Nanos(f.Tick), store.Nanos(f.FiredAt), f.Replica, string(f.Status), f.Missed, f.RunID, f.ThreadID, f.Reason)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			// Fired before (a resume on a replica whose clock is behind
			// can put next_fire back on a fired tick): the schedule moves
			// on, the tick does not fire again.
			dup = true
			return nil
		}
		sc, err = store.ScanSchedule(tx.QueryRowContext(ctx, `SELECT `+store.ScheduleColumns+` FROM schedules WHERE id = ?`, f.ScheduleID))
		return err
	})
	if err == nil && dup {
		return store.Schedule{}, fmt.Errorf("schedule %s tick %s fired before: %w", f.ScheduleID, f.Tick.Format(time.RFC3339Nano), store.ErrFireLost)
	}
	return sc, err
}

// FinishFire implements store.Schedules.
func (s *Store) FinishFire(ctx context.Context, f store.ScheduleFire) error {
	return s.tx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `UPDATE schedule_fires SET status = ?, run_id = ?, thread_id = ?, reason = ? WHERE schedule_id = ? AND tick = ?`,
			string(f.Status), f.RunID, f.ThreadID, f.Reason, f.ScheduleID, store.Nanos(f.Tick)); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `UPDATE schedules SET last_run_id = ?, last_thread_id = ?, last_error = ? WHERE id = ? AND last_fire = ?`,
			f.RunID, f.ThreadID, f.Reason, f.ScheduleID, store.Nanos(f.Tick))
		return err
	})
}

// FailPendingFires implements store.Schedules.
func (s *Store) FailPendingFires(ctx context.Context, before time.Time, reason string) (int, error) {
	res, err := s.db.ExecContext(ctx, `UPDATE schedule_fires SET status = ?, reason = ? WHERE status = ? AND fired_at < ?`,
		string(store.FireFailed), reason, string(store.FirePending), store.Nanos(before))
	if err != nil {
		return 0, classify(err)
	}
	n, _ := res.RowsAffected()
	return int(n), nil
}

// ListScheduleFires implements store.Schedules.
func (s *Store) ListScheduleFires(ctx context.Context, scheduleID string, pageSize int, pageToken string) ([]store.ScheduleFire, string, error) {
	size := store.PageSize(pageSize)
	where, args := `schedule_id = ?`, []any{scheduleID}
	if pageToken != "" {
		tick, id, err := store.DecodePageToken(pageToken)
		if err != nil || id != scheduleID {
			return nil, "", store.ErrBadPageToken
		}
		where += ` AND tick < ?`
		args = append(args, tick)
	}
	rows, err := s.db.QueryContext(ctx, `SELECT `+store.ScheduleFireColumns+`
		FROM schedule_fires WHERE `+where+` ORDER BY tick DESC LIMIT ?`, append(args, size+1)...)
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
