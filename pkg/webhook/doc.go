// Package webhook is the pure half of plumb's run webhooks
// (docs/webhooks.md): the JSON payload a receiver gets, the
// Plumb-Signature header (HMAC-SHA256 over the timestamp and the body,
// one v1 value per live tenant key) and Verify, the check a receiver
// copies; the retry backoff with jitter; and the URL policy that keeps a
// webhook from becoming an SSRF hole (the address is checked again when
// the connection is dialled, so DNS rebinding cannot get past it, and
// redirects are never followed).
//
// It must not touch a store, a clock it was not given, or agentd's
// configuration: internal/webhooks enqueues and delivers, over pkg/store.
package webhook
