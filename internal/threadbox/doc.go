// Package threadbox reaches a thread's sandbox on behalf of a person, not
// the model: it lists and reads the workspace (the ListThreadFiles and
// ReadThreadFile RPCs) and starts the web console's terminal shell. Every
// call acts for the context's tenant: another tenant's thread is
// agent.ErrThreadNotFound, a thread without a sandbox preview.ErrNoSandbox
// (no call starts a box). The path to the box is the file tools' own: the
// box's worker through internal/fleet, as the sandbox user
// (docs/security.md, "The web console and its terminal").
package threadbox
