package egressapproval

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/durationpb"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/tenant"
	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/store"
)

// watch is this replica's watch of one box's egress requests, shared by
// the tool calls running in it.
type watch struct {
	s         *Service
	sandboxID string
	ready     chan struct{} // closed once the box asks, or the watch failed
	done      chan struct{}
	stop      context.CancelFunc

	mu    sync.Mutex
	calls []*callRef                    // running calls, oldest first
	asked map[string]*callRef           // the call each pending request went to
	recs  map[string]store.EgressRecord // pending requests
}

// storeTimeout bounds the store and worker calls of one request.
const storeTimeout = time.Minute

// callRef is one running tool call of a watch.
type callRef struct{ spec Spec }

// startWatch opens the watch of spec's box; called with s.mu held.
func (s *Service) startWatch(ctx context.Context, spec Spec) *watch {
	wctx, stop := context.WithCancel(tenant.With(context.WithoutCancel(ctx), tenant.Norm(spec.Tenant)))
	w := &watch{s: s, sandboxID: spec.SandboxID, ready: make(chan struct{}), done: make(chan struct{}), stop: stop,
		asked: map[string]*callRef{}, recs: map[string]store.EgressRecord{}}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer close(w.done)
		var once sync.Once
		markReady := func() { once.Do(func() { close(w.ready) }) }
		defer markReady()
		if err := w.run(wctx, markReady); err != nil && wctx.Err() == nil {
			s.lg.Warn("watch a box's egress requests (its connections off the allow-list are refused at once)",
				zap.String("sandbox-id", spec.SandboxID), zap.String("thread-id", spec.ThreadID), zap.Error(err))
		}
		cctx, cancel := context.WithTimeout(context.WithoutCancel(wctx), storeTimeout)
		defer cancel()
		w.closeAll(cctx, "the tool call that was running ended")
	}()
	return w
}

// run streams the box's requests until ctx ends or the stream fails.
func (w *watch) run(ctx context.Context, ready func()) error {
	c, err := w.s.cfg.Workers.Client(ctx, w.sandboxID)
	if err != nil {
		return err
	}
	st, err := c.WatchEgressRequests(ctx, &plumbv1.WatchEgressRequestsRequest{SandboxId: w.sandboxID, Timeout: durationpb.New(w.s.cfg.Timeout)})
	if err != nil {
		return err
	}
	if _, err := st.Header(); err != nil {
		return err
	}
	ready()
	for {
		m, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		// The records are written even when the tool call ends meanwhile
		// (its end cancels ctx): the audit and the event need them.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
		r := m.GetRequest()
		if r.GetClosed() {
			w.closed(sctx, r)
		} else {
			w.asked1(sctx, r)
		}
		cancel()
	}
}

// asked1 records a new request, reports it to the oldest running call,
// and approves it at once when a stored grant or an earlier approval of
// the run already covers it.
func (w *watch) asked1(ctx context.Context, r *plumbv1.EgressRequest) {
	w.mu.Lock()
	if _, ok := w.recs[r.GetId()]; ok || len(w.calls) == 0 {
		w.mu.Unlock()
		return
	}
	call := w.calls[0]
	rec := store.EgressRecord{Tenant: tenant.Norm(call.spec.Tenant), ThreadID: call.spec.ThreadID, RequestID: r.GetId(),
		Agent: call.spec.Agent, SandboxID: w.sandboxID, Host: r.GetHost(), Port: int(r.GetPort()), Created: w.s.cfg.Now(), Status: store.EgressPending}
	if c := call.spec.Call; c != nil {
		rec.ToolCallID, rec.AgentPath, rec.RunID = c.ToolCallID, c.AgentPath, c.RunID
	}
	w.recs[rec.RequestID], w.asked[rec.RequestID] = rec, call
	w.mu.Unlock()
	lg := w.s.lg.With(zap.String("thread-id", rec.ThreadID), zap.String("sandbox-id", w.sandboxID), zap.String("request-id", rec.RequestID))
	if err := w.s.cfg.Store.AddEgressRequest(ctx, rec); err != nil {
		// Nobody could decide it: the box gets its 403 at the timeout.
		lg.Warn("record an egress request", zap.Error(err))
	}
	report(call, backend.EgressEvent{RequestID: rec.RequestID, Host: rec.Host, Port: rec.Port, Agent: rec.Agent, SandboxID: w.sandboxID})
	if by := w.covered(ctx, rec); by != "" {
		d := store.EgressDecision{Status: store.EgressApproved, Scope: store.EgressScopeRun, DecidedBy: by, Decided: w.s.cfg.Now()}
		rec, err := w.s.cfg.Store.DecideEgressRequest(ctx, rec.ThreadID, rec.RequestID, d)
		if err == nil {
			err = w.s.deliver(ctx, rec, "")
		}
		if err != nil {
			lg.Warn("approve an egress request from a grant", zap.Error(err))
		} else {
			lg.Info("egress approved from a grant", zap.String("host", rec.Host), zap.Int("port", rec.Port), zap.String("by", by))
		}
	}
}

// covered names the approval that already admits rec's destination: an
// unrevoked THREAD or AGENT grant (a box that was given it does not ask;
// this one may predate it), or an approval earlier in the same run.
func (w *watch) covered(ctx context.Context, rec store.EgressRecord) string {
	grants, err := w.s.cfg.Store.EgressGrants(ctx, rec.Tenant, rec.Agent, rec.ThreadID)
	if err != nil {
		return ""
	}
	for _, g := range grants {
		if g.Host == rec.Host && g.Port == rec.Port {
			return fmt.Sprintf("grant %s/%s (%s, approved by %s)", g.ThreadID, g.RequestID, g.Scope, g.DecidedBy)
		}
	}
	if rec.RunID == "" {
		return ""
	}
	list, _, err := w.s.cfg.Store.ListEgressGrants(ctx, store.EgressQuery{Tenant: rec.Tenant, ThreadID: rec.ThreadID, PageSize: 100})
	if err != nil {
		return ""
	}
	for _, g := range list {
		if g.RunID == rec.RunID && g.Host == rec.Host && g.Port == rec.Port && g.RequestID != rec.RequestID && !g.Revoked {
			return fmt.Sprintf("grant %s/%s (%s, approved by %s)", g.ThreadID, g.RequestID, g.Scope, g.DecidedBy)
		}
	}
	return ""
}

// closed reports how a request ended; one nobody decided is recorded as
// closed with the proxy's reason.
func (w *watch) closed(ctx context.Context, r *plumbv1.EgressRequest) {
	w.mu.Lock()
	rec, ok := w.recs[r.GetId()]
	call := w.asked[r.GetId()]
	delete(w.recs, r.GetId())
	delete(w.asked, r.GetId())
	w.mu.Unlock()
	if !ok {
		return
	}
	w.finish(ctx, rec, call, true, r.GetAllowed(), r.GetReason())
}

// finish records and reports the end of a request. told: the worker said
// whether the connection was let through (allowed); without its word (the
// watch ended first) a request decided meanwhile ends as it was decided:
// an approval delivered before the tool call ended let its connection
// through.
func (w *watch) finish(ctx context.Context, rec store.EgressRecord, call *callRef, told, allowed bool, reason string) {
	stored, err := w.s.cfg.Store.DecideEgressRequest(ctx, rec.ThreadID, rec.RequestID,
		store.EgressDecision{Status: store.EgressClosed, Decided: w.s.cfg.Now(), Reason: reason})
	if errors.Is(err, store.ErrEgressDecided) {
		stored, err = w.s.cfg.Store.EgressRequest(ctx, rec.ThreadID, rec.RequestID)
	}
	ev := backend.EgressEvent{RequestID: rec.RequestID, Host: rec.Host, Port: rec.Port, Agent: rec.Agent, SandboxID: w.sandboxID,
		Closed: true, Allowed: allowed, Reason: reason}
	if err == nil && (stored.Status == store.EgressApproved || stored.Status == store.EgressRejected) {
		ev.DecidedBy = stored.DecidedBy
		if stored.Status == store.EgressApproved {
			ev.Scope = string(stored.Scope)
		}
		if !told {
			ev.Allowed = stored.Status == store.EgressApproved
			if ev.Allowed {
				ev.Reason = ""
			} else if stored.Reason != "" {
				ev.Reason = stored.Reason
			}
		}
	}
	report(call, ev)
}

// closeAll ends what is still pending when the watch ends (the proxy
// refuses it as the last watcher leaves).
func (w *watch) closeAll(ctx context.Context, reason string) {
	w.mu.Lock()
	recs, asked := w.recs, w.asked
	w.recs, w.asked = map[string]store.EgressRecord{}, map[string]*callRef{}
	w.mu.Unlock()
	for id, rec := range recs {
		w.finish(ctx, rec, asked[id], false, false, reason)
	}
}

func report(call *callRef, ev backend.EgressEvent) {
	if call != nil && call.spec.Call != nil && call.spec.Call.Report != nil {
		call.spec.Call.Report(ev)
	}
}
