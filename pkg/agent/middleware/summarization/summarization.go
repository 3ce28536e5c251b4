package summarization

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"go.uber.org/zap"

	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/agent/middleware/filesystem"
	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/backend/vpath"
	"github.com/plumbhq/plumb/pkg/model"
)

// Name is the middleware's name.
const Name = "summarization"

// Defaults of middleware.summarization (docs/agent-core.md §7).
const (
	DefaultTriggerFraction          = 0.85
	DefaultTriggerTokens            = 170000
	DefaultKeepFraction             = 0.10
	DefaultKeepMessages             = 6
	DefaultMaxSummarizerInputTokens = 60000
	DefaultSummaryMaxTokens         = 2000
	DefaultTimeout                  = 30 * time.Second
	DefaultReminderFraction         = 0.80
	// tailEvictChars is the size above which tool results of the kept
	// tail are evicted in the request when the tail alone is too big.
	tailEvictChars = 20000
	// Summarizer input shaping (docs/agent-core.md §7 step 5).
	firstUserMaxTokens = 4000
	toolResultMaxChars = 2000
	toolArgMaxChars    = 500
)

// Config configures the middleware for one agent context.
type Config struct {
	// Summarizer is the model that writes summaries (summarization.model).
	Summarizer model.ChatModel
	// SummarizerName is its provider model name (usage events).
	SummarizerName string
	// SummarizerWindow is its context window; 0 = unknown.
	SummarizerWindow int
	// ContextWindow is the agent model's window; 0 = unknown.
	ContextWindow int
	// TriggerFraction, TriggerTokens and TriggerMaxTokens set the trigger.
	TriggerFraction  float64
	TriggerTokens    int
	TriggerMaxTokens int
	// KeepFraction and KeepMessages set how much recent context is kept.
	KeepFraction float64
	KeepMessages int
	// MaxSummarizerInputTokens bounds the summarizer's input.
	MaxSummarizerInputTokens int
	// SummaryMaxTokens caps the summary.
	SummaryMaxTokens int
	// Timeout bounds the summarizer call.
	Timeout time.Duration
	// ReminderFraction of the trigger fires the context_usage reminder.
	ReminderFraction float64
	// Backend stores transcripts (and tail evictions); may be nil.
	Backend backend.Backend
	// ArtifactsRoot is where conversation_history/ lives ("" = "/").
	ArtifactsRoot string
}

func (c Config) withDefaults() Config {
	if c.TriggerFraction <= 0 {
		c.TriggerFraction = DefaultTriggerFraction
	}
	if c.TriggerTokens <= 0 {
		c.TriggerTokens = DefaultTriggerTokens
	}
	if c.KeepFraction <= 0 {
		c.KeepFraction = DefaultKeepFraction
	}
	if c.KeepMessages <= 0 {
		c.KeepMessages = DefaultKeepMessages
	}
	if c.MaxSummarizerInputTokens <= 0 {
		c.MaxSummarizerInputTokens = DefaultMaxSummarizerInputTokens
	}
	if c.SummarizerWindow > 0 {
		c.MaxSummarizerInputTokens = min(c.MaxSummarizerInputTokens, c.SummarizerWindow/2)
	}
	if c.SummaryMaxTokens <= 0 {
		c.SummaryMaxTokens = DefaultSummaryMaxTokens
	}
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	if c.ReminderFraction <= 0 {
		c.ReminderFraction = DefaultReminderFraction
	}
	if c.ArtifactsRoot == "" {
		c.ArtifactsRoot = "/"
	}
	return c
}

// Trigger is the token count that starts a summarization.
func (c Config) Trigger() int {
	t := c.TriggerTokens
	if c.ContextWindow > 0 {
		t = int(math.Floor(c.TriggerFraction * float64(c.ContextWindow)))
	}
	if c.TriggerMaxTokens > 0 {
		t = min(t, c.TriggerMaxTokens)
	}
	return t
}

// keepTokens is the token keep, or 0 when the keep is a message count.
func (c Config) keepTokens() int {
	if c.ContextWindow <= 0 {
		return 0
	}
	return min(int(c.KeepFraction*float64(c.ContextWindow)), c.Trigger()/4)
}

// Middleware is the summarization middleware of one agent context.
type Middleware struct {
	agent.BaseMiddleware
	cfg Config
}

// New returns the middleware.
func New(cfg Config) *Middleware { return &Middleware{cfg: cfg.withDefaults()} }

// Name implements agent.Middleware.
func (*Middleware) Name() string { return Name }

type private struct {
	// U is prompt+completion of the context's last model call; 0 when the
	// provider reported no usage.
	U int `json:"u,omitempty"`
	// BaseLen is the log length after that call's assistant message.
	BaseLen int `json:"base_len,omitempty"`
	// Cutoff is the summary cutoff that call saw (-1 = none).
	Cutoff int `json:"cutoff"`
	// Overhead is the chars of the system prompt and tool schemas.
	Overhead int `json:"overhead,omitempty"`
	// Reminded: the context_usage reminder fired since the last summary.
	Reminded bool `json:"reminded,omitempty"`
	// Evicted maps tool call ids of kept-tail results to their files.
	Evicted map[string]string `json:"evicted,omitempty"`
}

func load(st *agent.State) private {
	p := private{Cutoff: -1}
	if _, err := st.Private(Name, &p); err != nil {
		return private{Cutoff: -1}
	}
	return p
}

func cutoffOf(st *agent.State) int {
	if s := st.Summary(); s != nil {
		return s.Cutoff
	}
	return -1
}

// Chars is chars(m) of docs/agent-core.md §7: text plus tool names and raw args.
func Chars(m model.Message) int {
	n := utf8.RuneCountInString(m.Content)
	for _, c := range m.ToolCalls {
		n += utf8.RuneCountInString(c.Name) + utf8.RuneCountInString(c.Args)
	}
	return n
}

func tokens(chars int) int { return (chars + 3) / 4 }

// count estimates the context size T.
func (m *Middleware) count(st *agent.State) int {
	p := load(st)
	if p.U > 0 && p.Cutoff == cutoffOf(st) && p.BaseLen <= st.Len() {
		t := p.U
		for _, msg := range st.MessagesFrom(p.BaseLen) {
			t += tokens(Chars(msg.Message))
		}
		return t
	}
	chars := p.Overhead
	for _, v := range st.Effective() {
		chars += Chars(v.Message.Message)
	}
	return tokens(chars)
}

// BeforeModel summarizes when the context crossed the trigger.
func (m *Middleware) BeforeModel(ctx context.Context, rc *agent.RunContext, st *agent.State) error {
	t := m.count(st)
	if t < m.cfg.Trigger() {
		return nil
	}
	_, err := m.summarize(ctx, rc, st, t, false)
	return err
}

// WrapModel records usage for the next count, forces a summarization on a
// context overflow, evicts oversized kept results in the request when the
// tail alone is too big, and queues the context_usage reminder.
//
// After a forced summarization it returns agent.RetryModelCall: the
// executor rebuilds the request from the new view and sends it through the
// whole chain once more, so that the middleware outside this one (the
// filesystem's offload of huge user messages) shape the retry too. A
// retry that overflows again fails with the overflow error.
func (m *Middleware) WrapModel(next agent.ModelHandler) agent.ModelHandler {
	return func(ctx context.Context, req *agent.ModelRequest) (model.Response, error) {
		overhead := utf8.RuneCountInString(req.System)
		for _, d := range req.Tools {
			overhead += utf8.RuneCountInString(d.Name) + utf8.RuneCountInString(d.Description) + len(d.Parameters)
		}
		r := *req
		r.Messages = m.evictTail(ctx, req, overhead)
		resp, err := next(ctx, &r)
		if err != nil && !req.Retry && model.IsContextOverflow(err) && ctx.Err() == nil {
			done, serr := m.summarize(ctx, req.Run, req.State, m.count(req.State), true)
			if serr != nil {
				req.Run.Logger.Warn("forced summarization failed", zap.Error(serr))
			}
			if done {
				return resp, &agent.RetryModelCall{Err: err}
			}
			return resp, err
		}
		if err != nil {
			return resp, err
		}
		st := req.State
		p := load(st)
		p.Overhead = overhead
		p.Cutoff = cutoffOf(st)
		p.BaseLen = st.Len() + 1 // the assistant message is appended next
		p.U = 0
		if !resp.Usage.Estimated {
			p.U = resp.Usage.Prompt + resp.Usage.Completion
		}
		if len(resp.Message.ToolCalls) > 0 && !p.Reminded {
			t := p.U
			if t == 0 {
				t = tokens(overhead) + tokens(Chars(resp.Message))
				for _, msg := range r.Messages {
					t += tokens(Chars(msg))
				}
			}
			trig := m.cfg.Trigger()
			if float64(t) >= m.cfg.ReminderFraction*float64(trig) {
				pct := int(math.Round(100 * float64(t) / float64(trig)))
				req.Run.Remind("context_usage", fmt.Sprintf("The conversation is at about %d%% of the size at which older messages get summarized (about %d of %d tokens). Keep outputs concise, read files in narrower ranges (offset/limit), and prefer grep or glob over reading whole files. Do not mention this reminder to the user.", pct, t, trig))
				p.Reminded = true
			}
		}
		if err := st.SetPrivate(Name, p); err != nil {
			return resp, err
		}
		return resp, nil
	}
}

// evictTail applies docs/agent-core.md §7 step 8 to a request copy.
func (m *Middleware) evictTail(ctx context.Context, req *agent.ModelRequest, overhead int) []model.Message {
	if req.State.Summary() == nil {
		return req.Messages
	}
	p := load(req.State)
	out, added := m.evictKept(ctx, req.Messages, overhead, p.Evicted, true)
	if len(added) > 0 {
		if p.Evicted == nil {
			p.Evicted = make(map[string]string, len(added))
		}
		maps.Copy(p.Evicted, added)
		_ = req.State.SetPrivate(Name, p)
	}
	return out
}

// evictKept returns msgs with the tool results over tailEvictChars
// evicted when msgs plus overhead (in chars) are above the trigger, and
// the files it saved by call id. evicted holds the files saved for
// earlier requests, reused as they are. With save false nothing is
// written: the result is what a saving call would return when its writes
// succeed, so that a summary can count this step before the request is
// built.
func (m *Middleware) evictKept(ctx context.Context, msgs []model.Message, overhead int, evicted map[string]string, save bool) ([]model.Message, map[string]string) {
	chars := overhead
	for _, msg := range msgs {
		chars += Chars(msg)
	}
	if tokens(chars) <= m.cfg.Trigger() {
		return msgs, nil
	}
	out := slices.Clone(msgs)
	var added map[string]string
	for i, msg := range out {
		if msg.Role != model.RoleTool || utf8.RuneCountInString(msg.Content) <= tailEvictChars {
			continue
		}
		b, path := m.cfg.Backend, evicted[msg.ToolCallID]
		if !save {
			b = nil
			if path == "" && m.cfg.Backend != nil {
				path = filesystem.EvictPath(m.cfg.ArtifactsRoot, msg.ToolCallID)
			}
		}
		res := filesystem.Evict(ctx, b, model.ToolCall{ID: msg.ToolCallID, Name: msg.Name},
			agent.ToolResult{Content: msg.Content, OffloadedPath: path},
			filesystem.EvictOptions{Threshold: tailEvictChars, ArtifactsRoot: m.cfg.ArtifactsRoot})
		out[i].Content = res.Content
		if save && res.OffloadedPath != "" && evicted[msg.ToolCallID] == "" {
			if added == nil {
				added = make(map[string]string)
			}
			added[msg.ToolCallID] = res.OffloadedPath
		}
	}
	return out, added
}

// tailSavings is how many tokens evictTail takes out of the first request
// after a summary whose effective view is view, in the units of tokens().
func (m *Middleware) tailSavings(ctx context.Context, view []model.Message, overhead int, evicted map[string]string) int {
	out, _ := m.evictKept(ctx, view, overhead, evicted, false)
	saved := 0
	for i := range out {
		saved += tokens(Chars(view[i])) - tokens(Chars(out[i]))
	}
	return saved
}

// session is the transcript name of the context.
func session(rc *agent.RunContext) string {
	if rc.ParentToolCallID == "" {
		return rc.ThreadID
	}
	return rc.ThreadID + "/" + filesystem.SanitizeID(rc.ParentToolCallID)
}

// summarize runs docs/agent-core.md §7 steps 2–9. done reports whether a summary was made.
func (m *Middleware) summarize(ctx context.Context, rc *agent.RunContext, st *agent.State, before int, forced bool) (bool, error) {
	start := time.Now()
	view := st.Effective()
	lo := 0
	if len(view) > 0 && view[0].Index < 0 {
		lo = 1
	}
	p := load(st)
	overhead := tokens(p.Overhead)
	keep := m.cfg.keepTokens()
	c := m.cutoff(view, lo, keep, m.cfg.KeepMessages)
	if c > lo && c < len(view) {
		tail := 0
		for _, v := range view[c:] {
			tail += tokens(Chars(v.Message.Message))
		}
		if float64(overhead+m.cfg.SummaryMaxTokens+tail) > 0.5*float64(before) {
			c = m.cutoff(view, lo, keep/2, max(m.cfg.KeepMessages/2, 1))
		}
	}
	if c <= lo || c >= len(view) {
		rc.Logger.Info("summarization skipped: no safe cut point", zap.Bool("forced", forced), zap.Int("messages", len(view)))
		return false, nil
	}
	slice := view[lo:c]
	first, last := slice[0].Index, slice[len(slice)-1].Index
	// A summary replaces view[:c] (the previous summary included); one that
	// is not smaller would only grow the context, so it is not kept.
	removed := 0
	for _, v := range view[:c] {
		removed += tokens(Chars(v.Message.Message))
	}
	transcript := m.transcriptPath(rc)
	skip := func(reason string, added int) (bool, error) {
		rc.Logger.Info("summarization skipped: "+reason, zap.Bool("forced", forced),
			zap.Int("tokens-removed", removed), zap.Int("tokens-added", added))
		return false, nil
	}
	if n := tokens(utf8.RuneCountInString(summaryMessage(transcript, ""))); n >= removed {
		return skip("the summarized messages are smaller than an empty summary", n)
	}
	prev := st.Summary()
	text, fallback := m.write(ctx, rc, st, prev, slice)
	if n := tokens(utf8.RuneCountInString(summaryMessage(transcript, text))); n >= removed {
		return skip("the summary is not smaller than the messages it replaces", n)
	}
	if !m.offload(ctx, rc, transcript, slice) {
		transcript = ""
	}

	sum := agent.Summary{Cutoff: view[c].Index, Text: text, TranscriptPath: transcript, TokensBefore: before, Fallback: fallback}
	sum.Message = summaryMessage(transcript, text)
	// Relative to before, so that it shares before's basis (reported usage
	// or an estimate): minus what left the view, plus the summary message,
	// minus what evictTail takes out of the kept tail in the request this
	// summary is made for.
	kept := []model.Message{{Role: model.RoleUser, Content: sum.Message}}
	for _, v := range view[c:] {
		kept = append(kept, v.Message.Message)
	}
	saved := m.tailSavings(ctx, kept, p.Overhead, p.Evicted)
	after := max(before+tokens(utf8.RuneCountInString(sum.Message))-removed-saved, 0)
	sum.TokensAfter = after
	if err := st.SetSummary(sum); err != nil {
		return false, err
	}
	p = load(st)
	p.Reminded = false
	p.U = 0
	if err := st.SetPrivate(Name, p); err != nil {
		return false, err
	}
	dur := time.Since(start)
	rc.Logger.Info("summarized", zap.Bool("forced", forced), zap.Bool("fallback", fallback), zap.Int("cutoff", sum.Cutoff),
		zap.Int("tokens-before", before), zap.Int("tokens-after", after), zap.Duration("duration", dur))
	rc.Emit(agent.Summarized{
		CutoffIndex: sum.Cutoff, MessagesSummarized: last - first + 1, TokensBefore: before, TokensAfter: after,
		TranscriptPath: transcript, Fallback: fallback, Duration: dur,
	})
	return true, nil
}

// cutoff picks the candidate cutoff and moves it to a safe point (docs/agent-core.md §7
// steps 2–3). keepTok > 0 keeps the smallest suffix that fits it; else
// keepMsgs messages are kept.
func (m *Middleware) cutoff(view []agent.ViewMessage, lo, keepTok, keepMsgs int) int {
	c := len(view) - keepMsgs
	if keepTok > 0 {
		c = len(view)
		sum := 0
		for c > lo {
			n := tokens(Chars(view[c-1].Message.Message))
			if sum+n > keepTok {
				break
			}
			sum += n
			c--
		}
	}
	if c < lo {
		c = lo
	}
	if c >= len(view) {
		return c
	}
	if view[c].Role == model.RoleTool {
		// Back to the assistant message that issued the call.
		a := c
		for a > 0 && view[a].Role == model.RoleTool {
			a--
		}
		if a > lo {
			return a
		}
		// Nothing new before it: move forward past the tool block.
		for c < len(view) && view[c].Role == model.RoleTool {
			c++
		}
	}
	return c
}

// summaryMessage is the text of the summary message (docs/agent-core.md §7 step 7); without a
// transcript it omits the sentence that points to it.
func summaryMessage(transcript, text string) string {
	var b strings.Builder
	b.WriteString("The earlier part of this conversation was compacted to save context.")
	if transcript != "" {
		fmt.Fprintf(&b, " Its full transcript is at %s; read it with read_file when you need details.", transcript)
	}
	b.WriteString(" Summary of the earlier conversation:\n<summary>\n")
	b.WriteString(strings.TrimSpace(text))
	b.WriteString("\n</summary>")
	return b.String()
}

// transcriptPath is the context's transcript file, or "" without a
// backend.
func (m *Middleware) transcriptPath(rc *agent.RunContext) string {
	if m.cfg.Backend == nil {
		return ""
	}
	return vpath.Join(m.cfg.ArtifactsRoot, "conversation_history/"+session(rc)+".md")
}

// offload appends the summarized slice to the transcript file p (docs/agent-core.md §7 step
// 4) and reports whether it was saved.
func (m *Middleware) offload(ctx context.Context, rc *agent.RunContext, p string, slice []agent.ViewMessage) bool {
	if p == "" {
		return false
	}
	var b strings.Builder
	fmt.Fprintf(&b, "## Summarized at %s (agent %s, messages %d-%d)\n\n", rc.Now().UTC().Format(time.RFC3339),
		rc.AgentPath, slice[0].Index, slice[len(slice)-1].Index)
	for _, v := range slice {
		fmt.Fprintf(&b, `<message index="%d" role="%s"`, v.Index, v.Role)
		if v.Role == model.RoleTool {
			status := "success"
			if v.IsError {
				status = "error"
			}
			fmt.Fprintf(&b, ` tool_call_id="%s" name="%s" status="%s"`, xmlEscape(v.ToolCallID), xmlEscape(v.Name), status)
		}
		b.WriteString(">\n")
		if v.Content != "" {
			b.WriteString(xmlEscape(v.Content))
			b.WriteByte('\n')
		}
		for _, c := range v.ToolCalls {
			fmt.Fprintf(&b, "<tool_call id=\"%s\" name=\"%s\">%s</tool_call>\n", xmlEscape(c.ID), xmlEscape(c.Name), xmlEscape(c.Args))
		}
		b.WriteString("</message>\n")
	}
	b.WriteByte('\n')
	var existing []byte
	res, err := m.cfg.Backend.Download(ctx, []string{p})
	if err == nil && len(res) == 1 && res[0].Err == nil {
		existing = res[0].Content
	} else if err == nil && len(res) == 1 && res[0].Err.Code != backend.CodeFileNotFound {
		err = res[0].Err
	}
	if err == nil {
		_, err = m.cfg.Backend.Write(ctx, p, append(existing, b.String()...))
	}
	if err != nil {
		rc.Logger.Warn("transcript offload failed", zap.String("path", p), zap.Error(err))
		return false
	}
	return true
}

func xmlEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;").Replace(s)
}

// write produces the summary text: the summarizer's, or a mechanical one
// (fallback) when the summarizer fails or times out.
func (m *Middleware) write(ctx context.Context, rc *agent.RunContext, st *agent.State, prev *agent.Summary, slice []agent.ViewMessage) (string, bool) {
	if m.cfg.Summarizer != nil {
		input := m.input(st, prev, slice)
		sctx, cancel := context.WithTimeout(ctx, m.cfg.Timeout)
		defer cancel()
		resp, err := m.cfg.Summarizer.Generate(sctx, model.Request{
			Messages: []model.Message{
				{Role: model.RoleSystem, Content: summaryPrompt(m.cfg.SummaryMaxTokens)},
				{Role: model.RoleUser, Content: input},
			},
			MaxTokens: m.cfg.SummaryMaxTokens,
			Metadata:  model.Metadata{RunID: rc.RunID, AgentPath: rc.AgentPath + "/summarizer", ParentToolCallID: rc.ParentToolCallID},
		}, nil)
		if err == nil {
			rc.ReportUsage(resp.Usage, agent.PurposeSummary, m.cfg.SummarizerName)
			if text := strings.TrimSpace(resp.Message.Content); text != "" {
				return text, false
			}
			err = errors.New("empty summary")
		}
		rc.Logger.Warn("summarizer failed; using a mechanical summary", zap.String("error-code", string(model.CodeOf(err))), zap.Error(err))
	}
	return mechanical(st, prev, slice), true
}

// input builds the bounded summarizer input (docs/agent-core.md §7 step 5).
func (m *Middleware) input(st *agent.State, prev *agent.Summary, slice []agent.ViewMessage) string {
	budget := m.cfg.MaxSummarizerInputTokens * 4 // chars
	var head strings.Builder
	if prev != nil {
		head.WriteString("<previous_summary>\n" + prev.Text + "\n</previous_summary>\n\n")
	}
	if first, ok := firstUser(st); ok {
		head.WriteString("<first_user_message>\n" + cutChars(first, firstUserMaxTokens*4) + "\n</first_user_message>\n\n")
	}
	budget -= utf8.RuneCountInString(head.String())
	rendered := make([]string, len(slice))
	for i, v := range slice {
		rendered[i] = renderForSummary(v)
	}
	keepFrom := len(rendered)
	used := 0
	for keepFrom > 0 {
		n := utf8.RuneCountInString(rendered[keepFrom-1])
		if used+n > budget-100 {
			break
		}
		used += n
		keepFrom--
	}
	var b strings.Builder
	b.WriteString(head.String())
	b.WriteString("<messages>\n")
	if keepFrom > 0 {
		fmt.Fprintf(&b, "[%d earlier messages omitted; see transcript]\n", keepFrom)
	}
	for _, r := range rendered[keepFrom:] {
		b.WriteString(r)
	}
	b.WriteString("</messages>")
	return b.String()
}

func renderForSummary(v agent.ViewMessage) string {
	var b strings.Builder
	switch v.Role {
	case model.RoleTool:
		fmt.Fprintf(&b, "[tool result %s %s]\n%s\n", v.Name, v.ToolCallID, cutChars(v.Content, toolResultMaxChars))
	default:
		fmt.Fprintf(&b, "[%s]\n", v.Role)
		if v.Content != "" {
			b.WriteString(v.Content + "\n")
		}
		for _, c := range v.ToolCalls {
			fmt.Fprintf(&b, "(calls %s with %s)\n", c.Name, cutChars(c.Args, toolArgMaxChars))
		}
	}
	return b.String()
}

func firstUser(st *agent.State) (string, bool) {
	for _, msg := range st.Messages() {
		if msg.Role == model.RoleUser {
			return msg.Content, true
		}
	}
	return "", false
}

// mechanical is the fallback summary of docs/agent-core.md §7 step 9.
func mechanical(st *agent.State, prev *agent.Summary, slice []agent.ViewMessage) string {
	var b strings.Builder
	b.WriteString("(Automatic summary: the summarizer was unavailable.)\n")
	if prev != nil {
		b.WriteString("\nEarlier summary:\n" + prev.Text + "\n")
	}
	if first, ok := firstUser(st); ok {
		b.WriteString("\nFirst user message:\n" + cutChars(first, 500) + "\n")
	}
	var users []string
	counts := make(map[string]int)
	var order []string
	files := make(map[string]bool)
	var fileOrder []string
	for _, v := range slice {
		if v.Role == model.RoleUser {
			users = append(users, cutChars(v.Content, 500))
		}
		for _, c := range v.ToolCalls {
			if counts[c.Name] == 0 {
				order = append(order, c.Name)
			}
			counts[c.Name]++
			for _, key := range []string{`"file_path":"`, `"path":"`} {
				if i := strings.Index(c.Args, key); i >= 0 {
					rest := c.Args[i+len(key):]
					if j := strings.IndexByte(rest, '"'); j > 0 && !files[rest[:j]] {
						files[rest[:j]] = true
						fileOrder = append(fileOrder, rest[:j])
					}
				}
			}
		}
	}
	if n := len(users); n > 0 {
		b.WriteString("\nLatest user messages:\n")
		for _, u := range users[max(0, n-5):] {
			b.WriteString("- " + u + "\n")
		}
	}
	if len(fileOrder) > 0 {
		b.WriteString("\nFiles touched: " + strings.Join(fileOrder, ", ") + "\n")
	}
	if len(order) > 0 {
		parts := make([]string, len(order))
		for i, n := range order {
			parts[i] = fmt.Sprintf("%s ×%d", n, counts[n])
		}
		b.WriteString("\nTools used: " + strings.Join(parts, ", ") + "\n")
	}
	return b.String()
}

func cutChars(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := 0
	for j := range s {
		if i == n {
			return s[:j]
		}
		i++
	}
	return s
}

func summaryPrompt(maxTokens int) string {
	return fmt.Sprintf(`You compact an AI agent's conversation so that it can continue its work from your summary alone. Write the summary directly, with no preamble, using exactly these headed sections in this order, and write "None" under a heading with nothing to report:

## User requirements and constraints
What the user asked for and every constraint they set, near-verbatim.

## Decisions
Decisions made, with their reasons and the options that were rejected.

## Key facts
Identifiers, values, commands, errors and how they were fixed.

## Files and artifacts
Paths created, modified or read, and what changed in each.

## Progress and next steps
What is done, what is in progress, what comes next, including todo statuses.

Invent nothing. Keep exact names, paths and values. Leave out pleasantries. Stay within %d tokens.`, maxTokens)
}
