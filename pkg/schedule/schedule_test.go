package schedule

import (
	"errors"
	"testing"
	"time"
)

func TestParseRejects(t *testing.T) {
	cases := []struct {
		name, expr, tz string
		interval       time.Duration
		field          string
	}{
		{"nothing", "", "", 0, "cron"},
		{"both", "* * * * *", "", time.Minute, "interval"},
		{"interval too short", "", "", 500 * time.Millisecond, "interval"},
		{"interval negative", "", "", -time.Second, "interval"},
		{"interval too long", "", "", 400 * 24 * time.Hour, "interval"},
		{"interval fraction", "", "", 1500 * time.Millisecond, "interval"},
		{"zone with interval", "", "UTC", time.Minute, "time_zone"},
		{"bad zone", "0 9 * * *", "Mars/Olympus", 0, "time_zone"},
		{"local zone", "0 9 * * *", "Local", 0, "time_zone"},
		{"garbage", "every day", "", 0, "cron"},
		{"six fields", "0 0 9 * * *", "", 0, "cron"},
		{"out of range", "61 * * * *", "", 0, "cron"},
		{"CRON_TZ prefix", "CRON_TZ=Europe/Paris 0 9 * * *", "", 0, "cron"},
		{"every", "@every 1m", "", 0, "cron"},
		{"never", "0 0 30 2 *", "", 0, "cron"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(tc.expr, tc.tz, tc.interval)
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field || !errors.Is(err, ErrInvalid) {
				t.Fatalf("Parse(%q, %q, %s) = %v; want a FieldError on %s", tc.expr, tc.tz, tc.interval, err, tc.field)
			}
		})
	}
}

func TestParseCatchUp(t *testing.T) {
	for in, want := range map[string]CatchUp{"": FireOnce, "fire_once": FireOnce, "skip": Skip} {
		if got, err := ParseCatchUp(in); err != nil || got != want {
			t.Errorf("ParseCatchUp(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := ParseCatchUp("all"); err == nil {
		t.Error("ParseCatchUp(all) passed")
	}
}

func mustParse(t *testing.T, expr, tz string, interval time.Duration) Spec {
	t.Helper()
	s, err := Parse(expr, tz, interval)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func at(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return v.UTC()
}

func TestNext(t *testing.T) {
	cases := []struct {
		name, expr, tz string
		interval       time.Duration
		from, want     string
	}{
		{"interval", "", "", 90 * time.Second, "2026-03-01T10:00:00Z", "2026-03-01T10:01:30Z"},
		{"utc daily", "0 9 * * *", "", 0, "2026-03-01T10:00:00Z", "2026-03-02T09:00:00Z"},
		{"descriptor", "@hourly", "", 0, "2026-03-01T10:20:00Z", "2026-03-01T11:00:00Z"},
		{"zone", "0 9 * * *", "America/New_York", 0, "2026-01-10T00:00:00Z", "2026-01-10T14:00:00Z"},
		// 2026-03-08 02:30 does not exist in New York (clocks jump from
		// 02:00 to 03:00): that day does not fire, the next one does.
		{"spring forward skips", "30 2 * * *", "America/New_York", 0, "2026-03-08T05:00:00Z", "2026-03-09T06:30:00Z"},
		// 9:00 is 14:00 UTC before the jump and 13:00 UTC after it.
		{"after spring forward", "0 9 * * *", "America/New_York", 0, "2026-03-08T00:00:00Z", "2026-03-08T13:00:00Z"},
		// 2026-11-01 01:30 happens twice in New York; it fires once.
		{"fall back once", "30 1 * * *", "America/New_York", 0, "2026-11-01T05:00:00Z", "2026-11-01T05:30:00Z"},
		{"fall back next day", "30 1 * * *", "America/New_York", 0, "2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"},
		// An hourly minute fires once in the repeated hour; a sub-hour
		// expression keeps firing through it.
		{"hourly fall back", "30 * * * *", "America/New_York", 0, "2026-11-01T05:30:00Z", "2026-11-01T07:30:00Z"},
		{"half-hourly fall back", "*/30 * * * *", "America/New_York", 0, "2026-11-01T05:30:00Z", "2026-11-01T06:00:00Z"},
		{"paris summer", "0 8 * * 1", "Europe/Paris", 0, "2026-06-30T00:00:00Z", "2026-07-06T06:00:00Z"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := mustParse(t, tc.expr, tc.tz, tc.interval)
			if got := s.Next(at(t, tc.from)); !got.Equal(at(t, tc.want)) {
				t.Fatalf("Next(%s) = %s; want %s", tc.from, got, tc.want)
			}
		})
	}
}

func TestPlan(t *testing.T) {
	cases := []struct {
		name, expr string
		interval   time.Duration
		policy     CatchUp
		due, now   string
		want       Plan
	}{
		{"on time", "", 10 * time.Second, FireOnce, "2026-03-01T10:00:00Z", "2026-03-01T10:00:01Z",
			Plan{Tick: at(t, "2026-03-01T10:00:00Z"), Fire: true, Next: at(t, "2026-03-01T10:00:10Z")}},
		{"interval downtime once", "", 10 * time.Second, FireOnce, "2026-03-01T10:00:00Z", "2026-03-01T10:00:35Z",
			Plan{Tick: at(t, "2026-03-01T10:00:30Z"), Fire: true, Missed: 3, Next: at(t, "2026-03-01T10:00:40Z")}},
		{"interval downtime skip within grace", "", 10 * time.Second, Skip, "2026-03-01T10:00:00Z", "2026-03-01T10:00:35Z",
			Plan{Tick: at(t, "2026-03-01T10:00:30Z"), Fire: true, Missed: 3, Next: at(t, "2026-03-01T10:00:40Z")}},
		{"cron downtime once", "0 * * * *", 0, FireOnce, "2026-03-01T10:00:00Z", "2026-03-01T13:30:00Z",
			Plan{Tick: at(t, "2026-03-01T13:00:00Z"), Fire: true, Missed: 3, Next: at(t, "2026-03-01T14:00:00Z")}},
		{"cron downtime skip", "0 * * * *", 0, Skip, "2026-03-01T10:00:00Z", "2026-03-01T13:30:00Z",
			Plan{Tick: at(t, "2026-03-01T13:00:00Z"), Fire: false, Missed: 3, Next: at(t, "2026-03-01T14:00:00Z")}},
		{"cron late within grace", "0 * * * *", 0, Skip, "2026-03-01T10:00:00Z", "2026-03-01T10:00:45Z",
			Plan{Tick: at(t, "2026-03-01T10:00:00Z"), Fire: true, Next: at(t, "2026-03-01T11:00:00Z")}},
		{"a year down", "*/5 * * * *", 0, FireOnce, "2025-03-01T10:00:00Z", "2026-03-01T10:02:00Z",
			Plan{Tick: at(t, "2026-03-01T10:00:00Z"), Fire: true, Missed: 48 * 12, Next: at(t, "2026-03-01T10:05:00Z")}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := mustParse(t, tc.expr, "", tc.interval)
			got := s.Plan(at(t, tc.due), at(t, tc.now), tc.policy)
			if !got.Tick.Equal(tc.want.Tick) || got.Fire != tc.want.Fire || got.Missed != tc.want.Missed || !got.Next.Equal(tc.want.Next) {
				t.Fatalf("Plan = %+v; want %+v", got, tc.want)
			}
		})
	}
}
