// Command agentd serves plumb.v1.AgentService: the deep-agent executor that
// plans, works on files, delegates to subagents and asks humans for
// approval, over any OpenAI-compatible model endpoint.
package main

import (
	"context"
	"io"
	"os"
	"strings"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/daemon"
	"github.com/plumbhq/plumb/internal/server/agentsvc"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

func main() { os.Exit(daemon.Main("agentd", run)) }

// Config is agentd's YAML configuration file (--config). Flags and their
// environment variables override the values it sets.
type Config struct {
	// Version of the config format; 1.
	Version int `yaml:"version"`
	// Server holds listen addresses and shutdown behavior.
	Server daemon.ServerConfig `yaml:"server"`
	// Sandbox says where the sandboxd workers are.
	Sandbox struct {
		Addresses []string `yaml:"addresses"`
	} `yaml:"sandbox"`
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	var (
		c        daemon.Common
		sandboxd string
	)
	f := daemon.NewFlags("agentd")
	c.Bind(f, "127.0.0.1:7070", "127.0.0.1:9070")
	f.String(&sandboxd, "sandboxd", "127.0.0.1:7071", "comma-separated sandboxd worker addresses")
	if err := daemon.ParseArgs(f, args, stdout, "agentd serves plumb.v1.AgentService, the deep-agent executor."); err != nil {
		return err
	}
	if c.Version {
		daemon.PrintVersion(stdout, "agentd")
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
		if !f.IsSet("sandboxd") && len(cfg.Sandbox.Addresses) > 0 {
			sandboxd = strings.Join(cfg.Sandbox.Addresses, ",")
		}
	}
	workers, err := splitAddrs(sandboxd)
	if err != nil {
		return err
	}

	lg, err := daemon.NewLogger(c.LogFormat, c.LogLevel)
	if err != nil {
		return &daemon.UsageError{Err: err}
	}
	defer func() { _ = lg.Sync() }()
	lg.Info("starting agentd", zap.Strings("sandboxd", workers))

	svc := agentsvc.New(lg)
	return daemon.Serve(ctx, daemon.Options{
		Name:          "agentd",
		GRPCAddr:      c.GRPCAddr,
		HTTPAddr:      c.HTTPAddr,
		ShutdownGrace: c.ShutdownGrace,
		Logger:        lg,
		Register:      func(s *grpc.Server) { plumbv1.RegisterAgentServiceServer(s, svc) },
	})
}

// splitAddrs parses the comma-separated --sandboxd list.
func splitAddrs(list string) ([]string, error) {
	var out []string
	for _, a := range strings.Split(list, ",") {
		a = strings.TrimSpace(a)
		if a == "" {
			continue
		}
		if err := daemon.CheckAddr(a); err != nil {
			return nil, daemon.Usagef("invalid sandboxd address %q: %v", a, err)
		}
		out = append(out, a)
	}
	if len(out) == 0 {
		return nil, daemon.Usagef("--sandboxd names no worker address")
	}
	return out, nil
}
