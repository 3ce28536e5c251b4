package skills

// Origin says where a skill came from.
type Origin string

// The origins, from the lowest precedence to the highest: a tenant's
// skill replaces a config skill of the same name, and a skill in the
// thread's workspace replaces both (the most specific wins, as a
// project's skills override a user's in deepagents).
const (
	OriginConfig    Origin = "config"
	OriginTenant    Origin = "tenant"
	OriginWorkspace Origin = "workspace"
)

// rank orders origins by precedence.
func (o Origin) rank() int {
	switch o {
	case OriginWorkspace:
		return 2
	case OriginTenant:
		return 1
	}
	return 0
}

// Info is what the agent sees of a skill before it reads the body: its
// name and description, where it came from, where its SKILL.md can be
// read with the file tools, and where its files are in the sandbox.
type Info struct {
	Name        string
	Description string
	Origin      Origin
	// Path is the virtual path of the skill's SKILL.md.
	Path string
	// BoxDir is the directory holding the skill's files in the thread's
	// sandbox ("" when the thread has none).
	BoxDir string
}

// Merge returns the skills of all lists by name, sorted, each name taken
// from its highest-precedence origin (Origin); a tie keeps the first.
func Merge(lists ...[]Info) []Info {
	by := map[string]Info{}
	for _, l := range lists {
		for _, s := range l {
			if old, ok := by[s.Name]; ok && old.Origin.rank() >= s.Origin.rank() {
				continue
			}
			by[s.Name] = s
		}
	}
	out := make([]Info, 0, len(by))
	for _, n := range sortedKeys(by) {
		out = append(out, by[n])
	}
	return out
}
