package skills

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
)

// LoadDir reads the skill in host directory dir: every regular file
// under it, within the bounds. A symlink, a device or any other special
// file is refused (a skill's files are copied into boxes; a link could
// point anywhere on the host). The skill's name must be the folder's.
func LoadDir(dir string) (*Skill, error) {
	name := filepath.Base(filepath.Clean(dir))
	files := map[string][]byte{}
	var total int64
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			return invalid(name, "files["+rel+"]", "is a symbolic link; a skill holds regular files only")
		case d.IsDir():
			return nil
		case !d.Type().IsRegular():
			return invalid(name, "files["+rel+"]", "is not a regular file")
		}
		if len(files) >= MaxFiles {
			return invalid(name, "files", "more than %d files", MaxFiles)
		}
		if err := ValidPath(rel); err != nil {
			return invalid(name, "files["+rel+"]", "the path %v", err)
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if total += fi.Size(); total > MaxTotalBytes {
			return invalid(name, "files", "the files are more than %d bytes together", MaxTotalBytes)
		}
		c, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		files[rel] = c
		return nil
	})
	if err != nil {
		var e *Error
		if errors.As(err, &e) {
			return nil, err
		}
		return nil, fmt.Errorf("skill %s: %w", dir, err)
	}
	return Parse(name, files)
}

// LoadDirs reads the skills a config entry names: dir itself when it
// holds a SKILL.md, else each of its subdirectories that holds one
// (others are ignored). A bad skill fails the whole load, naming it.
func LoadDirs(dir string) ([]*Skill, error) {
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("skills directory: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("skills directory %s: not a directory", dir)
	}
	if _, err := os.Lstat(filepath.Join(dir, FileName)); err == nil {
		s, err := LoadDir(dir)
		if err != nil {
			return nil, err
		}
		return []*Skill{s}, nil
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("skills directory: %w", err)
	}
	var out []*Skill
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		sub := filepath.Join(dir, e.Name())
		if _, err := os.Lstat(filepath.Join(sub, FileName)); err != nil {
			continue
		}
		s, err := LoadDir(sub)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", sub, err)
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}
