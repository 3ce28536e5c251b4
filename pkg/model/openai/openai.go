package openai

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	goopenai "github.com/sashabaranov/go-openai"
	"go.uber.org/zap"

	"github.com/plumbhq/plumb/pkg/model"
)

// Model is a model.ChatModel backed by an OpenAI-compatible endpoint. It is
// safe for concurrent use.
type Model struct {
	cfg      Config
	client   *goopenai.Client
	classify classifier
	lg       *zap.Logger
	clock    Clock
	jitter   func(n int64) int64 // uniform in [0, n)
}

var _ model.ChatModel = (*Model)(nil)

// Option adjusts a Model; options are mostly test seams.
type Option func(*options)

type options struct {
	lg     *zap.Logger
	doer   HTTPDoer
	clock  Clock
	source rand.Source
}

// WithLogger sets the logger; nil means zap.NewNop().
func WithLogger(lg *zap.Logger) Option { return func(o *options) { o.lg = lg } }

// WithHTTPClient sets the HTTP client; nil means a plain &http.Client{}
// (without a client-wide timeout, which would cut long streams; the
// adapter's own timeouts apply instead).
func WithHTTPClient(c HTTPDoer) Option { return func(o *options) { o.doer = c } }

// WithClock replaces the clock used to compute and wait out retry delays.
func WithClock(c Clock) Option { return func(o *options) { o.clock = c } }

// WithRand sets the random source of the backoff jitter. The Model guards
// it with a mutex, so any rand.Source will do.
func WithRand(src rand.Source) Option { return func(o *options) { o.source = src } }

// New validates cfg, fills its defaults and returns a Model.
func New(cfg Config, opts ...Option) (*Model, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if o.lg == nil {
		o.lg = zap.NewNop()
	}
	if o.doer == nil {
		o.doer = &http.Client{}
	}
	if o.clock == nil {
		o.clock = realClock{}
	}
	jitter := rand.Int64N
	if o.source != nil {
		var mu sync.Mutex
		r := rand.New(o.source)
		jitter = func(n int64) int64 {
			mu.Lock()
			defer mu.Unlock()
			return r.Int64N(n)
		}
	}

	cc := goopenai.DefaultConfig(cfg.APIKey)
	cc.BaseURL = cfg.BaseURL
	cc.HTTPClient = &recordingDoer{next: o.doer, extra: cfg.ExtraHeaders}
	return &Model{
		cfg:      cfg,
		client:   goopenai.NewClientWithConfig(cc),
		classify: newClassifier(cfg),
		lg:       o.lg.Named("model").With(zap.String("model", cfg.Model)),
		clock:    o.clock,
		jitter:   jitter,
	}, nil
}

// Config returns the effective configuration, defaults filled in.
func (m *Model) Config() Config { return m.cfg }

// Generate implements model.ChatModel: one streamed call, retried per
// docs/agent-core.md §9.
func (m *Model) Generate(ctx context.Context, req model.Request, onDelta func(model.Delta)) (model.Response, error) {
	wire, err := m.wireRequest(req)
	if err != nil {
		return model.Response{}, err
	}
	lg := m.lg.With(
		zap.String("run-id", req.Metadata.RunID),
		zap.String("agent-path", req.Metadata.AgentPath),
		zap.String("parent-tool-call-id", req.Metadata.ParentToolCallID),
	)
	if wire.Model != m.cfg.Model {
		lg = lg.With(zap.String("requested-model", wire.Model))
	}
	retry := m.cfg.Retry
	streamAttempt := 1 // Delta.Attempt
	for n := 1; ; n++ {
		start := m.clock.Now()
		resp, streamed, f := m.attempt(ctx, wire, req, streamAttempt, onDelta)
		if f == nil {
			resp.Attempts = n
			lg.Debug("model call done",
				zap.Int("attempts", n),
				zap.Duration("duration", m.clock.Now().Sub(start)),
				zap.String("finish-reason", resp.FinishReason),
				zap.Int("tool-calls", len(resp.Message.ToolCalls)),
				zap.Int("prompt-tokens", resp.Usage.Prompt),
				zap.Int("completion-tokens", resp.Usage.Completion),
				zap.Bool("usage-estimated", resp.Usage.Estimated))
			return resp, nil
		}
		if ctx.Err() != nil {
			return model.Response{Attempts: n}, fmt.Errorf("model call: %w", ctx.Err())
		}
		me := f.err
		fields := []zap.Field{
			zap.Int("attempt", n),
			zap.Int("max-attempts", retry.MaxAttempts),
			zap.String("error-code", string(me.Code)),
			zap.Int("status-code", me.StatusCode),
			zap.Bool("streamed", streamed),
			zap.Error(me),
		}

		giveUp := ""
		var delay time.Duration
		switch {
		case !me.Retryable:
			giveUp = "not retryable"
		case n >= retry.MaxAttempts:
			giveUp = "attempts exhausted"
		case streamed && !*retry.RetryAfterPartial:
			giveUp = "output already streamed"
		case f.hasRetryAfter && f.retryAfter > retry.MaxRetryAfter:
			giveUp = "retry-after above the maximum"
		default:
			delay = m.delay(n, f)
			if dl, ok := ctx.Deadline(); ok && m.clock.Now().Add(delay).After(dl) {
				giveUp = "delay passes the deadline"
			}
		}
		if giveUp != "" {
			fields = append(fields, zap.String("give-up", giveUp))
			if f.hasRetryAfter {
				fields = append(fields, zap.Duration("retry-after", f.retryAfter))
			}
			lg.Warn("model call failed", fields...)
			if me.Retryable {
				me.Message = fmt.Sprintf("%s (attempt %d of %d; %s)", me.Message, n, retry.MaxAttempts, giveUp)
			}
			return model.Response{Attempts: n}, me
		}
		lg.Info("model attempt failed, retrying", append(fields, zap.Duration("retry-in", delay))...)
		if err := m.clock.Sleep(ctx, delay); err != nil {
			return model.Response{Attempts: n}, fmt.Errorf("model call: %w", ctx.Err())
		}
		if streamed {
			streamAttempt++
		}
	}
}

// failure is one failed attempt: its classified error and the Retry-After
// its response carried, if any.
type failure struct {
	err           *model.Error
	retryAfter    time.Duration
	hasRetryAfter bool
}

// delay computes the wait before attempt n+1 (docs/agent-core.md §9): the response's
// Retry-After if it sent one, else
// base/2 + rand[0, base/2) with base = min(max_backoff, initial × 2^(n−1)).
func (m *Model) delay(n int, f *failure) time.Duration {
	if f.hasRetryAfter {
		return f.retryAfter
	}
	base := m.cfg.Retry.InitialBackoff
	for i := 1; i < n && base < m.cfg.Retry.MaxBackoff; i++ {
		base *= 2
	}
	base = min(base, m.cfg.Retry.MaxBackoff)
	half := base / 2
	if half <= 0 {
		return base
	}
	return half + time.Duration(m.jitter(int64(half)))
}

// attempt makes one HTTP request and reads its stream to the end. streamed
// reports whether any delta reached onDelta.
func (m *Model) attempt(ctx context.Context, wire goopenai.ChatCompletionRequest, req model.Request, streamAttempt int, onDelta func(model.Delta)) (resp model.Response, streamed bool, f *failure) {
	actx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	actx, cancelTimeout := context.WithTimeoutCause(actx, m.cfg.RequestTimeout, errRequestTimeout)
	defer cancelTimeout()
	firstByte := time.AfterFunc(m.cfg.FirstByteTimeout, func() { cancel(errFirstByteTimeout) })
	defer firstByte.Stop()

	st := &attemptState{headers: metadataHeaders(req.Metadata), onFirstByte: func() { firstByte.Stop() }}
	actx = withAttemptState(actx, st)
	fail := func(err error) *failure {
		var cause error
		if actx.Err() != nil {
			cause = context.Cause(actx)
		}
		f := &failure{err: m.classify.classify(err, cause, st)}
		f.retryAfter, f.hasRetryAfter = retryAfter(st.header, m.clock.Now())
		f.err.RetryAfter = f.retryAfter
		return f
	}

	stream, err := m.client.CreateChatCompletionStream(actx, wire)
	if err != nil {
		return model.Response{}, false, fail(err)
	}
	defer stream.Close()

	asm := newAssembler(newCallID)
	for {
		chunk, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return model.Response{}, streamed, fail(err)
		}
		text, reasoning, calls := asm.add(chunk)
		if onDelta != nil && (text != "" || reasoning != "" || len(calls) > 0) {
			streamed = true
			onDelta(model.Delta{Text: text, Reasoning: reasoning, ToolCalls: calls, Attempt: streamAttempt})
		}
	}
	if !asm.complete(st.sawDone) {
		return model.Response{}, streamed, fail(errStreamTruncated)
	}
	msg, finish := asm.result()
	if finish == model.FinishContentFilter {
		return model.Response{}, streamed, &failure{err: newError(model.CodeContentFiltered, 0, "the provider stopped the output with finish_reason content_filter", nil)}
	}
	usage, ok := asm.reportedUsage()
	if !ok {
		usage = estimateUsage(req, msg)
	}
	return model.Response{Message: msg, FinishReason: finish, Usage: usage}, streamed, nil
}

func metadataHeaders(md model.Metadata) map[string]string {
	h := make(map[string]string, 3)
	for k, v := range map[string]string{
		HeaderRunID:            md.RunID,
		HeaderAgentPath:        md.AgentPath,
		HeaderParentToolCallID: md.ParentToolCallID,
	} {
		if v != "" {
			h[k] = v
		}
	}
	return h
}

// emptyParameters is sent for a tool that declares no parameters; providers
// reject a function without a parameters schema.
var emptyParameters = json.RawMessage(`{"type":"object","properties":{}}`)

// wireRequest translates a model.Request to go-openai's request.
func (m *Model) wireRequest(req model.Request) (goopenai.ChatCompletionRequest, error) {
	w := goopenai.ChatCompletionRequest{
		Model:               m.cfg.Model,
		Stream:              true,
		MaxCompletionTokens: m.cfg.MaxOutputTokens,
	}
	if req.Model != "" {
		w.Model = req.Model
	}
	if *m.cfg.StreamUsage {
		w.StreamOptions = &goopenai.StreamOptions{IncludeUsage: true}
	}
	if req.MaxTokens > 0 {
		w.MaxCompletionTokens = req.MaxTokens
	}
	if t := firstNonNil(req.Temperature, m.cfg.Temperature); t != nil {
		w.Temperature = *t
	}
	w.Messages = make([]goopenai.ChatCompletionMessage, 0, len(req.Messages))
	// OpenAI tool messages carry text only: the images of a block of tool
	// results go in one user message right after the block, each labelled
	// with its tool call (a user message inside the block would separate
	// calls from their results).
	var toolImages []goopenai.ChatMessagePart
	flush := func() {
		if len(toolImages) > 0 {
			w.Messages = append(w.Messages, goopenai.ChatCompletionMessage{Role: goopenai.ChatMessageRoleUser, MultiContent: toolImages})
			toolImages = nil
		}
	}
	for i, msg := range req.Messages {
		if msg.Role != model.RoleTool {
			flush()
		}
		wm := goopenai.ChatCompletionMessage{
			Role:       string(msg.Role),
			Content:    msg.Content,
			ToolCallID: msg.ToolCallID,
		}
		if len(msg.Images) > 0 {
			switch msg.Role {
			case model.RoleUser:
				if msg.Content != "" {
					wm.MultiContent = append(wm.MultiContent, goopenai.ChatMessagePart{Type: goopenai.ChatMessagePartTypeText, Text: msg.Content})
				}
				wm.Content = ""
				wm.MultiContent = append(wm.MultiContent, imageParts(msg.Images)...)
			case model.RoleTool:
				call := msg.ToolCallID
				if msg.Name != "" {
					call += " (" + msg.Name + ")"
				}
				label := "The image returned by tool call " + call + ":"
				if len(msg.Images) > 1 {
					label = fmt.Sprintf("The %d images returned by tool call %s:", len(msg.Images), call)
				}
				toolImages = append(toolImages, goopenai.ChatMessagePart{Type: goopenai.ChatMessagePartTypeText, Text: label})
				toolImages = append(toolImages, imageParts(msg.Images)...)
			default:
				return w, &model.Error{Code: model.CodeBadRequest, Message: fmt.Sprintf("messages[%d]: a %s message cannot carry images", i, msg.Role)}
			}
		}
		// Reasoning is not sent back: some providers (DeepSeek) reject it in
		// input messages. Tool messages carry no name on the wire.
		if msg.Role != model.RoleTool {
			wm.Name = msg.Name
		}
		for _, tc := range msg.ToolCalls {
			wm.ToolCalls = append(wm.ToolCalls, goopenai.ToolCall{
				ID:       tc.ID,
				Type:     goopenai.ToolTypeFunction,
				Function: goopenai.FunctionCall{Name: tc.Name, Arguments: tc.Args},
			})
		}
		w.Messages = append(w.Messages, wm)
	}
	flush()
	for _, td := range req.Tools {
		params := td.Parameters
		if len(params) == 0 {
			params = emptyParameters
		} else if !json.Valid(params) {
			return w, &model.Error{Code: model.CodeBadRequest, Message: fmt.Sprintf("tool %q: parameters are not valid JSON", td.Name)}
		}
		w.Tools = append(w.Tools, goopenai.Tool{
			Type:     goopenai.ToolTypeFunction,
			Function: &goopenai.FunctionDefinition{Name: td.Name, Description: td.Description, Parameters: params},
		})
	}
	// parallel_tool_calls is only allowed alongside tools.
	if p := firstNonNil(req.ParallelToolCalls, m.cfg.ParallelToolCalls); p != nil && len(w.Tools) > 0 {
		w.ParallelToolCalls = *p
	}
	return w, nil
}

// imageParts renders images as image_url parts with base64 data URLs.
func imageParts(images []model.Image) []goopenai.ChatMessagePart {
	parts := make([]goopenai.ChatMessagePart, len(images))
	for i, img := range images {
		parts[i] = goopenai.ChatMessagePart{
			Type:     goopenai.ChatMessagePartTypeImageURL,
			ImageURL: &goopenai.ChatMessageImageURL{URL: "data:" + img.MIMEType + ";base64," + base64.StdEncoding.EncodeToString(img.Data)},
		}
	}
	return parts
}

// firstNonNil returns the first non-nil pointer.
func firstNonNil[T any](ps ...*T) *T {
	for _, p := range ps {
		if p != nil {
			return p
		}
	}
	return nil
}

// estimateUsage approximates usage as characters/4 when the provider sent
// none. Input reasoning is not counted because it is not sent.
func estimateUsage(req model.Request, out model.Message) model.Usage {
	in := 0
	for _, msg := range req.Messages {
		in += sentChars(msg)
	}
	for _, td := range req.Tools {
		in += len(td.Name) + len(td.Description) + len(td.Parameters)
	}
	u := model.Usage{
		Prompt:     tokens(in),
		Completion: tokens(sentChars(out) + len(out.ReasoningContent)),
		Estimated:  true,
	}
	u.Total = u.Prompt + u.Completion
	return u
}

// sentChars counts the characters of msg that go on the wire.
func sentChars(msg model.Message) int {
	n := len(msg.Content)
	for _, tc := range msg.ToolCalls {
		n += len(tc.Name) + len(tc.Args)
	}
	return n
}

// tokens rounds chars/4 up.
func tokens(chars int) int { return (chars + 3) / 4 }
