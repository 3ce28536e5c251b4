package vpath

import (
	"strings"
	"unicode/utf8"

	"github.com/plumbhq/plumb/pkg/backend"
)

// Normalize validates raw against the docs/file-tools.md §2 rules and returns the normalized
// virtual path: "/" followed by the non-empty, non-"." components joined by
// "/". The first failing rule wins; every failure is a *backend.Error with
// code invalid_path whose message names the rule.
func Normalize(raw string) (string, error) {
	// Rule 1 comes first and is O(1): a 10 MB input costs nothing more.
	if len(raw) > backend.MaxPathBytes {
		return "", backend.Errorf(backend.CodeInvalidPath, "",
			"invalid path: %d bytes is longer than the %d-byte limit", len(raw), backend.MaxPathBytes)
	}
	if raw == "" {
		return "", backend.Errorf(backend.CodeInvalidPath, "", "invalid path: the path is empty")
	}
	if !utf8.ValidString(raw) {
		return "", invalid(raw, "is not valid UTF-8")
	}
	for i := 0; i < len(raw); i++ {
		if c := raw[i]; c < 0x20 || c == 0x7f {
			return "", invalid(raw, "contains a control character (NUL, newline, tab, ...)")
		}
	}
	if raw[0] == '~' {
		return "", invalid(raw, "starts with ~; home expansion is not supported, use an absolute path")
	}
	if len(raw) >= 2 && raw[1] == ':' && isASCIILetter(raw[0]) {
		return "", invalid(raw, "is a Windows drive path; use an absolute path starting with /")
	}

	// Rules 6 and 7. Rule 8 must see every component before rule 9 sees
	// any (the first failing step wins), hence two passes.
	comps := strings.FieldsFunc(strings.ReplaceAll(raw, `\`, "/"), func(r rune) bool { return r == '/' })
	for _, c := range comps {
		if c == ".." {
			return "", invalid(raw, `contains a ".." component; ".." is never resolved, use the path without it`)
		}
	}
	var b strings.Builder
	b.Grow(len(raw) + 1)
	for _, c := range comps {
		if len(c) > backend.MaxComponentBytes {
			return "", invalid(raw, "has a component longer than 255 bytes")
		}
		if c == "." {
			continue
		}
		b.WriteByte('/')
		b.WriteString(c)
	}
	if b.Len() == 0 {
		return "/", nil
	}
	// Rule 10 can only trip for inputs within a few bytes of the limit
	// (a relative path gains a leading "/").
	if b.Len() > backend.MaxPathBytes {
		return "", invalid(raw, "is longer than 4096 bytes once normalized")
	}
	return b.String(), nil
}

func invalid(raw, rule string) *backend.Error {
	return backend.Errorf(backend.CodeInvalidPath, raw, "invalid path %s: it %s", backend.Quote(raw), rule)
}

func isASCIILetter(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}

// The helpers below take normalized paths (results of Normalize) and do not
// validate them.

// Join appends the relative path rel ("a/b", no leading "/") to the
// directory dir. An empty rel returns dir.
func Join(dir, rel string) string {
	switch {
	case rel == "":
		return dir
	case dir == "/":
		return "/" + rel
	}
	return dir + "/" + rel
}

// Base returns the last component of p, or "/" for the root.
func Base(p string) string {
	if p == "/" {
		return "/"
	}
	return p[strings.LastIndexByte(p, '/')+1:]
}

// Dir returns the parent directory of p; the root is its own parent.
func Dir(p string) string {
	i := strings.LastIndexByte(p, '/')
	if i <= 0 {
		return "/"
	}
	return p[:i]
}

// IsUnder reports whether p is dir or lies below it.
func IsUnder(p, dir string) bool {
	if dir == "/" || p == dir {
		return true
	}
	return len(p) > len(dir) && p[len(dir)] == '/' && p[:len(dir)] == dir
}

// Rel returns p relative to root ("" when equal, "a/b" below it); ok is
// false when p is not under root.
func Rel(root, p string) (rel string, ok bool) {
	switch {
	case !IsUnder(p, root):
		return "", false
	case p == root:
		return "", true
	case root == "/":
		return p[1:], true
	}
	return p[len(root)+1:], true
}

// Segments returns the components of p (none for the root).
func Segments(p string) []string {
	if p == "/" || p == "" {
		return nil
	}
	return strings.Split(strings.TrimPrefix(p, "/"), "/")
}
