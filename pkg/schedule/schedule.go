package schedule

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// MinInterval is the shortest interval a schedule may have, and
// MaxInterval the longest.
const (
	MinInterval = time.Second
	MaxInterval = 366 * 24 * time.Hour
)

// MaxLookBack bounds how far back Plan walks missed ticks: a schedule
// that was due longer ago than this is planned as if it had been due
// MaxLookBack ago (the ticks before are missed either way), so that a
// long downtime costs a bounded amount of work.
const MaxLookBack = 48 * time.Hour

// CatchUp is what a schedule does with ticks it missed (agentd was down,
// or every replica was busy) when it is found due.
type CatchUp string

// The catch-up policies.
const (
	// FireOnce (the default): the missed ticks fold into one fire, now,
	// for the latest of them; then the schedule goes on from the next
	// tick after now.
	FireOnce CatchUp = "fire_once"
	// Skip: a tick fires only while it is at most Grace late; the latest
	// missed tick, when later, is recorded as skipped and the schedule
	// goes on from the next tick after now.
	Skip CatchUp = "skip"
)

// Grace is how late a tick may fire under Skip.
const Grace = time.Minute

// Errors of Parse. Each names what is wrong; FieldError says which field.
var (
	// ErrInvalid wraps every error of Parse.
	ErrInvalid = errors.New("invalid schedule")
)

// FieldError is a bad field of a schedule's timing.
type FieldError struct {
	// Field is the request field: "cron", "time_zone", "interval" or
	// "catch_up".
	Field string
	// Msg says what is wrong.
	Msg string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

// Is matches ErrInvalid.
func (e *FieldError) Is(target error) bool { return target == ErrInvalid }

// Spec is a parsed schedule timing: either a cron expression in a time
// zone or a fixed interval.
type Spec struct {
	cron     cron.Schedule
	loc      *time.Location
	interval time.Duration
	// Cron, TimeZone and Interval are the fields it was parsed from.
	Cron     string
	TimeZone string
	Interval time.Duration
}

// parser is the standard five-field cron parser (minute, hour, day of
// month, month, day of week) with descriptors such as @daily; time zones
// come from the time_zone field, not a CRON_TZ= prefix.
var parser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Parse validates a schedule's timing: exactly one of expr (five cron
// fields or a descriptor like @hourly; no CRON_TZ= prefix, the zone is
// tz) and interval (MinInterval to MaxInterval, whole seconds). tz is an
// IANA zone name ("" = UTC) and only goes with expr. Errors are
// *FieldError.
func Parse(expr, tz string, interval time.Duration) (Spec, error) {
	expr = strings.TrimSpace(expr)
	switch {
	case expr == "" && interval == 0:
		return Spec{}, &FieldError{"cron", "give a cron expression or an interval"}
	case expr != "" && interval != 0:
		return Spec{}, &FieldError{"interval", "give a cron expression or an interval, not both"}
	case interval != 0:
		if tz != "" {
			return Spec{}, &FieldError{"time_zone", "a time zone only goes with a cron expression"}
		}
		if interval < MinInterval || interval > MaxInterval {
			return Spec{}, &FieldError{"interval", fmt.Sprintf("interval %s is out of range: want %s to %s", interval, MinInterval, MaxInterval)}
		}
		if interval%time.Second != 0 {
			return Spec{}, &FieldError{"interval", fmt.Sprintf("interval %s is not a whole number of seconds", interval)}
		}
		return Spec{interval: interval, Interval: interval}, nil
	}
	if strings.HasPrefix(expr, "CRON_TZ=") || strings.HasPrefix(expr, "TZ=") {
		return Spec{}, &FieldError{"cron", "give the time zone in time_zone, not in the expression"}
	}
	if strings.HasPrefix(expr, "@every") {
		return Spec{}, &FieldError{"cron", "use interval instead of @every"}
	}
	loc := time.UTC
	if tz != "" {
		l, err := time.LoadLocation(tz)
		if err != nil || tz == "Local" {
			return Spec{}, &FieldError{"time_zone", fmt.Sprintf("unknown time zone %q: want an IANA name such as Europe/Paris", tz)}
		}
		loc = l
	}
	s, err := parser.Parse(expr)
	if err != nil {
		return Spec{}, &FieldError{"cron", fmt.Sprintf("cron expression %q: %v", expr, err)}
	}
	// An expression that never matches (February 30th) has no next tick.
	if s.Next(time.Date(2000, 1, 1, 0, 0, 0, 0, loc)).IsZero() {
		return Spec{}, &FieldError{"cron", fmt.Sprintf("cron expression %q never fires", expr)}
	}
	return Spec{cron: s, loc: loc, Cron: expr, TimeZone: tz}, nil
}

// ParseCatchUp validates a catch-up policy ("" = FireOnce).
func ParseCatchUp(s string) (CatchUp, error) {
	switch CatchUp(s) {
	case "", FireOnce:
		return FireOnce, nil
	case Skip:
		return Skip, nil
	}
	return "", &FieldError{"catch_up", fmt.Sprintf("unknown catch-up policy %q: want %s or %s", s, FireOnce, Skip)}
}

// Next is the first tick strictly after t (in UTC). An interval schedule
// ticks every Interval after the schedule's anchor; Next of an interval
// is t+Interval, the anchor being the previous tick. A cron schedule
// ticks at the wall-clock times its expression matches in its zone: a
// time skipped by a daylight-saving jump does not fire, one repeated by
// it fires once.
func (s Spec) Next(t time.Time) time.Time {
	if s.interval > 0 {
		return t.Add(s.interval).UTC()
	}
	local := t.In(s.loc)
	n := s.cron.Next(local)
	// robfig/cron fires a wall-clock time twice when a fall-back repeats
	// it; the second one has the wall clock of the first.
	if !n.IsZero() && sameWallMinute(n.In(s.loc), local) {
		n = s.cron.Next(n)
	}
	return n.UTC()
}

func sameWallMinute(a, b time.Time) bool {
	ay, am, ad := a.Date()
	by, bm, bd := b.Date()
	return ay == by && am == bm && ad == bd && a.Hour() == b.Hour() && a.Minute() == b.Minute()
}

// Plan is the decision for a schedule found due.
type Plan struct {
	// Tick is the tick the fire is for: the latest tick at or before now
	// (the stored due time when no later one passed).
	Tick time.Time
	// Fire is false when the tick is skipped (Skip, too late).
	Fire bool
	// Missed counts the ticks folded into this one (0 when it was on
	// time; a lower bound when it was due more than MaxLookBack ago).
	Missed int
	// Next is the schedule's next fire time: the first tick after now.
	Next time.Time
}

// Plan decides what a schedule whose next fire time due has passed (due
// <= now) does at now under policy. Interval ticks stay on the grid
// anchored at due; cron ticks on the expression's.
func (s Spec) Plan(due, now time.Time, policy CatchUp) Plan {
	tick, missed := due, 0
	if floor := now.Add(-MaxLookBack); tick.Before(floor) {
		// Far behind: count from the floor (the ticks before it are
		// missed either way).
		if s.interval > 0 {
			n := floor.Sub(tick) / s.interval
			tick = tick.Add(n * s.interval)
		} else {
			tick = s.Next(floor)
		}
		missed = 1
	}
	if s.interval > 0 {
		if n := now.Sub(tick) / s.interval; n > 0 {
			tick, missed = tick.Add(n*s.interval), missed+int(n)
		}
	} else {
		for next := s.Next(tick); !next.After(now) && !next.IsZero(); next = s.Next(tick) {
			tick, missed = next, missed+1
		}
	}
	p := Plan{Tick: tick.UTC(), Missed: missed, Next: s.Next(tick)}
	if !p.Next.After(now) { // tick was at or before now by construction
		p.Next = s.Next(now)
	}
	p.Fire = policy != Skip || now.Sub(tick) <= Grace
	return p
}
