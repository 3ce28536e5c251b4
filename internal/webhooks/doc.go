// Package webhooks is agentd's run webhooks (docs/webhooks.md): it records
// a delivery per URL when a run ends or pauses (Service.OnRunEnd, the run
// host's hook: a store insert, never an HTTP call on the run's path),
// delivers them from a loop on every replica (Service.Run: claims due
// deliveries in the shared store, so exactly one replica sends each
// attempt, and retries with backoff and jitter within the retry window),
// keeps the tenants' signing keys (sealed with the secrets key) and
// answers the delivery log.
//
// It builds no gRPC status: internal/server/agentsvc maps its errors
// (webhook.ErrRefused, store.ErrNoWebhookKey, secrets.ErrNoKey). The pure
// parts — payload, signature, backoff, URL policy — are pkg/webhook.
package webhooks
