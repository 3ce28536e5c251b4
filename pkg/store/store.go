package store

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"time"

	"github.com/plumbhq/plumb/pkg/agent"
)

// Threads is a durable thread store: agent.Store plus what agentd's thread
// RPCs and thread backends need. Every implementation must pass
// storetest.Run and storetest.RunThreads.
type Threads interface {
	agent.Store
	// Thread returns a thread's record (labels, sandbox id, times) without
	// its log or state, or agent.ErrThreadNotFound.
	Thread(ctx context.Context, id string) (agent.Thread, error)
	// SetSandbox records the sandbox created for a thread ("" clears it).
	SetSandbox(ctx context.Context, threadID, sandboxID string) error
	// DeleteThread removes a thread and everything stored with it, or
	// returns agent.ErrThreadNotFound.
	DeleteThread(ctx context.Context, id string) error
	// ListThreads returns one page of threads, newest UpdatedAt first
	// (then id, descending), and the next page's token ("" at the end). A
	// token it did not issue is ErrBadPageToken.
	ListThreads(ctx context.Context, q ListQuery) ([]ThreadInfo, string, error)
	// Close releases the store.
	Close() error
}

// MessageRanger reads part of a thread's message log without loading the
// rest of the thread: a page of ListMessages costs its own messages, not
// the whole log (a console opening a thread of thousands of messages reads
// it page by page). Both durable stores implement it.
type MessageRanger interface {
	// MessageRange returns the thread's tenant, the length of its log and
	// up to limit messages from index first (none when first is at or past
	// the end), or agent.ErrThreadNotFound.
	MessageRange(ctx context.Context, threadID string, first, limit int) (MessageRange, error)
}

// MessageRange is part of a thread's message log.
type MessageRange struct {
	// Tenant owns the thread (as stored: callers map "" to "default").
	Tenant string
	// Total is the length of the whole log.
	Total int
	// Messages are the log's messages from the index asked for.
	Messages []agent.Message
}

// Errors of the durable stores.
var (
	// ErrBusy: the database stayed locked past the busy timeout (another
	// writer held it), could not serialize the transaction or could not be
	// reached; the operation may be retried.
	ErrBusy = errors.New("thread store busy")
	// ErrBadPageToken is returned for a page token the store did not issue.
	ErrBadPageToken = errors.New("invalid page token")
)

// ListQuery selects a page of threads.
type ListQuery struct {
	// Tenant, if set, keeps only that tenant's threads ("default" also
	// matches threads stored without a tenant).
	Tenant string
	// Labels must all be present with these values.
	Labels map[string]string
	// Status filters by derived status ("" = any).
	Status agent.ThreadStatus
	// PageSize bounds the page (default 50, max 500).
	PageSize int
	// PageToken continues a previous listing.
	PageToken string
}

// Size is the page size the query asks for, defaulted and capped.
func (q ListQuery) Size() int {
	if q.PageSize <= 0 {
		return 50
	}
	return min(q.PageSize, 500)
}

// ThreadInfo is a listed thread: everything but the message log and the
// checkpoint list, plus the log's length.
type ThreadInfo struct {
	*agent.ThreadData
	// MessageCount is the length of the message log.
	MessageCount int
}

// DefaultTenant is the tenant stored for threads created without one
// (and for every thread written before tenancy existed).
const DefaultTenant = "default"

// TenantOf is the tenant to store for t: its own, or DefaultTenant.
func TenantOf(t agent.Thread) string {
	if t.Tenant == "" {
		return DefaultTenant
	}
	return t.Tenant
}

// cutPage cuts a listing of up to one more than size (read to learn
// whether a next page exists) into a page and the next page's token, made
// of key of the page's last item ("" when there is no next page).
func cutPage[T any](list []T, size int, key func(T) (int64, string)) ([]T, string) {
	if len(list) <= size {
		return list, ""
	}
	list = list[:size]
	return list, EncodePageToken(key(list[size-1]))
}

// EncodePageToken is the token of the page after the thread with this
// UpdatedAt (Unix nanoseconds) and id.
func EncodePageToken(updated int64, id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(updated, 10) + ":" + id))
}

// DecodePageToken returns the UpdatedAt (Unix nanoseconds) and id a token
// continues after, or ErrBadPageToken.
func DecodePageToken(tok string) (int64, string, error) {
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return 0, "", ErrBadPageToken
	}
	u, id, ok := strings.Cut(string(b), ":")
	n, err := strconv.ParseInt(u, 10, 64)
	if !ok || err != nil || id == "" {
		return 0, "", ErrBadPageToken
	}
	return n, id, nil
}

// State is the JSON document a store keeps as a thread's latest
// checkpointed state (the same in every store, so threads can be copied
// between them).
type State struct {
	Todos   []agent.Todo               `json:"todos,omitempty"`
	Summary *agent.Summary             `json:"summary,omitempty"`
	Private map[string]json.RawMessage `json:"private,omitempty"`
	Pending *agent.PendingStep         `json:"pending,omitempty"`
}

// EditCall returns the stored message body (JSON) with the arguments of
// call e.CallID replaced (an EDIT decision), or agent.ErrConflict when the
// message has no such call.
func EditCall(body string, e agent.CallEdit) (string, error) {
	var m agent.Message
	if err := json.Unmarshal([]byte(body), &m); err != nil {
		return "", fmt.Errorf("message %d: %w", e.MessageIndex, err)
	}
	found := false
	for i := range m.ToolCalls {
		if m.ToolCalls[i].ID == e.CallID {
			m.ToolCalls[i].Args = e.Args
			found = true
		}
	}
	if !found {
		return "", fmt.Errorf("no call %s in message %d: %w", e.CallID, e.MessageIndex, agent.ErrConflict)
	}
	b, err := json.Marshal(m)
	return string(b), err
}

// MergeMetadata returns the stored labels (JSON) with set applied: keys of
// set are added or replaced, the others kept.
func MergeMetadata(stored string, set map[string]string) (string, error) {
	cur := map[string]string{}
	if err := json.Unmarshal([]byte(stored), &cur); err != nil {
		return "", fmt.Errorf("metadata: %w", err)
	}
	maps.Copy(cur, set)
	b, err := json.Marshal(cur)
	return string(b), err
}

// Nanos is how the stores keep times: nanoseconds since the Unix epoch, so
// that page tokens and ordering agree across stores.
func Nanos(t time.Time) int64 { return t.UnixNano() }

// FromNanos is the UTC time of n (see Nanos).
func FromNanos(n int64) time.Time { return time.Unix(0, n).UTC() }

// Scanner is one row of a query as both drivers return it (*sql.Row,
// *sql.Rows, pgx.Row, pgx.Rows): what the shared row decoders read.
type Scanner interface {
	Scan(dest ...any) error
}

// JSON encodes v as the text the stores keep JSON columns in.
func JSON(v any) (string, error) {
	b, err := json.Marshal(v)
	return string(b), err
}
