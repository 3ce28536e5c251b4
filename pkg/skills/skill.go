package skills

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"unicode/utf8"

	"gopkg.in/yaml.v3"

	"github.com/plumbhq/plumb/pkg/backend/vpath"
)

// FileName is the file that makes a folder a skill.
const FileName = "SKILL.md"

// Limits of one skill. A skill is instructions and a few small scripts;
// the bounds keep the system prompt, a PutSkill request (well under the
// 4 MiB of a non-bulk gRPC request) and the copy into a box small.
const (
	// MaxNameBytes bounds a name (the Agent Skills rule).
	MaxNameBytes = 64
	// MaxDescriptionBytes bounds a description (the Agent Skills rule).
	MaxDescriptionBytes = 1024
	// MaxBodyBytes bounds the instructions after the front matter.
	MaxBodyBytes = 64 << 10
	// MaxFrontMatterBytes bounds the front matter.
	MaxFrontMatterBytes = 8 << 10
	// MaxFiles bounds the files of a skill, SKILL.md included.
	MaxFiles = 100
	// MaxTotalBytes bounds the bytes of all the files of a skill.
	MaxTotalBytes = 2 << 20
	// MaxDepth bounds the directories of a file's path.
	MaxDepth = 8
)

// ErrInvalid is wrapped by every error about a bad skill.
var ErrInvalid = errors.New("invalid skill")

// Error is a bad skill: Field says what is wrong ("name", "description",
// "body", "files", or the path of one file) so that an API can name it.
type Error struct {
	// Skill is the skill's name or folder, when known.
	Skill string
	// Field is "name", "description", "front_matter", "body", "files" or
	// "files[<path>]".
	Field string
	// Msg says what is wrong and what is allowed.
	Msg string
}

func (e *Error) Error() string {
	s := "skill"
	if e.Skill != "" {
		s += " " + e.Skill
	}
	return fmt.Sprintf("%s: %s: %s", s, e.Field, e.Msg)
}

// Unwrap makes errors.Is(err, ErrInvalid) hold.
func (e *Error) Unwrap() error { return ErrInvalid }

func invalid(skill, field, format string, args ...any) *Error {
	return &Error{Skill: skill, Field: field, Msg: fmt.Sprintf(format, args...)}
}

// Meta is a SKILL.md's front matter. Unknown keys are refused.
type Meta struct {
	// Name is lowercase letters, digits and single hyphens, at most 64
	// bytes; it names the skill's folder.
	Name string `yaml:"name"`
	// Description says what the skill does and when to use it: all the
	// model sees of a skill until it reads the body.
	Description string `yaml:"description"`
	// License is optional.
	License string `yaml:"license,omitempty"`
	// Compatibility is optional: what the skill needs of its environment.
	Compatibility string `yaml:"compatibility,omitempty"`
	// AllowedTools is optional and informative: plumb does not grant tools
	// from a skill (a profile's allow-list does).
	AllowedTools string `yaml:"allowed-tools,omitempty"`
	// Metadata is optional free-form string pairs.
	Metadata map[string]string `yaml:"metadata,omitempty"`
}

// Skill is a parsed, valid skill.
type Skill struct {
	Meta
	// Body is SKILL.md after the front matter.
	Body string
	// Files are all the skill's files by relative path ("SKILL.md",
	// "scripts/run.py").
	Files map[string][]byte
}

// Size is the bytes of all the skill's files.
func (s *Skill) Size() int64 {
	var n int64
	for _, c := range s.Files {
		n += int64(len(c))
	}
	return n
}

// Paths are the skill's file paths, sorted.
func (s *Skill) Paths() []string {
	out := make([]string, 0, len(s.Files))
	for p := range s.Files {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

var nameRE = regexp.MustCompile(`^[a-z0-9]+(-[a-z0-9]+)*$`)

// ValidName checks a skill name: 1 to 64 bytes of lowercase letters,
// digits and hyphens, not starting or ending with a hyphen, no "--".
func ValidName(name string) error {
	if name == "" {
		return errors.New("the name is empty")
	}
	if len(name) > MaxNameBytes {
		return fmt.Errorf("the name is %d bytes; at most %d", len(name), MaxNameBytes)
	}
	if !nameRE.MatchString(name) {
		return fmt.Errorf("%q is not a skill name: use lowercase letters, digits and single hyphens (not first or last)", name)
	}
	return nil
}

var tagRE = regexp.MustCompile(`<[/!?A-Za-z]`)

// ParseSkillMD splits a SKILL.md into its front matter and body and
// validates both (not the name against a folder: see Parse).
func ParseSkillMD(data []byte) (Meta, string, error) {
	var m Meta
	if !utf8.Valid(data) {
		return m, "", invalid("", "files["+FileName+"]", "is not valid UTF-8")
	}
	text := strings.ReplaceAll(string(bytes.TrimPrefix(data, []byte("\uFEFF"))), "\r\n", "\n")
	rest, ok := strings.CutPrefix(text, "---\n")
	if !ok {
		return m, "", invalid("", "front_matter", "%s must start with a YAML front matter block: a line \"---\", name: and description:, then a line \"---\"", FileName)
	}
	var fm, body string
	if strings.HasPrefix(rest, "---\n") || rest == "---" {
		fm, body = "", strings.TrimPrefix(strings.TrimPrefix(rest, "---"), "\n")
	} else {
		i := strings.Index(rest, "\n---\n")
		switch {
		case i >= 0:
			fm, body = rest[:i], rest[i+len("\n---\n"):]
		case strings.HasSuffix(rest, "\n---"):
			fm, body = strings.TrimSuffix(rest, "\n---"), ""
		default:
			return m, "", invalid("", "front_matter", "the front matter is not closed by a line \"---\"")
		}
	}
	if len(fm) > MaxFrontMatterBytes {
		return m, "", invalid("", "front_matter", "the front matter is %d bytes; at most %d", len(fm), MaxFrontMatterBytes)
	}
	dec := yaml.NewDecoder(strings.NewReader(fm))
	dec.KnownFields(true)
	if err := dec.Decode(&m); err != nil {
		msg := "is empty; it needs name: and description:"
		if strings.TrimSpace(fm) != "" {
			msg = "is not valid: " + strings.TrimPrefix(err.Error(), "yaml: ")
		}
		return Meta{}, "", invalid("", "front_matter", "the front matter %s (known keys: name, description, license, compatibility, allowed-tools, metadata)", msg)
	}
	if err := ValidName(m.Name); err != nil {
		return m, "", invalid("", "name", "%v", err)
	}
	d := strings.TrimSpace(m.Description)
	switch {
	case d == "":
		return m, "", invalid(m.Name, "description", "the description is empty; say what the skill does and when to use it")
	case len(m.Description) > MaxDescriptionBytes:
		return m, "", invalid(m.Name, "description", "the description is %d bytes; at most %d", len(m.Description), MaxDescriptionBytes)
	case tagRE.MatchString(m.Description):
		return m, "", invalid(m.Name, "description", "the description must not contain XML tags")
	}
	m.Description = d
	if len(body) > MaxBodyBytes {
		return m, "", invalid(m.Name, "body", "the instructions after the front matter are %d bytes; at most %d (move reference material into files beside %s)", len(body), MaxBodyBytes, FileName)
	}
	return m, body, nil
}

// ValidPath checks the relative path of a file in a skill: through vpath's
// rules, and then relative ("scripts/run.py": no leading "/"), already
// normal (no ".", "//" or "\"), at most MaxDepth deep.
func ValidPath(p string) error {
	if strings.HasPrefix(p, "/") {
		return errors.New("is absolute; paths in a skill are relative to its folder")
	}
	if strings.Contains(p, `\`) {
		return errors.New(`contains "\"; use "/"`)
	}
	n, err := vpath.Normalize("/" + p)
	if err != nil {
		var be interface{ Error() string }
		if errors.As(err, &be) {
			return errors.New(strings.TrimPrefix(be.Error(), "invalid path "))
		}
		return err
	}
	if n != "/"+p || p == "" {
		return errors.New("is not a normal relative path (no \".\", empty or trailing components)")
	}
	if strings.Count(p, "/") >= MaxDepth {
		return fmt.Errorf("is more than %d directories deep", MaxDepth)
	}
	return nil
}

// Parse validates a skill's files (relative path → content): a SKILL.md
// with valid front matter and body, valid paths, and the bounds above.
// want, if not "", is the name the skill must have (its folder's, or the
// one a request gives).
func Parse(want string, files map[string][]byte) (*Skill, error) {
	if len(files) > MaxFiles {
		return nil, invalid(want, "files", "%d files; at most %d", len(files), MaxFiles)
	}
	var total int64
	for _, p := range sortedKeys(files) {
		if err := ValidPath(p); err != nil {
			return nil, invalid(want, "files["+p+"]", "the path %v", err)
		}
		total += int64(len(files[p]))
	}
	if total > MaxTotalBytes {
		return nil, invalid(want, "files", "the files are %d bytes together; at most %d", total, MaxTotalBytes)
	}
	md, ok := files[FileName]
	if !ok {
		return nil, invalid(want, "files", "no %s: a skill is a folder with a %s at its top", FileName, FileName)
	}
	m, body, err := ParseSkillMD(md)
	if err != nil {
		var e *Error
		if errors.As(err, &e) && e.Skill == "" {
			e.Skill = want
		}
		return nil, err
	}
	if want != "" && m.Name != want {
		return nil, invalid(want, "name", "the front matter names the skill %q; it must be %q (its folder's name)", m.Name, want)
	}
	return &Skill{Meta: m, Body: body, Files: files}, nil
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
