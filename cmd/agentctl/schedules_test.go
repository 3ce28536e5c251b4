package main

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/plumbhq/plumb/pkg/model/modeltest"
)

var scheduleIDLine = regexp.MustCompile(`(?m)^id\s+(sch-\S+)$`)

// TestSchedulesCommands drives the schedules verbs against the real
// AgentService: create, list, show, the fires of a running schedule,
// pause, resume, update and remove, and the flag errors.
func TestSchedulesCommands(t *testing.T) {
	addr, model := agentd(t)
	for range 50 {
		model.Script("main", modeltest.Text("checked"))
	}
	ctx := t.Context()
	c := &cli{}
	if err := c.run(ctx, addr, "schedules", "create", "--every", "1s", "--label", "kind=check", "check", "the", "build"); err != nil {
		t.Fatalf("create: %v\n%s", err, c.err.String())
	}
	m := scheduleIDLine.FindStringSubmatch(c.out.String())
	if m == nil {
		t.Fatalf("no schedule id in:\n%s", c.out.String())
	}
	id := m[1]
	wantLines(t, c.out.String(), "when every 1s", "catch-up fire_once", "thread (a new thread per fire)")

	c = &cli{}
	if err := c.run(ctx, addr, "schedules", "ls"); err != nil || !strings.Contains(c.out.String(), id) || !strings.Contains(c.out.String(), "every 1s") {
		t.Fatalf("ls: %v\n%s", err, c.out.String())
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		c = &cli{}
		if err := c.run(ctx, addr, "schedules", "fires", id); err != nil {
			t.Fatalf("fires: %v", err)
		}
		if strings.Count(c.out.String(), " started ") >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no two started fires:\n%s", c.out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	c = &cli{}
	if err := c.run(ctx, addr, "schedules", "pause", id); err != nil {
		t.Fatal(err)
	}
	wantLines(t, c.out.String(), "next fire paused")
	c = &cli{}
	if err := c.run(ctx, addr, "schedules", "show", id); err != nil || !strings.Contains(c.out.String(), "last run") {
		t.Fatalf("show: %v\n%s", err, c.out.String())
	}
	c = &cli{}
	if err := c.run(ctx, addr, "schedules", "update", id, "--cron", "0 9 * * *", "--tz", "Europe/Paris", "--catch-up", "skip", "--paused", "morning"); err != nil {
		t.Fatal(err)
	}
	wantLines(t, c.out.String(), "when 0 9 * * * (Europe/Paris)", "catch-up skip", "next fire paused")
	c = &cli{}
	if err := c.run(ctx, addr, "schedules", "resume", id); err != nil || strings.Contains(c.out.String(), "next fire paused") {
		t.Fatalf("resume: %v\n%s", err, c.out.String())
	}
	c = &cli{}
	if err := c.run(ctx, addr, "schedules", "rm", id); err != nil || c.out.String() != id+"\n" {
		t.Fatalf("rm: %v\n%s", err, c.out.String())
	}

	errs := []struct {
		name string
		args []string
		err  string
	}{
		{"no verb", []string{"schedules"}, "no schedules command"},
		{"unknown verb", []string{"schedules", "frob"}, "unknown schedules command"},
		{"no prompt", []string{"schedules", "create", "--every", "1s"}, "missing prompt"},
		{"bad catch-up", []string{"schedules", "create", "--every", "1s", "--catch-up", "all", "x"}, "--catch-up"},
		{"bad cron", []string{"schedules", "create", "--cron", "whenever", "x"}, "cron"},
		{"short interval", []string{"schedules", "create", "--every", "10ms", "x"}, "interval"},
		{"missing", []string{"schedules", "show", "sch-nope"}, "not found"},
		{"rm missing", []string{"schedules", "rm", "sch-nope"}, "not found"},
	}
	for _, tc := range errs {
		t.Run(tc.name, func(t *testing.T) {
			c := &cli{}
			if err := c.run(ctx, addr, tc.args...); err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("err = %v; want %q", err, tc.err)
			}
		})
	}
}
