// Package composite is the Composite backend of docs/file-tools.md §5: one
// tree assembled from a default backend and backends mounted at route
// prefixes ("/memories/" → a Store, "/large_tool_results/" → State, ...).
//
// It routes every path to the backend with the longest matching prefix,
// maps result and error paths back, synthesizes mount points in listings,
// fans grep and glob out to the routes below the search root (sending each
// the residual of the pattern, from textops), and merges their answers
// with the global sort and caps. execute always runs on the default
// backend; an offload file it cannot write into a route is written on the
// default backend and moved there.
//
// The package holds no file semantics: every operation ends in one of the
// wrapped backends. It must not normalize results beyond path mapping,
// and must not call a backend for an input that docs/file-tools.md §2 rejects.
package composite
