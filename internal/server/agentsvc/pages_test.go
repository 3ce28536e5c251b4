package agentsvc_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/server/agentsvc"
	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/backend/state"
	"github.com/plumbhq/plumb/pkg/model"
)

// bigThread stores a thread whose message log is about 6 MiB (48
// messages of 128 KiB), with files and a checkpoint, straight into the
// env's store.
func bigThread(t *testing.T, e *env, files int) (string, []agent.Message) {
	t.Helper()
	res, err := e.c.CreateThread(e.ctx(), &plumbv1.CreateThreadRequest{})
	if err != nil {
		t.Fatal(err)
	}
	id := res.GetThread().GetId()
	var msgs []agent.Message
	for i := range 48 {
		body := fmt.Sprintf("message %d ", i) + strings.Repeat("x", 128<<10)
		msgs = append(msgs, agent.Message{Message: model.Message{Role: model.RoleUser, Content: body}, Source: agent.SourceInput})
	}
	doc, err := json.Marshal(state.File{Content: []byte("hi")})
	if err != nil {
		t.Fatal(err)
	}
	docs := map[string]json.RawMessage{}
	for i := range files {
		docs[filePath(i)] = doc
	}
	cp := &agent.Checkpoint{ThreadID: id, Phase: agent.PhaseFinal, Append: msgs, Files: docs,
		Run: agent.RunRecord{RunID: "run-1", Status: agent.StatusCompleted}}
	if err := e.store.SaveCheckpoint(context.Background(), cp); err != nil {
		t.Fatal(err)
	}
	return id, msgs
}

// filePath is the path of bigThread's file i, about 60 bytes long.
func filePath(i int) string {
	return fmt.Sprintf("/files/%05d-%s.txt", i, strings.Repeat("p", 40))
}

// TestGetThreadFullOverFourMiB: a thread whose log is over 4 MiB is read
// by a gRPC client with the default 4 MiB receive limit. GetThread FULL
// answers with the first part of the log and a token, and ListMessages
// pages through the rest: every message once, in order.
func TestGetThreadFullOverFourMiB(t *testing.T) {
	e := newEnv(t)
	id, want := bigThread(t, e, 3)

	res, err := e.c.GetThread(e.ctx(), &plumbv1.GetThreadRequest{ThreadId: id, View: plumbv1.ThreadView_THREAD_VIEW_FULL})
	if err != nil {
		t.Fatalf("GetThread FULL of a %d-message thread: %v", len(want), err)
	}
	th := res.GetThread()
	if n := proto.Size(res); n >= 4<<20 {
		t.Fatalf("GetThread FULL is %d bytes, not under 4 MiB", n)
	}
	if th.GetMessageCount() != int64(len(want)) || len(th.GetMessages()) == 0 || len(th.GetMessages()) >= len(want) || th.GetMessagesNextPageToken() == "" {
		t.Fatalf("FULL view: %d of %d messages, token %q; want a first part and a token",
			len(th.GetMessages()), th.GetMessageCount(), th.GetMessagesNextPageToken())
	}
	if len(th.GetFiles()) != 3 || th.GetFilesNextPageToken() != "" || len(th.GetCheckpoints()) != 1 || th.GetCheckpointsNextPageToken() != "" {
		t.Fatalf("FULL view: files %v (token %q), checkpoints %v; want all three files and the checkpoint",
			th.GetFiles(), th.GetFilesNextPageToken(), th.GetCheckpoints())
	}

	got := th.GetMessages()
	tok := th.GetMessagesNextPageToken()
	for pages := 0; tok != ""; pages++ {
		if pages > len(want) {
			t.Fatal("ListMessages does not reach the end of the log")
		}
		page, err := e.c.ListMessages(e.ctx(), &plumbv1.ListMessagesRequest{ThreadId: id, PageSize: 500, PageToken: tok})
		if err != nil {
			t.Fatalf("ListMessages: %v", err)
		}
		got, tok = append(got, page.GetMessages()...), page.GetNextPageToken()
	}
	if len(got) != len(want) {
		t.Fatalf("read %d messages, want %d", len(got), len(want))
	}
	for i, m := range got {
		if m.GetIndex() != int64(i) || m.GetContent() != want[i].Content {
			t.Fatalf("message %d: index %d, content %.20q; want index %d, %.20q", i, m.GetIndex(), m.GetContent(), i, want[i].Content)
		}
	}

	// A small page size pages by count.
	page, err := e.c.ListMessages(e.ctx(), &plumbv1.ListMessagesRequest{ThreadId: id, PageSize: 2})
	if err != nil || len(page.GetMessages()) != 2 || page.GetMessages()[1].GetIndex() != 1 || page.GetNextPageToken() == "" {
		t.Fatalf("ListMessages page_size 2: %v, %v", page, err)
	}
}

// TestListStateFilesAndCheckpoints: the FULL view stops the file list at
// its budget with a token; ListStateFiles pages through every file once,
// ListCheckpoints through the checkpoints; bad requests are
// INVALID_ARGUMENT and another tenant's thread is NOT_FOUND.
func TestListStateFilesAndCheckpoints(t *testing.T) {
	e := newEnv(t)
	id, _ := bigThread(t, e, 6000) // about 380 KiB of file entries

	res, err := e.c.GetThread(e.ctx(), &plumbv1.GetThreadRequest{ThreadId: id, View: plumbv1.ThreadView_THREAD_VIEW_FULL})
	if err != nil {
		t.Fatal(err)
	}
	th := res.GetThread()
	if len(th.GetFiles()) == 0 || len(th.GetFiles()) >= 6000 || th.GetFilesNextPageToken() == "" {
		t.Fatalf("FULL view lists %d of 6000 files, token %q; want a first part and a token", len(th.GetFiles()), th.GetFilesNextPageToken())
	}
	seen := map[string]bool{}
	var files []*plumbv1.StateFile
	for tok := ""; ; {
		page, err := e.c.ListStateFiles(e.ctx(), &plumbv1.ListStateFilesRequest{ThreadId: id, PageSize: 500, PageToken: tok})
		if err != nil {
			t.Fatalf("ListStateFiles: %v", err)
		}
		files = append(files, page.GetFiles()...)
		if tok = page.GetNextPageToken(); tok == "" {
			break
		}
	}
	for i, f := range files {
		if want := filePath(i); f.GetPath() != want || seen[f.GetPath()] || f.GetSize() != 2 {
			t.Fatalf("file %d is %v, want %s once, 2 bytes", i, f, want)
		}
		seen[f.GetPath()] = true
	}
	if len(files) != 6000 {
		t.Fatalf("ListStateFiles listed %d files, want 6000", len(files))
	}

	cps, err := e.c.ListCheckpoints(e.ctx(), &plumbv1.ListCheckpointsRequest{ThreadId: id, PageSize: 1})
	if err != nil || len(cps.GetCheckpoints()) != 1 || cps.GetCheckpoints()[0].GetRunId() != "run-1" || cps.GetNextPageToken() != "" {
		t.Fatalf("ListCheckpoints: %v, %v; want the one checkpoint", cps, err)
	}

	_, err = e.c.ListMessages(e.ctx(), &plumbv1.ListMessagesRequest{ThreadId: id, PageToken: "garbage"})
	wantStatus(t, err, codes.InvalidArgument, agentsvc.ReasonInvalidArgument)
	_, err = e.c.ListMessages(e.ctx(), &plumbv1.ListMessagesRequest{ThreadId: id, PageToken: th.GetFilesNextPageToken()})
	wantStatus(t, err, codes.InvalidArgument, agentsvc.ReasonInvalidArgument)
	_, err = e.c.ListCheckpoints(e.ctx(), &plumbv1.ListCheckpointsRequest{ThreadId: id, PageSize: -1})
	wantStatus(t, err, codes.InvalidArgument, agentsvc.ReasonInvalidArgument)
	_, err = e.c.ListStateFiles(as(e.ctx(), "other"), &plumbv1.ListStateFilesRequest{ThreadId: id})
	wantStatus(t, err, codes.NotFound, agentsvc.ReasonThreadNotFound)
	_, err = e.c.ListMessages(as(e.ctx(), "other"), &plumbv1.ListMessagesRequest{ThreadId: id})
	wantStatus(t, err, codes.NotFound, agentsvc.ReasonThreadNotFound)
	_, err = e.c.ListCheckpoints(as(e.ctx(), "other"), &plumbv1.ListCheckpointsRequest{ThreadId: id})
	wantStatus(t, err, codes.NotFound, agentsvc.ReasonThreadNotFound)
	_, err = e.c.ListMessages(e.ctx(), &plumbv1.ListMessagesRequest{ThreadId: "nope"})
	wantStatus(t, err, codes.NotFound, agentsvc.ReasonThreadNotFound)
	_, err = e.c.ListMessages(e.ctx(), &plumbv1.ListMessagesRequest{})
	wantStatus(t, err, codes.InvalidArgument, agentsvc.ReasonInvalidArgument)
}

// TestListThreadsPagesStayUnderFourMiB: 300 threads with the largest
// labels allowed (about 5 MiB in all) are listed with page_size 500 by a
// client with the default 4 MiB receive limit: each page stays under it,
// and the pages list every thread once.
func TestListThreadsPagesStayUnderFourMiB(t *testing.T) {
	for name, opts := range map[string][]option{"durable": nil, "memory": {withMemoryStore()}} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, opts...)
			md := map[string]string{}
			for i := range 64 {
				md[fmt.Sprintf("label-%02d", i)] = strings.Repeat("v", 256)
			}
			want := map[string]bool{}
			for range 300 {
				res, err := e.c.CreateThread(e.ctx(), &plumbv1.CreateThreadRequest{Metadata: md})
				if err != nil {
					t.Fatal(err)
				}
				want[res.GetThread().GetId()] = true
			}
			seen := map[string]bool{}
			pages := 0
			for tok := ""; ; pages++ {
				if pages > 300 {
					t.Fatal("ListThreads does not reach the end")
				}
				res, err := e.c.ListThreads(e.ctx(), &plumbv1.ListThreadsRequest{PageSize: 500, PageToken: tok})
				if err != nil {
					t.Fatalf("ListThreads page %d: %v", pages, err)
				}
				for _, th := range res.GetThreads() {
					if seen[th.GetId()] || !want[th.GetId()] {
						t.Fatalf("thread %s listed twice or unknown", th.GetId())
					}
					seen[th.GetId()] = true
				}
				if tok = res.GetNextPageToken(); tok == "" {
					break
				}
			}
			if len(seen) != len(want) || pages < 1 {
				t.Fatalf("listed %d of %d threads in %d pages; want all, in more than one page", len(seen), len(want), pages+1)
			}
		})
	}
}
