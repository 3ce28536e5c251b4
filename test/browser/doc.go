// Package browser tests agentd's web console in a real browser: real
// agentd and sandboxd processes with the built-in demo model, real boxes on
// the local Docker Engine, and Debian's chromium driven headless through
// the DevTools protocol (chromedp). It also tests the workspace RPCs the
// console's file browser uses, over gRPC, with tenancy.
package browser
