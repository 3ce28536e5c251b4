package retention_test

import (
	"context"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/plumbhq/plumb/internal/retention"
	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/model"
	"github.com/plumbhq/plumb/pkg/store"
	"github.com/plumbhq/plumb/pkg/store/postgres"
	"github.com/plumbhq/plumb/pkg/store/postgres/pgtest"
	"github.com/plumbhq/plumb/pkg/store/sqlite"
)

// sweptStore is what the per-agent test needs of a thread store.
type sweptStore interface {
	store.Threads
	store.Webhooks
	store.Retention
	store.LeaseStore
}

// stores are the durable stores the per-agent test runs on: SQLite and a
// real PostgreSQL (pgtest).
var stores = []struct {
	name string
	open func(t *testing.T) sweptStore
}{
	{"sqlite", func(t *testing.T) sweptStore { return openStore(t) }},
	{"postgres", func(t *testing.T) sweptStore {
		st, err := postgres.Open(context.Background(), pgtest.New(t), postgres.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}},
}

var _ sweptStore = (*sqlite.Store)(nil)

// TestAgentRunEventsAndDeliveries: an agent's own run_events and
// webhook_deliveries override its tenant's and the default, shorter
// (they go sooner, whatever the tenant keeps) or 0 (kept forever); the
// agents without TTLs of their own follow their scope. On SQLite and on
// PostgreSQL.
func TestAgentRunEventsAndDeliveries(t *testing.T) {
	for _, sc := range stores {
		t.Run(sc.name, func(t *testing.T) {
			st := sc.open(t)
			ctx := context.Background()
			// Everything is 2 hours old: the default (24h) keeps it, quick
			// (1h) does not, keeper (0) keeps it forever, and tenant
			// "short" (1h) does not keep what has no agent TTL of its own.
			at := t0.Add(-2 * time.Hour)
			items := []struct {
				id, tenant, agent string
				gone              bool
			}{
				{"main", "default", "main", false},
				{"quick", "default", "quick", true},
				{"keeper-short", "short", "keeper", false},
				{"quick-forever", "forever", "quick", true},
				{"main-short", "short", "main", true},
				{"none-short", "short", "", false}, // "": the default agent, keeper here
			}
			for _, it := range items {
				id := "th-" + it.id
				if err := st.CreateThread(ctx, agent.Thread{ID: id, Tenant: it.tenant, CreatedAt: at, UpdatedAt: at}); err != nil {
					t.Fatal(err)
				}
				l, err := st.AcquireLease(ctx, id, "replica-a", at, time.Minute)
				if err != nil {
					t.Fatal(err)
				}
				run := "run-" + it.id
				evs := []store.Event{{RunID: run, Sequence: 1, Start: true, Body: []byte("1")}, {RunID: run, Sequence: 2, Terminal: true, Body: []byte("2")}}
				if err := st.AppendEvents(ctx, id, l.Fence(), evs); err != nil {
					t.Fatal(err)
				}
				cp := &agent.Checkpoint{ThreadID: id, Phase: agent.PhaseFinal, Append: []agent.Message{{Message: model.Message{Role: model.RoleUser, Content: "hi"}}},
					Fence: l.Fence(), CreatedAt: at, Run: agent.RunRecord{RunID: run, Status: agent.StatusCompleted, StartedAt: at, LastSequence: 2, Spec: agent.RunSpec{Agent: it.agent}}}
				if err := st.SaveCheckpoint(ctx, cp); err != nil {
					t.Fatal(err)
				}
				if err := st.ReleaseLease(ctx, l); err != nil {
					t.Fatal(err)
				}
				d := store.Delivery{ID: "d-" + it.id, Tenant: it.tenant, ThreadID: id, RunID: run, Agent: it.agent, Event: "run.succeeded", URL: "https://hooks.example.com/",
					Payload: []byte(`{}`), NextAttempt: at, GiveUp: at.Add(time.Hour), Created: at}
				if _, err := st.EnqueueDelivery(ctx, d); err != nil {
					t.Fatal(err)
				}
				if claimed, err := st.ClaimDeliveries(ctx, "h", at, time.Minute, 1); err != nil || len(claimed) != 1 {
					t.Fatalf("claim %s: %v, %v", d.ID, claimed, err)
				}
				if err := st.FinishAttempt(ctx, store.AttemptResult{ID: d.ID, Holder: "h", Status: store.DeliverySucceeded, StatusCode: 200, Finished: at}); err != nil {
					t.Fatal(err)
				}
			}
			del := func(context.Context, string, time.Time) error {
				t.Error("a thread was deleted; no threads_idle TTL applies")
				return nil
			}
			day := 24 * time.Hour
			sw, err := retention.New(retention.Config{Store: st, Delete: del, Batch: 1, Policy: retention.Policy{
				Default:                retention.Rules{WebhookDeliveries: day, RunEvents: day},
				Tenants:                map[string]retention.Rules{"short": {WebhookDeliveries: time.Hour, RunEvents: time.Hour}, "forever": {}},
				AgentRunEvents:         map[string]time.Duration{"quick": time.Hour, "keeper": 0, "": 0},
				AgentWebhookDeliveries: map[string]time.Duration{"quick": time.Hour, "keeper": 0, "": 0},
			}}, retention.WithClock(fixedClock{t0}), retention.WithLogger(zaptest.NewLogger(t)))
			if err != nil {
				t.Fatal(err)
			}
			c, err := sw.Pass(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var wantGone []string
			for _, it := range items {
				if it.gone {
					wantGone = append(wantGone, it.id)
				}
			}
			if c.Deliveries != len(wantGone) || c.RunEvents != 2*len(wantGone) || c.Threads != 0 {
				t.Errorf("counts %+v; want %d deliveries and %d events deleted", c, len(wantGone), 2*len(wantGone))
			}
			for _, it := range items {
				ds, _, err := st.ListDeliveries(ctx, store.DeliveryQuery{Tenant: it.tenant, RunID: "run-" + it.id})
				if err != nil {
					t.Fatal(err)
				}
				page, err := st.ReadEvents(ctx, "th-"+it.id, 0, 10)
				if err != nil {
					t.Fatal(err)
				}
				if gone := len(ds) == 0; gone != it.gone {
					t.Errorf("%s: delivery deleted %v; want %v", it.id, gone, it.gone)
				}
				if gone := len(page.Events) == 0; gone != it.gone {
					t.Errorf("%s: event log deleted %v; want %v", it.id, gone, it.gone)
				}
			}
		})
	}
}
