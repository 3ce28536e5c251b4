// Package yamlconf is the strict YAML loader both daemons read their
// config files with. Unknown keys and ill-typed values are errors that
// name the full YAML path (`templates.python.memory: ...`) and the line;
// a key a struct field marks with `deprecated:"old_key"` is still
// accepted under its old name, reported back as a Deprecation for the
// daemon to log, and refused when the file gives both names. Quantity is
// the byte size type of both configs ("512Mi", "1Gi", a plain count).
//
// It imports only yaml.v3 and zap, so a client binary may link it.
package yamlconf
