// Package console serves agentd's web console under /ui/ on its HTTP
// port: the embedded page (static HTML, CSS and JavaScript modules, no
// build step, nothing fetched at run time) with its security headers, and
// the terminal's WebSocket endpoint, a shell in a thread's box
// (internal/threadbox). The page itself talks to AgentService over the
// HTTP/JSON gateway on the same port, the operators' Sandboxes view
// included (sandboxes.js: ListFleetSandboxes, DeleteFleetSandbox; the
// server decides who is an operator, the page only hides the view from
// others). docs/console.md describes it, docs/security.md ("The web
// console and its terminal", "Operators") its threat model.
package console
