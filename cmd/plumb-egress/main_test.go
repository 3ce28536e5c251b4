package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestRun(t *testing.T) {
	tests := []struct {
		name string
		args []string
		code int
		out  string
	}{
		{name: "bad rule", args: []string{"--allow", "http://x"}, code: 2, out: "egress rule"},
		{name: "bad deny", args: []string{"--deny", "nope"}, code: 2, out: "--deny"},
		{name: "bad clients", args: []string{"--clients", "10.0.0.0/99"}, code: 2, out: "--clients"},
		{name: "bad grant", args: []string{"--grant", "*.example.com:443"}, code: 2, out: "--grant"},
		{name: "bad listen", args: []string{"--listen", "256.0.0.1:1"}, code: 1, out: "plumb-egress"},
		{name: "serves until cancelled", args: []string{"--listen", "127.0.0.1:0", "--allow", "example.com,10.0.0.0/8:443"}, code: 0, out: "egress proxy serving"},
		{name: "asks", args: []string{"--listen", "127.0.0.1:0", "--allow", "example.com", "--control", "--ask-timeout", "1m", "--grant", "api.example.com:443"}, code: 0, out: "egress proxy serving"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel() // a serving proxy stops at once
			var out bytes.Buffer
			if code := run(ctx, tc.args, strings.NewReader(""), &out, &out); code != tc.code || !strings.Contains(out.String(), tc.out) {
				t.Fatalf("run(%v) = %d, output %q; want %d with %q", tc.args, code, out.String(), tc.code, tc.out)
			}
		})
	}
}
