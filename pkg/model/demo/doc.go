// Package demo is plumb's built-in demo model: an OpenAI-compatible chat
// completions server, in process, that plays a short scripted session
// through the real agent loop so that a newcomer without an API key sees
// everything at once (docs/console.md): a plan with todos, a file written
// in the box, a command that runs it (agentd gates it, so it waits for a
// human's approval), a subagent, and a summary. agentd starts it only when
// no model is configured at all (no models section, no OPENAI_BASE_URL or
// OPENAI_API_KEY), and says so loudly.
//
// It keeps no state: each answer follows from the conversation it is sent
// (how many tool results came since the last user message), so any
// number of threads, replays and resumes work. It never reaches the
// network beyond its loopback listener.
package demo
