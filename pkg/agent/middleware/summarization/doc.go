// Package summarization implements the summarization middleware (docs/agent-core.md
// §3.2 #4, §7): token-triggered compaction of an agent context. When the
// estimated context crosses the trigger, the older part of the effective
// view is offloaded to a transcript file, summarized by a (fast) model,
// and replaced in the model's view by one summary message; the message
// log itself is never rewritten. A context-overflow error from the model
// forces a summarization and one retry. The context_usage reminder warns
// the model as the context approaches the trigger.
//
// The summarizer call is routed with the agent path "<path>/summarizer"
// so gateways and test servers can tell it from the agent's own calls.
package summarization
