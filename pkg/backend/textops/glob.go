package textops

import (
	"strings"
	"unicode/utf8"

	"github.com/bmatcuk/doublestar/v4"

	"github.com/plumbhq/plumb/pkg/backend"
)

// The glob matcher of docs/file-tools.md §4.7, the cross-backend contract.
//
// What doublestar/v4 does, and what this file adds. doublestar matches
// "*", "?", classes with "!"/"^" negation and ranges, "\" escapes, "{}"
// alternatives and "/**/" across whole paths. Its semantics differ from
// the contract in several places: "*" and "**" match dotfiles, "a/**" also
// matches "a", an unclosed "{" is an error, "{a}" is a one-way group
// rather than literal text, "[]a]" is rejected as an empty class, and there
// is no basename mode, expansion cap or pruning (all checked against
// v4.10.4). So this
// file does the path-level work itself:
//   - brace expansion up front with the 1000 cap and literal unclosed or
//     comma-less groups (brace.go);
//   - per alternative: the ".." check, the leading "/" and basename vs
//     path mode;
//   - segment parsing with "]"-first literal classes and unclosed "["
//     errors, rewritten into a canonical, fully escaped text;
//   - the dot rule, "**" as whole non-dot segments with a trailing "**"
//     matching one or more, run as a small NFA over path segments;
//   - CanDescend for pruning walks, and Residuals for Composite routes.
// doublestar is used for what it does exactly like the contract: matching
// one canonical segment against one name (no "/", no "{", no "**" left),
// behind fast paths for literal, "*", "prefix*" and "*suffix" segments.

// Glob is a compiled docs/file-tools.md §4.7 pattern: the union of its brace alternatives. It
// is safe for concurrent use.
type Glob struct {
	alts []Alternative
}

// Alternative is one brace alternative of a Glob.
type Alternative struct {
	// PathMode is set when the alternative had a "/" (or a leading "/"):
	// it matches the root-relative path segment by segment, anchored at
	// the search root. Otherwise it has one segment, matched against a
	// file's basename at any depth, inside dot-directories too.
	PathMode bool
	// Segments are the parsed segments; empty and "." segments are gone.
	Segments []Segment
}

// Segment is one "/"-separated part of an alternative.
type Segment struct {
	text       string // canonical pattern text (literals escaped)
	doubleStar bool   // the segment is exactly "**"
	dotOK      bool   // starts with a literal ".", so it may match dot names
	simple     bool   // literal text around at most one "*": match by prefix/suffix
	star       bool   // simple with a "*"
	pre, suf   string // simple: literal text before and after the "*"
}

// CompileGlob validates pattern and compiles it. Errors are
// *backend.Error with code invalid_pattern: an empty pattern, a NUL byte,
// more than MaxPatternBytes bytes, more than MaxBraceExpansions
// alternatives, a ".." segment, or an unclosed "[".
//
// Decisions where docs/file-tools.md §4.7 is silent: "." segments are dropped like empty
// ones ("./src/*.go" is the path-mode "src/*.go"); a "\" at the end of a
// segment is a literal backslash; "/" always separates segments, also
// inside "[...]" (which then is unclosed); an alternative with no segment
// left (e.g. "/") matches nothing.
func CompileGlob(pattern string) (*Glob, error) {
	switch {
	case pattern == "":
		return nil, backend.Errorf(backend.CodeInvalidPattern, "", "glob pattern is empty")
	case len(pattern) > backend.MaxPatternBytes:
		return nil, backend.Errorf(backend.CodeInvalidPattern, "",
			"glob pattern is %d bytes, over the %d-byte limit", len(pattern), backend.MaxPatternBytes)
	case strings.IndexByte(pattern, 0) >= 0:
		return nil, backend.Errorf(backend.CodeInvalidPattern, "", "glob pattern contains a NUL byte")
	}
	items := parseBraces(pattern)
	if n := countExpansions(items, backend.MaxBraceExpansions); n > backend.MaxBraceExpansions {
		return nil, backend.Errorf(backend.CodeInvalidPattern, "",
			"glob pattern %s expands to more than %d alternatives through {} groups; use fewer or smaller groups",
			backend.Quote(pattern), backend.MaxBraceExpansions)
	}
	g := &Glob{}
	for _, alt := range expandBraces(items) {
		a := Alternative{PathMode: strings.Contains(alt, "/")}
		for _, raw := range strings.Split(alt, "/") {
			switch raw {
			case "", ".":
				continue
			case "..":
				return nil, backend.Errorf(backend.CodeInvalidPattern, "",
					`glob pattern %s has a ".." segment; a pattern cannot leave the search directory, pass a different path instead`,
					backend.Quote(pattern))
			}
			seg, ok := parseSegment(raw)
			if !ok {
				return nil, backend.Errorf(backend.CodeInvalidPattern, "",
					`glob pattern %s has an unclosed "[" character class; escape a literal "[" as "\["`, backend.Quote(pattern))
			}
			a.Segments = append(a.Segments, seg)
		}
		g.alts = append(g.alts, a)
	}
	return g, nil
}

// parseSegment parses one raw segment into its canonical form. ok is
// false for an unclosed "[".
func parseSegment(raw string) (Segment, bool) {
	if raw == "**" {
		return Segment{text: "**", doubleStar: true}, true
	}
	var (
		text  strings.Builder
		lit   strings.Builder // literal text since the last "*"
		stars int
		wild  bool   // "?" or a class seen
		pre   string // literal text before the first "*"
		first = true
	)
	s := Segment{}
	for i := 0; i < len(raw); {
		c := raw[i]
		switch {
		case c == '*':
			for i < len(raw) && raw[i] == '*' { // "a**" acts as "a*"
				i++
			}
			text.WriteByte('*')
			if stars == 0 {
				pre = lit.String()
			}
			lit.Reset()
			stars++
		case c == '?':
			text.WriteByte('?')
			wild = true
			i++
		case c == '[':
			end, canon, ok := parseClass(raw, i)
			if !ok {
				return Segment{}, false
			}
			text.WriteString(canon)
			wild = true
			i = end
		default:
			if c == '\\' && i+1 < len(raw) {
				i++ // "\x" is x; a final "\" is itself
			}
			n := charLen(raw, i)
			if first && raw[i] == '.' {
				s.dotOK = true
			}
			writeEscaped(&text, raw[i:i+n])
			lit.WriteString(raw[i : i+n])
			i += n
		}
		first = false
	}
	s.text = text.String()
	if !wild && stars <= 1 {
		s.simple = true
		s.star = stars == 1
		if s.star {
			s.pre, s.suf = pre, lit.String()
		} else {
			s.pre = lit.String()
		}
	}
	return s, true
}

// parseClass parses the class starting at raw[open] == '[' and returns the
// index after its "]" and its canonical text.
func parseClass(raw string, open int) (end int, canon string, ok bool) {
	var b strings.Builder
	b.WriteByte('[')
	i := open + 1
	if i < len(raw) && (raw[i] == '!' || raw[i] == '^') {
		b.WriteByte('!')
		i++
	}
	first := true
	for {
		if i >= len(raw) {
			return 0, "", false
		}
		if raw[i] == ']' && !first {
			b.WriteByte(']')
			return i + 1, b.String(), true
		}
		first = false
		lo, n := classChar(raw, i)
		i += n
		writeClassChar(&b, lo)
		if i+1 < len(raw) && raw[i] == '-' && raw[i+1] != ']' {
			hi, n := classChar(raw, i+1)
			i += 1 + n
			b.WriteByte('-')
			writeClassChar(&b, hi)
		}
	}
}

// classChar returns the (possibly escaped) char at raw[i] and the bytes it
// spans.
func classChar(raw string, i int) (string, int) {
	n := 0
	if raw[i] == '\\' && i+1 < len(raw) {
		n, i = 1, i+1
	}
	size := charLen(raw, i)
	return raw[i : i+size], n + size
}

// charLen returns the byte length of the char at s[i]; an invalid byte is
// a char of its own.
func charLen(s string, i int) int {
	if s[i] < utf8.RuneSelf {
		return 1
	}
	_, n := utf8.DecodeRuneInString(s[i:])
	return n
}

func writeClassChar(b *strings.Builder, c string) {
	if strings.ContainsAny(c, `]\-!^[`) {
		b.WriteByte('\\')
	}
	b.WriteString(c)
}

// writeEscaped writes literal text escaped so that neither doublestar nor
// this package's brace and segment parsers see a metachar in it.
func writeEscaped(b *strings.Builder, c string) {
	if len(c) == 1 && strings.IndexByte(`*?[]{},\`, c[0]) >= 0 {
		b.WriteByte('\\')
	}
	b.WriteString(c)
}

// String returns the segment's canonical pattern text.
func (s Segment) String() string { return s.text }

// IsDoubleStar reports whether the segment is exactly "**".
func (s Segment) IsDoubleStar() bool { return s.doubleStar }

// Match reports whether the segment matches one name, with the dot rule:
// a name starting with "." matches only a segment starting with a literal
// ".". A "**" segment matches any name without a leading dot.
func (s Segment) Match(name string) bool {
	if name == "" || name[0] == '.' && !s.dotOK {
		return false
	}
	switch {
	case s.doubleStar:
		return true
	case !s.simple:
		return doublestar.MatchUnvalidated(s.text, name)
	case !s.star:
		return name == s.pre
	}
	return len(name) >= len(s.pre)+len(s.suf) && strings.HasPrefix(name, s.pre) && strings.HasSuffix(name, s.suf)
}

// String returns the alternative's canonical pattern: the segment for
// basename mode, "/" + the segments for path mode. It compiles back to an
// equivalent Alternative.
func (a Alternative) String() string {
	if !a.PathMode {
		if len(a.Segments) == 0 {
			return ""
		}
		return a.Segments[0].text
	}
	return "/" + joinSegments(a.Segments)
}

func joinSegments(segs []Segment) string {
	parts := make([]string, len(segs))
	for i, s := range segs {
		parts[i] = s.text
	}
	return strings.Join(parts, "/")
}

// Alternatives returns the compiled brace alternatives.
func (g *Glob) Alternatives() []Alternative { return g.alts }

// Match reports whether the regular file at rel, its path relative to the
// search root ("a/b.py", no leading "/"), matches the pattern.
func (g *Glob) Match(rel string) bool {
	if rel == "" {
		return false
	}
	base := rel[strings.LastIndexByte(rel, '/')+1:]
	for i := range g.alts {
		a := &g.alts[i]
		if !a.PathMode {
			if len(a.Segments) == 1 && a.Segments[0].Match(base) {
				return true
			}
			continue
		}
		var st stateSet
		st.init(len(a.Segments))
		if a.run(&st, rel) && st.has(len(a.Segments)) {
			return true
		}
	}
	return false
}

// CanDescend reports whether a file below the directory relDir (relative
// to the search root, "" for the root itself) could match. Walkers skip
// directories for which it is false; this never drops a match.
func (g *Glob) CanDescend(relDir string) bool {
	for i := range g.alts {
		a := &g.alts[i]
		if !a.PathMode {
			if len(a.Segments) == 1 {
				return true
			}
			continue
		}
		var st stateSet
		st.init(len(a.Segments))
		if !a.run(&st, relDir) {
			continue
		}
		if a.alive(&st) {
			return true
		}
	}
	return false
}

// Residuals reduces the pattern for a Composite route mounted at the
// directory whose segments, relative to the search root, are prefix
// (docs/file-tools.md §5 "Fan-out glob"). It returns canonical alternatives to send to the
// route with path "/": basename-mode alternatives unchanged, and for each
// path-mode alternative the remainders (anchored, with a leading "/") left
// after its segments consume prefix — a literal or wildcard segment
// consumes one matching prefix segment, "**" zero or more non-dot ones.
// An empty result means the route need not be queried. Use
// JoinAlternatives to send them as one pattern.
func (g *Glob) Residuals(prefix []string) []string {
	var out []string
	seen := map[string]bool{}
	add := func(s string) {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	for i := range g.alts {
		a := &g.alts[i]
		if !a.PathMode {
			if len(a.Segments) == 1 {
				add(a.String())
			}
			continue
		}
		var st stateSet
		st.init(len(a.Segments))
		if !a.run(&st, strings.Join(prefix, "/")) {
			continue
		}
		p := len(a.Segments)
		for k := 0; k <= p; k++ {
			if !st.has(k) {
				continue
			}
			if k > 0 && st.has(k-1) && a.Segments[k-1].doubleStar && k-1 != p-1 {
				continue // "**/rest" is already there and covers "rest"
			}
			switch {
			case k < p:
				add("/" + joinSegments(a.Segments[k:]))
			case a.trailingDoubleStar():
				add("/**")
			}
		}
	}
	return out
}

// JoinAlternatives combines canonical alternatives (from Residuals or
// Alternative.String) into one pattern: "{a,b,...}". Canonical text escapes
// ",", "{" and "}", so the result compiles back to exactly these
// alternatives, subject to the MaxBraceExpansions cap.
func JoinAlternatives(alts []string) string {
	switch len(alts) {
	case 0:
		return ""
	case 1:
		return alts[0]
	}
	return "{" + strings.Join(alts, ",") + "}"
}

func (a *Alternative) trailingDoubleStar() bool {
	n := len(a.Segments)
	return n > 0 && a.Segments[n-1].doubleStar
}

// run feeds the "/"-separated names of rel ("" = none) through the
// alternative's segment NFA, starting from its initial state. States are
// segment indexes 0..P (P = accept): a non-"**" segment at i moves to i+1
// on a matching name; a "**" at i stays at i on a non-dot name and has an
// epsilon move to i+1, except a trailing "**", which must consume one name
// (P-1 → P) and then keeps consuming non-dot names at P. It reports false
// as soon as no state is left.
func (a *Alternative) run(st *stateSet, rel string) bool {
	p := len(a.Segments)
	st.add(0)
	a.closure(st)
	var next stateSet
	next.init(p)
	for rel != "" {
		var name string
		name, rel, _ = strings.Cut(rel, "/")
		next.clear()
		nonDot := name != "" && name[0] != '.'
		for i := 0; i <= p; i++ {
			if !st.has(i) {
				continue
			}
			switch {
			case i == p:
				if a.trailingDoubleStar() && nonDot {
					next.add(p)
				}
			case a.Segments[i].doubleStar:
				if nonDot {
					if i == p-1 {
						next.add(p)
					} else {
						next.add(i)
					}
				}
			case a.Segments[i].Match(name):
				next.add(i + 1)
			}
		}
		a.closure(&next)
		*st, next = next, *st
		if st.empty() {
			return false
		}
	}
	return true
}

func (a *Alternative) closure(st *stateSet) {
	p := len(a.Segments)
	for i := 0; i < p-1; i++ {
		if st.has(i) && a.Segments[i].doubleStar {
			st.add(i + 1)
		}
	}
}

// alive reports whether a state of st can still consume names and reach
// acceptance, i.e. whether files further down can match.
func (a *Alternative) alive(st *stateSet) bool {
	p := len(a.Segments)
	for i := 0; i < p; i++ {
		if st.has(i) {
			return true
		}
	}
	return st.has(p) && a.trailingDoubleStar()
}

// stateSet is a bitset of NFA states; patterns with fewer than 64
// segments (all real ones) use the inline word and do not allocate.
type stateSet struct {
	small uint64
	big   []uint64
}

func (s *stateSet) init(p int) {
	if p >= 64 {
		s.big = make([]uint64, p/64+1)
	}
}

func (s *stateSet) add(i int) {
	if s.big == nil {
		s.small |= 1 << uint(i)
		return
	}
	s.big[i/64] |= 1 << uint(i%64)
}

func (s *stateSet) has(i int) bool {
	if s.big == nil {
		return s.small&(1<<uint(i)) != 0
	}
	return s.big[i/64]&(1<<uint(i%64)) != 0
}

func (s *stateSet) clear() {
	s.small = 0
	clear(s.big)
}

func (s *stateSet) empty() bool {
	if s.small != 0 {
		return false
	}
	for _, w := range s.big {
		if w != 0 {
			return false
		}
	}
	return true
}
