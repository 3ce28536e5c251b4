package daemon

import (
	"errors"
	"flag"
	"strings"
	"testing"
	"time"
)

func TestFlagsParse(t *testing.T) {
	tests := []struct {
		name      string
		args      []string
		env       map[string]string
		wantErr   string
		wantAddr  string
		wantGrace time.Duration
	}{
		{name: "defaults", wantAddr: "127.0.0.1:7070", wantGrace: 30 * time.Second},
		{name: "flag", args: []string{"--grpc-addr", "0.0.0.0:1"}, wantAddr: "0.0.0.0:1", wantGrace: 30 * time.Second},
		{name: "env", env: map[string]string{"TESTD_GRPC_ADDR": "[::1]:2", "TESTD_SHUTDOWN_GRACE": "5s"}, wantAddr: "[::1]:2", wantGrace: 5 * time.Second},
		{name: "flag beats env", args: []string{"--grpc-addr", "h:3"}, env: map[string]string{"TESTD_GRPC_ADDR": "bad"}, wantAddr: "h:3", wantGrace: 30 * time.Second},
		{name: "bad env names variable", env: map[string]string{"TESTD_LOG_FORMAT": "xml"}, wantErr: "TESTD_LOG_FORMAT"},
		{name: "missing port", args: []string{"--grpc-addr", "localhost"}, wantErr: "want host:port"},
		{name: "port range", args: []string{"--grpc-addr", "h:70000"}, wantErr: "0 to 65535"},
		{name: "bad duration", args: []string{"--shutdown-grace", "soon"}, wantErr: "duration"},
		{name: "negative duration", args: []string{"--shutdown-grace", "-2s"}, wantErr: "negative"},
		{name: "unknown flag", args: []string{"--nope"}, wantErr: "nope"},
		{name: "positional", args: []string{"x"}, wantErr: "unexpected argument"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c Common
			f := NewFlags("testd")
			c.Bind(f, "127.0.0.1:7070", "127.0.0.1:9070")
			err := f.Parse(tt.args, func(k string) string { return tt.env[k] })
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want it to mention %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.GRPCAddr != tt.wantAddr || c.ShutdownGrace != tt.wantGrace {
				t.Fatalf("got addr %q grace %v, want %q %v", c.GRPCAddr, c.ShutdownGrace, tt.wantAddr, tt.wantGrace)
			}
		})
	}
}

func TestFlagsHelp(t *testing.T) {
	f := NewFlags("testd")
	var c Common
	c.Bind(f, "a:1", "b:2")
	if err := f.Parse([]string{"-h"}, func(string) string { return "" }); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("err = %v, want flag.ErrHelp", err)
	}
	var sb strings.Builder
	f.Usage(&sb, "summary")
	for _, want := range []string{"--grpc-addr", "$TESTD_GRPC_ADDR", "(default a:1)", "json|console"} {
		if !strings.Contains(sb.String(), want) {
			t.Errorf("usage lacks %q:\n%s", want, sb.String())
		}
	}
}

func TestOverride(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		env        map[string]string
		conf, want string
	}{
		{name: "default when the file is silent", want: "def"},
		{name: "file over the default", conf: "file", want: "file"},
		{name: "flag over the file", args: []string{"--x", "flag"}, conf: "file", want: "flag"},
		{name: "environment over the file", env: map[string]string{"TESTD_X": "env"}, conf: "file", want: "env"},
		{name: "a flag given as its default still wins", args: []string{"--x", "def"}, conf: "file", want: "def"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var x string
			f := NewFlags("testd")
			f.String(&x, "x", "def", "")
			if err := f.Parse(tt.args, func(k string) string { return tt.env[k] }); err != nil {
				t.Fatal(err)
			}
			conf := tt.conf
			Override(f, "x", x, &conf)
			if conf != tt.want {
				t.Fatalf("got %q, want %q", conf, tt.want)
			}
		})
	}
}
