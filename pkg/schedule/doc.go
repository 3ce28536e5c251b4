// Package schedule is the pure part of agentd's schedules: it parses and
// validates a schedule's timing (a standard five-field cron expression in
// a time zone, or a fixed interval), computes fire times, and decides what
// a due schedule does after downtime (its catch-up policy).
//
// It keeps no state and does no I/O: the schedule records live in
// pkg/store (store.Schedules) and the loop that claims and fires due ticks
// on every replica lives in internal/scheduler. Cron parsing is
// github.com/robfig/cron/v3's standard parser; this package never parses
// cron text itself.
package schedule
