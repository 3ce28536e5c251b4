package agentsvc

import (
	"context"
	"encoding/base64"
	"fmt"
	"math"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/runhost"
	"github.com/plumbhq/plumb/internal/tenant"
	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/pbconv/agentconv"
	"github.com/plumbhq/plumb/pkg/store"
)

// Byte budgets of the thread lists. gRPC clients refuse a message over
// 4 MiB by default (grpc-go, grpcio, grpcurl): a GetThread FULL answer
// and every page stay below it, whatever the thread's size.
const (
	// MaxPageBytes bounds the items of one ListThreads, ListMessages,
	// ListStateFiles or ListCheckpoints page, and the messages of a FULL
	// view.
	MaxPageBytes = 3 << 20
	// fullListBytes bounds the files and the checkpoints of a FULL view.
	fullListBytes = 256 << 10
)

// Page token kinds: a token of one list is refused by another.
const (
	messagesToken    = "m"
	filesToken       = "f"
	checkpointsToken = "c"
)

// pageToken encodes where a list goes on.
func pageToken(kind, at string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(kind + ":" + at))
}

// errForeignToken answers a page token this server did not issue for
// the list asked for.
var errForeignToken = InvalidField("page_token", "page_token was not issued by this server for this list")

// parsePageToken decodes a token of kind ("" for an empty token).
func parsePageToken(kind, tok string) (string, error) {
	if tok == "" {
		return "", nil
	}
	b, err := base64.RawURLEncoding.DecodeString(tok)
	k, at, ok := strings.Cut(string(b), ":")
	if err != nil || !ok || k != kind || at == "" {
		return "", errForeignToken
	}
	return at, nil
}

// parseIndexToken decodes a token of kind that names a position in its
// list (0 for an empty token).
func parseIndexToken(kind, tok string) (int64, error) {
	at, err := parsePageToken(kind, tok)
	if err != nil || at == "" {
		return 0, err
	}
	n, err := strconv.ParseInt(at, 10, 64)
	if err != nil {
		return 0, errForeignToken
	}
	return n, nil
}

// pageLimit checks a request's page_size (0 = DefaultPageSize, above
// MaxPageSize = MaxPageSize).
func pageLimit(size int32) (agentconv.Limit, error) {
	switch {
	case size < 0:
		return agentconv.Limit{}, InvalidField("page_size", "page_size must not be negative")
	case size == 0:
		size = runhost.DefaultPageSize
	case size > runhost.MaxPageSize:
		size = runhost.MaxPageSize
	}
	return agentconv.Limit{Count: int(size), Bytes: MaxPageBytes}, nil
}

// fullThread is the FULL view of td in status st: the BASIC view plus
// the first page of each list, each bounded in bytes, with a token for
// the rest.
func fullThread(td *agent.ThreadData, st agent.ThreadStatus) *plumbv1.Thread {
	out := agentconv.ThreadToPB(td, st, len(td.Messages))
	all := math.MaxInt
	out.Messages, out.MessagesNextPageToken = messagesPage(td, 0, agentconv.Limit{Count: all, Bytes: MaxPageBytes})
	out.Files, out.FilesNextPageToken = filesPage(td, "", agentconv.Limit{Count: all, Bytes: fullListBytes})
	out.Checkpoints, out.CheckpointsNextPageToken = checkpointsPage(td, 0, agentconv.Limit{Count: all, Bytes: fullListBytes})
	return out
}

// messagesPage, filesPage and checkpointsPage convert one page of a list
// and the token of the next ("" at its end).
func messagesPage(td *agent.ThreadData, first int, lim agentconv.Limit) ([]*plumbv1.ThreadMessage, string) {
	msgs, next := agentconv.MessagesToPB(td.Messages, min(first, len(td.Messages)), lim)
	if next == len(td.Messages) {
		return msgs, ""
	}
	return msgs, pageToken(messagesToken, strconv.Itoa(next))
}

func filesPage(td *agent.ThreadData, after string, lim agentconv.Limit) ([]*plumbv1.StateFile, string) {
	files, more := agentconv.StateFilesToPB(td.Files, after, lim)
	if !more {
		return files, ""
	}
	return files, pageToken(filesToken, files[len(files)-1].GetPath())
}

func checkpointsPage(td *agent.ThreadData, after int64, lim agentconv.Limit) ([]*plumbv1.Checkpoint, string) {
	cps, more := agentconv.CheckpointsToPB(td.Checkpoints, after, lim)
	if !more {
		return cps, ""
	}
	return cps, pageToken(checkpointsToken, strconv.FormatInt(cps[len(cps)-1].GetId(), 10))
}

// threadsPage converts a page of listed threads in statuses st (next is
// the store's token after it), cut before
// MaxPageBytes: large labels, todo lists or pending interrupts must not
// make a page of 500 threads too large to receive. A cut page continues
// after its last thread, in the stores' keyset order.
func threadsPage(list []runhost.ListedThread, st []agent.ThreadStatus, next string) ([]*plumbv1.Thread, string) {
	out := make([]*plumbv1.Thread, 0, len(list))
	bytes := 0
	for i, t := range list {
		th := agentconv.ThreadToPB(t.ThreadData, st[i], t.MessageCount)
		n := proto.Size(th)
		if len(out) > 0 && bytes+n > MaxPageBytes {
			last := list[len(out)-1].Thread
			return out, store.EncodePageToken(store.Nanos(last.UpdatedAt), last.ID)
		}
		out, bytes = append(out, th), bytes+n
	}
	return out, next
}

// loadOwned loads thread id for a read by the caller's tenant.
func (s *Service) loadOwned(ctx context.Context, op, id string) (*agent.ThreadData, error) {
	if err := requireThreadID(id); err != nil {
		return nil, Status(err)
	}
	td, err := s.threads.LoadThread(ctx, id)
	if err == nil {
		err = owned(ctx, td)
	}
	if err != nil {
		return nil, s.status(op, err)
	}
	return td, nil
}

// ListMessages returns one page of a thread's message log, oldest first.
func (s *Service) ListMessages(ctx context.Context, req *plumbv1.ListMessagesRequest) (*plumbv1.ListMessagesResponse, error) {
	lim, err := pageLimit(req.GetPageSize())
	if err != nil {
		return nil, Status(err)
	}
	first, err := parseIndexToken(messagesToken, req.GetPageToken())
	if err == nil && first < 0 {
		err = errForeignToken
	}
	if err != nil {
		return nil, Status(err)
	}
	if s.cfg.Messages != nil {
		return s.listMessagesRange(ctx, req.GetThreadId(), int(first), lim)
	}
	td, err := s.loadOwned(ctx, "list messages", req.GetThreadId())
	if err != nil {
		return nil, err
	}
	msgs, next := messagesPage(td, int(first), lim)
	return &plumbv1.ListMessagesResponse{Messages: msgs, NextPageToken: next}, nil
}

// listMessagesRange serves a page of ListMessages from the store's range
// read: the page's messages only, not the whole log (a thread of thousands
// of messages read page by page would otherwise load all of them for every
// page).
func (s *Service) listMessagesRange(ctx context.Context, id string, first int, lim agentconv.Limit) (*plumbv1.ListMessagesResponse, error) {
	if err := requireThreadID(id); err != nil {
		return nil, Status(err)
	}
	r, err := s.cfg.Messages.MessageRange(ctx, id, first, lim.Count)
	if err == nil && tenant.Norm(r.Tenant) != tenant.From(ctx) {
		err = fmt.Errorf("thread %s: %w", id, agent.ErrThreadNotFound)
	}
	if err != nil {
		return nil, s.status("list messages", err)
	}
	msgs, n := agentconv.MessagesToPBAt(r.Messages, first, lim)
	out := &plumbv1.ListMessagesResponse{Messages: msgs}
	if next := first + n; next < r.Total {
		out.NextPageToken = pageToken(messagesToken, strconv.Itoa(next))
	}
	return out, nil
}

// ListStateFiles returns one page of a thread's State files, by path.
func (s *Service) ListStateFiles(ctx context.Context, req *plumbv1.ListStateFilesRequest) (*plumbv1.ListStateFilesResponse, error) {
	lim, err := pageLimit(req.GetPageSize())
	if err != nil {
		return nil, Status(err)
	}
	after, err := parsePageToken(filesToken, req.GetPageToken())
	if err != nil {
		return nil, Status(err)
	}
	td, err := s.loadOwned(ctx, "list state files", req.GetThreadId())
	if err != nil {
		return nil, err
	}
	files, next := filesPage(td, after, lim)
	return &plumbv1.ListStateFilesResponse{Files: files, NextPageToken: next}, nil
}

// ListCheckpoints returns one page of a thread's retained checkpoints,
// oldest first.
func (s *Service) ListCheckpoints(ctx context.Context, req *plumbv1.ListCheckpointsRequest) (*plumbv1.ListCheckpointsResponse, error) {
	lim, err := pageLimit(req.GetPageSize())
	if err != nil {
		return nil, Status(err)
	}
	after, err := parseIndexToken(checkpointsToken, req.GetPageToken())
	if err != nil {
		return nil, Status(err)
	}
	td, err := s.loadOwned(ctx, "list checkpoints", req.GetThreadId())
	if err != nil {
		return nil, err
	}
	cps, next := checkpointsPage(td, after, lim)
	if err := s.checkpointSnapshots(ctx, td.Thread.ID, cps); err != nil {
		return nil, s.status("list checkpoints", err)
	}
	return &plumbv1.ListCheckpointsResponse{Checkpoints: cps, NextPageToken: next}, nil
}

// checkpointSnapshots sets the snapshot id of each checkpoint of cps a
// workspace snapshot of the thread was taken at (Config.Snapshots).
func (s *Service) checkpointSnapshots(ctx context.Context, threadID string, cps []*plumbv1.Checkpoint) error {
	if s.cfg.Snapshots == nil || len(cps) == 0 {
		return nil
	}
	list, err := s.cfg.Snapshots.ThreadSnapshots(ctx, threadID)
	if err != nil {
		return err
	}
	at := map[int64]string{}
	for _, sn := range list {
		at[sn.CheckpointID] = sn.SnapshotID // the newest of a checkpoint wins
	}
	for _, c := range cps {
		c.SnapshotId = at[c.GetId()]
	}
	return nil
}
