package render

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf8"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
)

// DefaultWidth is the rune budget of a one-line summary when Options.Width
// is zero.
const DefaultWidth = 100

// mainArg names the argument that best identifies a call of each built-in
// tool; unknown tools fall back to guessArgs.
var mainArg = map[string]string{
	"read_file":  "file_path",
	"write_file": "file_path",
	"edit_file":  "file_path",
	"delete":     "file_path",
	"ls":         "path",
	"execute":    "command",
}

// guessArgs are tried in order for tools without a mainArg entry before
// falling back to the first string argument.
var guessArgs = []string{"file_path", "path", "command", "url", "query", "pattern", "text", "name"}

// CallSummary describes a tool call in one line: the tool name followed by
// its most telling argument (the path of a file tool, the command of
// execute, the subagent and task of task), cut to width runes (DefaultWidth
// when width <= 0).
func CallSummary(name, argsJSON string, width int) string {
	if width <= 0 {
		width = DefaultWidth
	}
	arg := argSummary(name, argsJSON)
	if arg == "" {
		return Cut(name, width)
	}
	return Cut(name+" "+arg, width)
}

// argSummary picks the telling argument of a call; "" when there is none.
func argSummary(name, argsJSON string) string {
	args, ok := parseObject(argsJSON)
	if !ok {
		return OneLine(argsJSON)
	}
	switch name {
	case "task":
		sub, desc := args.str("subagent_type"), args.str("description")
		if sub == "" {
			return OneLine(desc)
		}
		if desc == "" {
			return sub
		}
		return sub + ": " + OneLine(desc)
	case "write_todos":
		var todos []json.RawMessage
		if raw, ok := args.get("todos"); ok && json.Unmarshal(raw, &todos) == nil {
			return plural(len(todos), "item")
		}
		return ""
	case "glob", "grep":
		s := args.str("pattern")
		if p := args.str("path"); p != "" {
			s += " in " + p
		}
		return OneLine(s)
	}
	if key, ok := mainArg[name]; ok {
		return OneLine(args.str(key))
	}
	for _, key := range guessArgs {
		if s := args.str(key); s != "" {
			return OneLine(s)
		}
	}
	for _, kv := range args {
		var s string
		if json.Unmarshal(kv.value, &s) == nil && s != "" {
			return OneLine(s)
		}
	}
	if len(args) == 0 {
		return ""
	}
	return OneLine(compact(argsJSON))
}

// field is one member of a JSON object, in document order.
type field struct {
	key   string
	value json.RawMessage
}

// object is a JSON object with its member order kept.
type object []field

func (o object) get(key string) (json.RawMessage, bool) {
	for _, f := range o {
		if f.key == key {
			return f.value, true
		}
	}
	return nil, false
}

// str is the string member key, "" when absent or not a string.
func (o object) str(key string) string {
	raw, ok := o.get(key)
	if !ok {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return ""
	}
	return s
}

// parseObject reads a JSON object keeping its member order.
func parseObject(s string) (object, bool) {
	dec := json.NewDecoder(strings.NewReader(s))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, false
	}
	var o object
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, false
		}
		key, ok := t.(string)
		if !ok {
			return nil, false
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, false
		}
		o = append(o, field{key, v})
	}
	if t, err := dec.Token(); err != nil || t != json.Delim('}') {
		return nil, false
	}
	return o, true
}

func compact(s string) string {
	var b bytes.Buffer
	if json.Compact(&b, []byte(s)) != nil {
		return s
	}
	return b.String()
}

// PrettyJSON indents JSON text by two spaces, keeping member order; text
// that is not JSON comes back unchanged.
func PrettyJSON(s string) string {
	var b bytes.Buffer
	if json.Indent(&b, []byte(s), "", "  ") != nil {
		return s
	}
	return b.String()
}

// OneLine collapses every run of white space, line breaks included, into one
// space and trims the ends.
func OneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// FirstLine is the first non-blank line of s, trimmed.
func FirstLine(s string) string {
	for line := range strings.SplitSeq(s, "\n") {
		if line = strings.TrimSpace(line); line != "" {
			return line
		}
	}
	return ""
}

// Cut shortens s to at most width runes, ending in "…" when it was cut.
func Cut(s string, width int) string {
	if width <= 0 || utf8.RuneCountInString(s) <= width {
		return s
	}
	if width == 1 {
		return "…"
	}
	n := 0
	for i := range s {
		if n == width-1 {
			return s[:i] + "…"
		}
		n++
	}
	return s
}

// DecisionName is the lower-case name of a decision type ("approve").
func DecisionName(d plumbv1.DecisionType) string {
	return enumWord(d.String(), "DECISION_TYPE_")
}

// enumWord turns "PREFIX_SOME_VALUE" into "some value".
func enumWord(name, prefix string) string {
	return strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(name, prefix)), "_", " ")
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return strconv.Itoa(n) + " " + word + "s"
}
