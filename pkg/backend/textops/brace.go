package textops

import "strings"

// Brace expansion (docs/file-tools.md §4.7 step 2), done before anything else so that each
// alternative gets its own mode, ".." check and segments. "{a,b}" expands
// to a and b; groups nest; "\x" escapes x (the escape is kept for the
// segment parser). A "{" without a matching "}", or whose group has no
// top-level comma, is a literal char, and groups inside it still expand
// ("{a{b,c}}" gives "{ab}" and "{ac}", as bash does).

// braceItem is literal text or a group of alternatives.
type braceItem struct {
	lit  string
	alts [][]braceItem // nil for literal text
}

// parseBraces parses s into a sequence of items.
func parseBraces(s string) []braceItem {
	var items []braceItem
	var lit strings.Builder
	flush := func() {
		if lit.Len() > 0 {
			items = append(items, braceItem{lit: lit.String()})
			lit.Reset()
		}
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\' && i+1 < len(s):
			lit.WriteString(s[i : i+2])
			i++
		case c == '{':
			end := matchingBrace(s, i)
			if end < 0 {
				lit.WriteByte(c)
				continue
			}
			parts := splitTopLevel(s[i+1 : end])
			if len(parts) < 2 {
				lit.WriteByte(c) // no top-level comma: a literal "{"
				continue
			}
			flush()
			g := braceItem{}
			for _, p := range parts {
				g.alts = append(g.alts, parseBraces(p))
			}
			items = append(items, g)
			i = end
		default:
			lit.WriteByte(c)
		}
	}
	flush()
	return items
}

// matchingBrace returns the index of the "}" closing the "{" at s[open],
// or -1.
func matchingBrace(s string, open int) int {
	depth := 0
	for i := open; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '{':
			depth++
		case '}':
			if depth--; depth == 0 {
				return i
			}
		}
	}
	return -1
}

// splitTopLevel splits s, the inside of a matched group, at its commas
// that are outside nested braces and not escaped. s is balanced (its braces
// were counted when the group's "}" was found), so a depth count suffices.
func splitTopLevel(s string) []string {
	var parts []string
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '{':
			depth++
		case '}':
			depth--
		case ',':
			if depth == 0 {
				parts = append(parts, s[start:i])
				start = i + 1
			}
		}
	}
	return append(parts, s[start:])
}

// countExpansions returns the number of alternatives of items, saturating
// at limit+1 so that hostile nesting cannot overflow.
func countExpansions(items []braceItem, limit int) int {
	n := 1
	for _, it := range items {
		if it.alts == nil {
			continue
		}
		sum := 0
		for _, a := range it.alts {
			sum = min(sum+countExpansions(a, limit), limit+1)
		}
		n = min(n*sum, limit+1)
	}
	return n
}

// expandBraces returns every alternative of items.
func expandBraces(items []braceItem) []string {
	out := []string{""}
	for _, it := range items {
		if it.alts == nil {
			for i := range out {
				out[i] += it.lit
			}
			continue
		}
		var tails []string
		for _, a := range it.alts {
			tails = append(tails, expandBraces(a)...)
		}
		next := make([]string, 0, len(out)*len(tails))
		for _, head := range out {
			for _, t := range tails {
				next = append(next, head+t)
			}
		}
		out = next
	}
	return out
}
