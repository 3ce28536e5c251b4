// Command sandboxd is a sandbox worker: it serves plumb.v1.SandboxService,
// running each agent's commands and file operations inside a hardened
// Docker container on this host.
package main

import (
	"context"
	"io"
	"os"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/daemon"
	"github.com/plumbhq/plumb/internal/server/sandboxsvc"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

func main() { os.Exit(daemon.Main("sandboxd", run)) }

// Config is sandboxd's YAML configuration file (--config). Flags and their
// environment variables override the values it sets.
type Config struct {
	// Version of the config format; 1.
	Version int `yaml:"version"`
	// Server holds listen addresses and shutdown behavior.
	Server daemon.ServerConfig `yaml:"server"`
	// Worker is this worker's name, part of every sandbox id it creates.
	Worker string `yaml:"worker"`
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	var (
		c      daemon.Common
		worker string
	)
	f := daemon.NewFlags("sandboxd")
	c.Bind(f, "127.0.0.1:7071", "127.0.0.1:9071")
	f.String(&worker, "worker", defaultWorker(), "worker name, part of every sandbox id (letters, digits, '-')")
	if err := daemon.ParseArgs(f, args, stdout, "sandboxd serves plumb.v1.SandboxService: hardened Docker sandboxes."); err != nil {
		return err
	}
	if c.Version {
		daemon.PrintVersion(stdout, "sandboxd")
		return nil
	}
	var cfg Config
	if c.ConfigPath != "" {
		if err := daemon.LoadYAML(c.ConfigPath, &cfg); err != nil {
			return &daemon.UsageError{Err: err}
		}
		if cfg.Version != 0 && cfg.Version != 1 {
			return daemon.Usagef("config file %s: version %d is not supported (want 1)", c.ConfigPath, cfg.Version)
		}
		if err := c.Apply(f, cfg.Server); err != nil {
			return err
		}
		if cfg.Worker != "" && !f.IsSet("worker") {
			worker = cfg.Worker
		}
	}
	if !validWorker(worker) {
		return daemon.Usagef("invalid worker name %q: use 1 to 40 letters, digits or '-'", worker)
	}

	lg, err := daemon.NewLogger(c.LogFormat, c.LogLevel)
	if err != nil {
		return &daemon.UsageError{Err: err}
	}
	defer func() { _ = lg.Sync() }()
	lg = lg.With(zap.String("worker", worker))
	lg.Info("starting sandboxd")

	svc := sandboxsvc.New(lg)
	return daemon.Serve(ctx, daemon.Options{
		Name:          "sandboxd",
		GRPCAddr:      c.GRPCAddr,
		HTTPAddr:      c.HTTPAddr,
		ShutdownGrace: c.ShutdownGrace,
		Logger:        lg,
		Register:      func(s *grpc.Server) { plumbv1.RegisterSandboxServiceServer(s, svc) },
	})
}

// defaultWorker is the host name reduced to the allowed characters.
func defaultWorker() string {
	h, _ := os.Hostname()
	var b []byte
	for i := 0; i < len(h) && len(b) < 40; i++ {
		c := h[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-':
			b = append(b, c)
		case c >= 'A' && c <= 'Z':
			b = append(b, c+'a'-'A')
		}
	}
	if len(b) == 0 {
		return "local"
	}
	return string(b)
}

func validWorker(s string) bool {
	if len(s) == 0 || len(s) > 40 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}
