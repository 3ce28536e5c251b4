// Command bench is plumb's benchmark harness (`make bench`, or
// `go run ./bench`). It runs real components in this process against the
// local Docker Engine: a sandbox Manager served as SandboxService on a
// loopback port, the in-container sandbox agent, and for the agent
// scenarios a deep.Runtime behind AgentService with a scripted model. Each
// scenario of docs/benchmarks.md (B1…B19) is measured side by side with
// its baseline in the same run, after a warm-up, and reported as a
// markdown table on stdout and as JSON in bench/results/<timestamp>.json:
// n, p50, p95, p99, max, ops/s, the baseline's p50, their ratio and the
// target with its verdict.
//
// Ratios are always "times better than the baseline": baseline latency
// over ours, or our throughput over the baseline's, so > 1 means plumb is
// faster. A missed target is reported as "miss"; a scenario that errors is
// reported as "FAIL" and makes the program exit non-zero, as do
// containers or volumes left behind (every one the run creates carries
// the label plumb.bench=<run id>, and the run asserts that none remains).
//
// Flags: -quick for a ~1 minute smoke run, -only B1,B2 to pick scenarios,
// -out for the results directory, -v for worker logs, -cpuprofile DIR for
// one CPU profile per scenario (DIR/B1.pprof…).
//
// This is a program, not a test suite: it asserts behavior only as far as
// needed to know that what it timed did the work (sizes, counts, exit
// codes). It must not be imported, and it must never touch containers it
// did not create.
package main
