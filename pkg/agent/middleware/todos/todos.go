package todos

import (
	"context"
	"fmt"
	"strings"

	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/model"
)

// Name is the middleware's name; ToolName its tool.
const (
	Name     = "todos"
	ToolName = "write_todos"
)

// Defaults of middleware.todos.
const (
	DefaultReminderEvery = 10
	DefaultMaxItems      = 100
)

// Config is middleware.todos.
type Config struct {
	// ReminderEvery is the number of steps without write_todos after which
	// unfinished todos are recalled; 0 means DefaultReminderEvery, negative
	// disables the reminder.
	ReminderEvery int
	// MaxItems caps the list; 0 means DefaultMaxItems.
	MaxItems int
}

// Middleware is the todos middleware.
type Middleware struct {
	agent.BaseMiddleware
	cfg Config
}

// New returns the middleware.
func New(cfg Config) *Middleware {
	if cfg.ReminderEvery == 0 {
		cfg.ReminderEvery = DefaultReminderEvery
	}
	if cfg.MaxItems <= 0 {
		cfg.MaxItems = DefaultMaxItems
	}
	return &Middleware{cfg: cfg}
}

// Name implements agent.Middleware.
func (*Middleware) Name() string { return Name }

const description = `Create and maintain a structured todo list for the current task. Use it for work with 3 or more steps: it keeps you on track and shows the user your progress.
- The list you send replaces the whole list; always send every item.
- Keep exactly one item in_progress while you work; mark an item completed as soon as it is done, not in batches.
- Add items when you discover new work; remove items that no longer matter.
- Never call write_todos more than once in one turn.
Skip it for simple, single-step requests.`

// Tools implements agent.Middleware.
func (m *Middleware) Tools() []agent.Tool {
	schema := fmt.Sprintf(`{"type":"object","required":["todos"],"additionalProperties":false,"properties":{
"todos":{"type":"array","maxItems":%d,"description":"The complete new todo list.","items":{"type":"object","required":["content","status"],"additionalProperties":false,
"properties":{"content":{"type":"string","minLength":1,"maxLength":500},
"status":{"type":"string","enum":["pending","in_progress","completed"]}}}}}}`, m.cfg.MaxItems)
	return []agent.Tool{{Name: ToolName, Description: description, Schema: []byte(schema), Func: m.write}}
}

type private struct {
	// Since counts model calls since write_todos was last called or the
	// reminder last fired.
	Since int `json:"since"`
}

func (m *Middleware) write(_ context.Context, req *agent.ToolRequest) (agent.ToolResult, error) {
	n := 0
	for _, c := range req.Batch {
		if c.Name == ToolName {
			n++
		}
	}
	if n > 1 {
		return agent.ToolResult{
			Content: fmt.Sprintf("write_todos was called %d times in one turn; none were applied. Send one call with the complete list.", n),
			IsError: true, Origin: agent.OriginBlocked,
		}, nil
	}
	var args struct {
		Todos []agent.Todo `json:"todos"`
	}
	if err := req.DecodeArgs(&args); err != nil {
		return agent.ToolResult{}, err
	}
	if args.Todos == nil {
		args.Todos = []agent.Todo{}
	}
	if req.State.SetTodos(args.Todos) {
		req.EmitAfterResult(agent.TodosUpdated{Todos: args.Todos})
	}
	return agent.ToolResult{Content: Render(args.Todos)}, nil
}

// Render is write_todos' result text.
func Render(todos []agent.Todo) string {
	var p, i, c int
	for _, t := range todos {
		switch t.Status {
		case agent.TodoPending:
			p++
		case agent.TodoInProgress:
			i++
		case agent.TodoCompleted:
			c++
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Todo list updated (%d items: %d pending, %d in progress, %d completed).", len(todos), p, i, c)
	for _, t := range todos {
		fmt.Fprintf(&b, "\n- [%s] %s", t.Status, t.Content)
	}
	return b.String()
}

// WrapModel counts steps and queues the todos reminder when unfinished
// items were left alone for ReminderEvery steps.
func (m *Middleware) WrapModel(next agent.ModelHandler) agent.ModelHandler {
	return func(ctx context.Context, req *agent.ModelRequest) (resp model.Response, err error) {
		resp, err = next(ctx, req)
		if err != nil || len(resp.Message.ToolCalls) == 0 {
			return resp, err
		}
		var p private
		if _, err := req.State.Private(Name, &p); err != nil {
			p = private{}
		}
		p.Since++
		wrote := false
		for _, c := range resp.Message.ToolCalls {
			if c.Name == ToolName {
				wrote = true
			}
		}
		switch {
		case wrote:
			p.Since = 0
		case m.cfg.ReminderEvery > 0 && p.Since >= m.cfg.ReminderEvery:
			if text, ok := reminder(req.State.Todos(), p.Since); ok {
				req.Run.Remind(Name, text)
				p.Since = 0
			}
		}
		if err := req.State.SetPrivate(Name, p); err != nil {
			return resp, err
		}
		return resp, nil
	}
}

func reminder(todos []agent.Todo, steps int) (string, bool) {
	open := false
	for _, t := range todos {
		if t.Status != agent.TodoCompleted {
			open = true
		}
	}
	if !open {
		return "", false
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Your todo list has unfinished items and write_todos was not called in the last %d steps. Current todos:", steps)
	for _, t := range todos {
		fmt.Fprintf(&b, "\n- [%s] %s", t.Status, t.Content)
	}
	b.WriteString("\nIf the list is out of date, update it with write_todos (mark finished items completed, keep one in_progress). Do not mention this reminder to the user.")
	return b.String(), true
}
