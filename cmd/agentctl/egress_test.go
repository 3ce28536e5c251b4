package main

import (
	"context"
	"flag"
	"io"
	"strings"
	"testing"
)

// egress-decide refuses bad arguments before it calls sandboxd.
func TestEgressDecideArgs(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{nil, "missing sandbox id"},
		{[]string{"sbx"}, "exactly one of --allow and --reject"},
		{[]string{"sbx", "--allow", "--reject", "r1"}, "exactly one of --allow and --reject"},
		{[]string{"sbx", "--allow", "--scope", "forever", "r1"}, "want once or sandbox"},
		{[]string{"sbx", "--allow"}, "a request id or --host"},
		{[]string{"sbx", "--allow", "--host", "example.com:443", "r1"}, "a request id or --host"},
		{[]string{"sbx", "--allow", "--host", "example.com"}, "--host"},
		{[]string{"sbx", "--allow", "--host", "example.com:99999"}, "port"},
	}
	for _, tc := range tests {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		err := egressDecide(context.Background(), nil, fs, tc.args, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("egress-decide %v: %v, want an error naming %q", tc.args, err, tc.want)
		}
	}
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	if err := egressWatch(context.Background(), nil, fs, nil, io.Discard); err == nil {
		t.Error("egress-watch without an id: no error")
	}
}
