// Package websearch is the web_search tool: a query and a result count in,
// a bounded JSON list of {title, url, snippet, score} out, behind a small
// Provider interface with two implementations, Tavily (POST
// https://api.tavily.com/search) and SearXNG (GET {base}/search?format=json,
// self-hostable).
//
// Every failure of the provider (an HTTP error, a rate limit whose
// Retry-After is longer than the configured wait, a timeout, a body that
// is not JSON or is too large) is an *Error whose text tells the model
// what happened and what it can do; the tool turns it into an error tool
// result, never into a failed run.
package websearch
