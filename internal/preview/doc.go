// Package preview serves preview URLs (docs/security.md, Preview URLs):
// a port that a process in a thread's sandbox listens on, reachable over
// HTTP and WebSocket at agentd's preview listener under a signed,
// expiring token, until the preview expires or is revoked. It signs and
// verifies tokens (HMAC-SHA256, a current and a previous key), keeps the
// records in the thread store (store.Previews, shared by every replica)
// and reverse-proxies requests through a Dialer that reaches the box via
// its owning worker.
//
// It must not open anything by default, forward the client's credentials
// or the token to the box, log a token, or let a box's response set
// cookies or service workers on the preview origin.
package preview
