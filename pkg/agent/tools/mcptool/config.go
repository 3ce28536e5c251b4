package mcptool

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/plumbhq/plumb/pkg/agent"
)

// Defaults of a Server's limits.
const (
	DefaultTimeout         = 60 * time.Second
	DefaultStartupTimeout  = 30 * time.Second
	DefaultMaxResultChars  = 50_000
	DefaultMaxMessageBytes = 4 << 20
	// MaxToolsPerServer bounds how many tools of one server are offered.
	MaxToolsPerServer = 128
	// maxDescriptionChars bounds a tool description shown to the model.
	maxDescriptionChars = 4000
)

// ToolPrefix is the name prefix of the tools of server name.
func ToolPrefix(server string) string { return "mcp__" + server + "__" }

// Server is one configured MCP server. Exactly one of Command (stdio, run
// through the thread's backend) and URL (streamable HTTP from agentd) is
// set.
type Server struct {
	// Name is the server's key; its tools are mcp__<Name>__<tool>.
	Name string
	// Command and Args start a stdio server. They are quoted for /bin/sh
	// and run through the thread's backend.ProcessStarter.
	Command string
	Args    []string
	// Env is added to the stdio server's environment.
	Env map[string]string
	// Cwd is the stdio server's working directory ("" = the workspace).
	Cwd string
	// URL is a streamable-HTTP endpoint.
	URL string
	// Headers are sent with every HTTP request (secrets already expanded).
	Headers map[string]string
	// Timeout bounds each call (0 = DefaultTimeout).
	Timeout time.Duration
	// StartupTimeout bounds starting or connecting to the server, the MCP
	// handshake and listing its tools (0 = DefaultStartupTimeout).
	StartupTimeout time.Duration
	// Tools, when set, limits the server to these MCP tool names; they are
	// also offered (with a permissive schema) when the server cannot be
	// listed, so that their calls report the failure.
	Tools []string
	// MaxResultChars bounds a result's text; longer text is cut with a
	// note (0 = DefaultMaxResultChars).
	MaxResultChars int
	// MaxMessageBytes bounds one message from the server; a bigger one
	// ends the session with an error (0 = DefaultMaxMessageBytes).
	MaxMessageBytes int
	// Unavailable, when set, says why the server must not be contacted
	// (its configuration lacks a secret): it is offered as unavailable
	// tools whose calls give this reason.
	Unavailable string
}

// Capabilities are what the server's tools can do, for approval gates. A
// stdio server runs code inside the sandbox, so each of its tools can do
// what execute can, whatever it claims; an HTTP server's tools reach a
// host outside agentd.
func (s *Server) Capabilities() agent.Capability {
	if s.URL != "" {
		return agent.CapNetwork
	}
	return agent.CapAll
}

var serverName = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9-]*$`)

// Validate checks s; errors name the field relative to the server.
func (s *Server) Validate() error {
	if !serverName.MatchString(s.Name) || strings.Contains(s.Name, "__") || len(s.Name) > 32 {
		return fmt.Errorf("name %q: use letters, digits and dashes (at most 32), starting with a letter or digit", s.Name)
	}
	switch {
	case s.Command == "" && s.URL == "":
		return errors.New("set command (a stdio server in the sandbox) or url (a streamable-HTTP server)")
	case s.Command != "" && s.URL != "":
		return errors.New("command and url are exclusive")
	}
	if s.URL != "" {
		u, err := url.Parse(s.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("url %q: want an http or https URL", s.URL)
		}
		if len(s.Args) > 0 || len(s.Env) > 0 || s.Cwd != "" {
			return errors.New("args, env and cwd apply to stdio servers only")
		}
	} else if len(s.Headers) > 0 {
		return errors.New("headers apply to HTTP servers only")
	}
	if s.Timeout < 0 || s.StartupTimeout < 0 || s.MaxResultChars < 0 || s.MaxMessageBytes < 0 {
		return errors.New("timeout, startup_timeout, max_result_chars and max_message_bytes must be positive")
	}
	for _, t := range s.Tools {
		if t == "" {
			return errors.New("tools: empty tool name")
		}
	}
	return nil
}

func (s *Server) timeout() time.Duration {
	if s.Timeout > 0 {
		return s.Timeout
	}
	return DefaultTimeout
}

func (s *Server) startupTimeout() time.Duration {
	if s.StartupTimeout > 0 {
		return s.StartupTimeout
	}
	return DefaultStartupTimeout
}

func (s *Server) maxResultChars() int {
	if s.MaxResultChars > 0 {
		return s.MaxResultChars
	}
	return DefaultMaxResultChars
}

func (s *Server) maxMessageBytes() int {
	if s.MaxMessageBytes > 0 {
		return s.MaxMessageBytes
	}
	return DefaultMaxMessageBytes
}

// shellCommand quotes Command and Args for /bin/sh -c.
func (s *Server) shellCommand() string {
	parts := make([]string, 0, 1+len(s.Args))
	for _, a := range append([]string{s.Command}, s.Args...) {
		parts = append(parts, shellQuote(a))
	}
	return strings.Join(parts, " ")
}

func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,+@%") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// toolName maps an MCP tool name to the model-facing name: characters
// outside [a-zA-Z0-9_-] become "_", and a name longer than 64 (the
// providers' limit) is cut and made unique with a short hash.
func toolName(server, tool string) string {
	var b strings.Builder
	b.WriteString(ToolPrefix(server))
	for _, r := range tool {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '-':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	name := b.String()
	if len(name) > 64 {
		name = fmt.Sprintf("%s_%08x", name[:55], fnv32(tool))
	}
	return name
}

func fnv32(s string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(s); i++ {
		h ^= uint32(s[i])
		h *= 16777619
	}
	return h
}
