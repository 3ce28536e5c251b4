package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
)

// Bounds of a client tool's output: what the model gets back.
const (
	clientToolMaxStdout = 64 << 10
	clientToolMaxStderr = 8 << 10
)

var clientToolName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// localTool is one --client-tool NAME=COMMAND: declared to agentd for
// the run, and answered by running argv locally.
type localTool struct {
	name        string
	argv        []string
	description string
	parameters  string // JSON Schema of the arguments
}

// clientTools is the repeatable --client-tool flag, with its
// --client-tool-spec companion and --client-tool-timeout.
type clientTools struct {
	tools   map[string]*localTool
	specs   map[string]string // name -> spec file
	timeout time.Duration
}

func newClientTools() *clientTools {
	return &clientTools{tools: map[string]*localTool{}, specs: map[string]string{}}
}

// register adds the flags to fs.
func (c *clientTools) register(fs *flag.FlagSet) {
	fs.Var(toolFlag{c}, "client-tool", "answer tool NAME by running COMMAND locally: NAME=COMMAND (repeatable)")
	fs.Var(specFlag{c}, "client-tool-spec", `describe tool NAME from a JSON file {"description", "parameters"}: NAME=FILE (repeatable)`)
	fs.DurationVar(&c.timeout, "client-tool-timeout", 5*time.Minute, "longest a client tool command may run")
}

type toolFlag struct{ c *clientTools }

func (toolFlag) String() string { return "" }

func (f toolFlag) Set(s string) error {
	name, command, ok := strings.Cut(s, "=")
	name = strings.TrimSpace(name)
	if !ok || !clientToolName.MatchString(name) {
		return fmt.Errorf("want NAME=COMMAND with NAME of letters, digits, _ and - (at most 64), got %q", s)
	}
	if _, dup := f.c.tools[name]; dup {
		return fmt.Errorf("client tool %s is given twice", name)
	}
	argv, err := splitCommand(command)
	if err != nil {
		return fmt.Errorf("client tool %s: %w", name, err)
	}
	if len(argv) == 0 {
		return fmt.Errorf("client tool %s: the command is empty", name)
	}
	f.c.tools[name] = &localTool{
		name: name, argv: argv,
		description: fmt.Sprintf("Client-side tool %s: runs on the user's machine with the arguments as JSON on stdin and answers its output.", name),
		parameters:  `{"type":"object","additionalProperties":true}`,
	}
	return nil
}

type specFlag struct{ c *clientTools }

func (specFlag) String() string { return "" }

func (f specFlag) Set(s string) error {
	name, file, ok := strings.Cut(s, "=")
	if !ok || name == "" || file == "" {
		return fmt.Errorf("want NAME=FILE, got %q", s)
	}
	f.c.specs[name] = file
	return nil
}

// resolve applies the spec files; it runs once the flags are parsed.
func (c *clientTools) resolve() error {
	if c.timeout <= 0 {
		return errors.New("--client-tool-timeout must be positive")
	}
	names := make([]string, 0, len(c.specs))
	for n := range c.specs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		t, ok := c.tools[name]
		if !ok {
			return fmt.Errorf("--client-tool-spec %s: no --client-tool %s=COMMAND", name, name)
		}
		data, err := os.ReadFile(c.specs[name])
		if err != nil {
			return fmt.Errorf("--client-tool-spec %s: %w", name, err)
		}
		var spec struct {
			Description string          `json:"description"`
			Parameters  json.RawMessage `json:"parameters"`
		}
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&spec); err != nil {
			return fmt.Errorf("--client-tool-spec %s: want {\"description\", \"parameters\"}: %w", name, err)
		}
		if spec.Description != "" {
			t.description = spec.Description
		}
		if len(spec.Parameters) > 0 {
			p, err := jsonObject(string(spec.Parameters))
			if err != nil {
				return fmt.Errorf("--client-tool-spec %s: parameters: %w", name, err)
			}
			t.parameters = p
		}
	}
	return nil
}

// declare returns the RunRequest.client_tools entries, sorted by name.
func (c *clientTools) declare() []*plumbv1.ClientTool {
	var out []*plumbv1.ClientTool
	for _, t := range c.tools {
		out = append(out, &plumbv1.ClientTool{Name: t.name, Description: t.description, ParametersJson: t.parameters})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetName() < out[j].GetName() })
	return out
}

// decider wraps next: CLIENT_TOOL requests for tools of c are answered by
// running their commands; every other request goes to next.
func (c *clientTools) decider(next decider) decider {
	if len(c.tools) == 0 {
		return next
	}
	return &clientToolDecider{tools: c, next: next}
}

type clientToolDecider struct {
	tools *clientTools
	next  decider // nil: other requests stay undecided
}

func (d *clientToolDecider) decide(ctx context.Context, in *plumbv1.Interrupted) ([]*plumbv1.Decision, error) {
	reqs := in.GetRequests()
	out := make([]*plumbv1.Decision, len(reqs))
	var rest []*plumbv1.InterruptRequest
	var restAt []int
	for i, req := range reqs {
		t := d.tools.tools[req.GetToolName()]
		if t == nil || req.GetKind() != plumbv1.InterruptKind_INTERRUPT_KIND_CLIENT_TOOL {
			rest, restAt = append(rest, req), append(restAt, i)
		}
	}
	// The others first: a request nobody can answer should not wait for
	// client tool commands to finish.
	if len(rest) > 0 {
		if d.next == nil {
			return nil, &undecidedError{rest[0], "no decision flag answers it (only client tools are answered)"}
		}
		ds, err := d.next.decide(ctx, &plumbv1.Interrupted{InterruptId: in.GetInterruptId(), Requests: rest})
		if err != nil {
			return nil, err
		}
		if len(ds) != len(rest) {
			return nil, fmt.Errorf("%d decisions for %d requests", len(ds), len(rest))
		}
		for k, dec := range ds {
			out[restAt[k]] = dec
		}
	}
	for i, req := range reqs {
		if out[i] != nil {
			continue
		}
		msg, isErr, err := d.tools.run(ctx, d.tools.tools[req.GetToolName()], req.GetArgsJson())
		if err != nil {
			return nil, err
		}
		dec := decisionFor(req, plumbv1.DecisionType_DECISION_TYPE_RESPOND)
		dec.Message, dec.IsError = msg, isErr
		out[i] = dec
	}
	return out, nil
}

// run executes t with args on stdin. Its stdout is the result; a
// non-zero exit, a failure to start or a timeout is an error result with
// stderr. err is set only when ctx ended (agentctl is stopping).
func (c *clientTools) run(ctx context.Context, t *localTool, args string) (msg string, isError bool, err error) {
	if args == "" {
		args = "{}"
	}
	cctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	cmd := exec.CommandContext(cctx, t.argv[0], t.argv[1:]...)
	cmd.Stdin = strings.NewReader(args)
	stdout, stderr := &capped{max: clientToolMaxStdout}, &capped{max: clientToolMaxStderr}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	ownProcessGroup(cmd)
	cmd.WaitDelay = 5 * time.Second // a child that escaped the group and keeps the pipes open
	runErr := cmd.Run()
	if ctx.Err() != nil {
		return "", false, ctx.Err()
	}
	out, errText := stdout.text(), strings.TrimSpace(stderr.text())
	var ee *exec.ExitError
	switch {
	case runErr == nil:
		if strings.TrimSpace(out) == "" {
			out = "(no output)"
		}
		return out, false, nil
	case cctx.Err() != nil:
		msg = fmt.Sprintf("%s timed out after %s", t.name, c.timeout)
	case errors.As(runErr, &ee):
		msg = fmt.Sprintf("%s failed: %s", t.name, ee.ProcessState)
	default:
		msg = fmt.Sprintf("%s could not run: %v", t.name, runErr)
	}
	if errText != "" {
		msg += "\nstderr:\n" + errText
	}
	if strings.TrimSpace(out) != "" {
		msg += "\nstdout:\n" + out
	}
	return msg, true, nil
}

// capped keeps the first max bytes written and counts the rest.
type capped struct {
	max     int
	b       bytes.Buffer
	dropped int
}

func (c *capped) Write(p []byte) (int, error) {
	room := c.max - c.b.Len()
	if room >= len(p) {
		return c.b.Write(p)
	}
	if room > 0 {
		c.b.Write(p[:room])
	}
	c.dropped += len(p) - max(room, 0)
	return len(p), nil
}

// text returns what was kept, cut at a rune boundary, with a note of
// what was dropped.
func (c *capped) text() string {
	b := c.b.Bytes()
	if c.dropped == 0 {
		return string(b)
	}
	for len(b) > 0 && !utf8.Valid(b[max(len(b)-4, 0):]) {
		b = b[:len(b)-1]
	}
	return strings.ToValidUTF8(string(b), "\uFFFD") + fmt.Sprintf("\n[… %d more bytes cut]", c.dropped+c.b.Len()-len(b))
}

// splitCommand splits a --client-tool COMMAND into argv the way a POSIX
// shell splits words, without any expansion: blanks separate words,
// '…' quotes literally, "…" quotes with \" \\ \$ \` escapes, and a
// backslash outside quotes escapes the next character. No shell runs the
// command; write sh -c '…' to get one.
func splitCommand(s string) ([]string, error) {
	var out []string
	var cur strings.Builder
	inWord := false
	for i := 0; i < len(s); i++ {
		ch := s[i]
		switch {
		case ch == ' ' || ch == '\t' || ch == '\n':
			if inWord {
				out = append(out, cur.String())
				cur.Reset()
				inWord = false
			}
		case ch == '\'':
			inWord = true
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return nil, errors.New("unterminated ' quote")
			}
			cur.WriteString(s[i+1 : i+1+j])
			i += j + 1
		case ch == '"':
			inWord = true
			i++
			for ; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' && i+1 < len(s) && strings.IndexByte("\"\\$`", s[i+1]) >= 0 {
					i++
				}
				cur.WriteByte(s[i])
			}
			if i >= len(s) {
				return nil, errors.New(`unterminated " quote`)
			}
		case ch == '\\':
			inWord = true
			if i+1 >= len(s) {
				return nil, errors.New("trailing backslash")
			}
			i++
			cur.WriteByte(s[i])
		default:
			inWord = true
			cur.WriteByte(ch)
		}
	}
	if inWord {
		out = append(out, cur.String())
	}
	return out, nil
}
