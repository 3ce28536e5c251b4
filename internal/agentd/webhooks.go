package agentd

import (
	"cmp"
	"errors"
	"fmt"
	"time"

	"github.com/plumbhq/plumb/internal/webhooks"
	"github.com/plumbhq/plumb/pkg/agent/profile"
	"github.com/plumbhq/plumb/pkg/store"
	"github.com/plumbhq/plumb/pkg/webhook"
)

// webhookConfig checks the `webhooks` section and the agents' webhooks,
// and returns the webhook service's settings (Holder and the stores are
// set when the service is built).
func webhookConfig(cfg *Config) (webhooks.Config, error) {
	w := cfg.Webhooks
	var wc webhooks.Config
	cidrs, hosts, err := webhook.ParseAllow(w.Allow)
	if err != nil {
		return wc, fmt.Errorf("webhooks.allow: %w", err)
	}
	switch {
	case w.RetryFor < 0 || w.RetryFor > 30*24*time.Hour:
		return wc, errors.New("webhooks.retry_for: want 0 (24h) up to 720h")
	case w.Timeout < 0 || w.Timeout > 5*time.Minute:
		return wc, errors.New("webhooks.timeout: want 0 (10s) up to 5m")
	case w.MaxAttempts < 0 || w.MaxAttempts > 1000:
		return wc, errors.New("webhooks.max_attempts: want 0 (30) up to 1000")
	case w.Concurrency < 0 || w.Concurrency > 256:
		return wc, errors.New("webhooks.concurrency: want 0 (8) up to 256")
	case w.KeyGrace < 0 || w.KeyGrace > 30*24*time.Hour:
		return wc, errors.New("webhooks.key_grace: want 0 (24h) up to 720h")
	}
	wc = webhooks.Config{
		Policy:   webhook.Policy{AllowHTTP: w.AllowHTTP, AllowPrivateNetworks: w.AllowPrivateNetworks, Allow: cidrs, AllowHosts: hosts},
		Agents:   map[string][]webhooks.Target{},
		RetryFor: w.RetryFor, Timeout: w.Timeout, MaxAttempts: w.MaxAttempts, Concurrency: w.Concurrency, KeyGrace: w.KeyGrace,
		DefaultAgent: cmp.Or(cfg.Defaults.Agent, profile.Main),
	}
	for name, p := range cfg.Subagents {
		if len(p.Webhooks) > 0 {
			return wc, fmt.Errorf("subagents.%s.webhooks: only primary agents have webhooks (a subagent's work ends in its parent's run)", name)
		}
	}
	for name, p := range cfg.Agents {
		for i, t := range p.Webhooks {
			at := fmt.Sprintf("agents.%s.webhooks[%d]", name, i)
			if _, err := wc.Policy.CheckURL(t.URL); err != nil {
				return wc, fmt.Errorf("%s.url: %w", at, err)
			}
			target := webhooks.Target{URL: t.URL}
			for j, e := range t.Events {
				if !webhook.ValidEventType(webhook.EventType(e)) {
					return wc, fmt.Errorf("%s.events[%d]: %q (want one of %v)", at, j, e, webhook.EventTypes)
				}
				target.Events = append(target.Events, webhook.EventType(e))
			}
			wc.Agents[name] = append(wc.Agents[name], target)
		}
	}
	return wc, nil
}

// webhookService builds the webhook service of this core for replicaID,
// or nil when the store keeps no webhooks. Without a secrets key it is
// built disabled: the webhook RPCs answer FAILED_PRECONDITION and
// nothing is recorded (Build refuses agents' webhooks then).
func (a *Agentd) webhookService(replicaID string) *webhooks.Service {
	ws, ok := a.Store.(store.Webhooks)
	if !ok || a.webhooks.Agents == nil { // Agents is nil until Build checked the config
		return nil
	}
	wc := a.webhooks
	wc.Store, wc.Threads, wc.Sealer, wc.Holder = ws, a.Store, a.Secrets.Sealer(), cmp.Or(replicaID, "agentd")
	svc, err := webhooks.New(wc, webhooks.WithLogger(a.lg.Named("webhooks")))
	if err != nil {
		return nil // webhookConfig checked everything New checks
	}
	return svc
}
