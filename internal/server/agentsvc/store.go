package agentsvc

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/plumbhq/plumb/internal/tenant"
	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/store"
)

// DurableThreads adapts a durable thread store (SQLite or PostgreSQL) to
// Threads.
func DurableThreads(s store.Threads) Threads { return durableThreads{s} }

type durableThreads struct{ store.Threads }

func (t durableThreads) ListThreads(ctx context.Context, q ThreadQuery) ([]ListedThread, string, error) {
	infos, next, err := t.Threads.ListThreads(ctx, store.ListQuery{Tenant: q.Tenant, Labels: q.Labels, Status: q.Status, PageSize: q.PageSize, PageToken: q.PageToken})
	if errors.Is(err, store.ErrBadPageToken) {
		return nil, "", fmt.Errorf("%w: %w", agent.ErrInvalidInput, err)
	}
	if err != nil {
		return nil, "", err
	}
	out := make([]ListedThread, len(infos))
	for i, ti := range infos {
		out[i] = ListedThread{ThreadData: ti.ThreadData, MessageCount: ti.MessageCount}
	}
	return out, next, nil
}

// MemoryThreads adapts the ephemeral thread store to Threads; it pages
// with the same keyset order as the durable stores (UpdatedAt, then id,
// descending).
func MemoryThreads(s *agent.MemoryStore) Threads { return memoryThreads{s} }

type memoryThreads struct{ *agent.MemoryStore }

func (t memoryThreads) ListThreads(ctx context.Context, q ThreadQuery) ([]ListedThread, string, error) {
	var (
		after   int64
		afterID string
	)
	if q.PageToken != "" {
		b, err := base64.RawURLEncoding.DecodeString(q.PageToken)
		u, id, ok := strings.Cut(string(b), ":")
		n, perr := strconv.ParseInt(u, 10, 64)
		if err != nil || !ok || perr != nil || id == "" {
			return nil, "", fmt.Errorf("%w: invalid page token", agent.ErrInvalidInput)
		}
		after, afterID = n, id
	}
	all, err := t.MemoryStore.ListThreads(ctx, q.Labels)
	if err != nil {
		return nil, "", err
	}
	size := q.PageSize
	if size <= 0 {
		size = DefaultPageSize
	}
	var out []ListedThread
	for _, td := range all {
		u := td.Thread.UpdatedAt.UnixNano()
		if q.PageToken != "" && (u > after || (u == after && td.Thread.ID >= afterID)) {
			continue
		}
		if q.Status != "" && td.Status() != q.Status {
			continue
		}
		if q.Tenant != "" && tenant.Norm(td.Thread.Tenant) != q.Tenant {
			continue
		}
		if len(out) == size {
			last := out[size-1].Thread
			tok := strconv.FormatInt(last.UpdatedAt.UnixNano(), 10) + ":" + last.ID
			return out, base64.RawURLEncoding.EncodeToString([]byte(tok)), nil
		}
		out = append(out, ListedThread{ThreadData: td, MessageCount: len(td.Messages)})
	}
	return out, "", nil
}
