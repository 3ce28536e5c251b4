package snapshot

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// ChunkSize is the largest chunk: a file is cut into pieces of ChunkSize
// bytes (the last one shorter), each stored once per tenant under the
// sha256 of its content.
const ChunkSize = 1 << 20

// Entry types.
const (
	TypeDir      = "dir"
	TypeFile     = "file"
	TypeSymlink  = "symlink"
	TypeHardlink = "hardlink" // another name of the file entry named by Link
	TypeFIFO     = "fifo"
)

// Bounds of a manifest.
const (
	MaxPath    = 4096
	MaxEntries = 1 << 20
	// MaxSize bounds the bytes of the files of one snapshot (16 TiB, the
	// largest workspace disk).
	MaxSize = 1 << 44
)

// Manifest describes one snapshot: its metadata and every entry of the
// workspace, in path order (a parent before its children).
type Manifest struct {
	Version  int    `json:"version"`
	ID       string `json:"id"`
	Tenant   string `json:"tenant"`
	Sandbox  string `json:"sandbox,omitempty"`
	Template string `json:"template,omitempty"`
	Parent   string `json:"parent,omitempty"`
	// Kind is "" for a workspace, KindMemory for a box's memory image.
	Kind    string    `json:"kind,omitempty"`
	Created time.Time `json:"created"`
	// Size is the bytes of the files (each hard-linked file once).
	Size int64 `json:"size"`
	// StoredBytes is what this snapshot added to its tenant's store when
	// it was taken (compressed chunks the tenant did not hold yet).
	StoredBytes int64 `json:"stored_bytes"`
	// Settings are opaque to this package: pkg/sandbox records the box's
	// settings there, to recreate a hibernated box as it was.
	Settings json.RawMessage `json:"settings,omitempty"`
	Entries  []Entry         `json:"entries"`
}

// Entry is one file, directory, link or FIFO of a workspace.
type Entry struct {
	Path   string  `json:"path"` // relative to the workspace, '/'-separated
	Type   string  `json:"type"`
	Mode   uint32  `json:"mode,omitempty"` // permission bits only (0o777)
	Size   int64   `json:"size,omitempty"`
	MTime  int64   `json:"mtime,omitempty"` // Unix seconds
	Link   string  `json:"link,omitempty"`  // a symlink's target, a hard link's file entry
	Chunks []Chunk `json:"chunks,omitempty"`
}

// Chunk is one piece of a file.
type Chunk struct {
	Hash   string `json:"hash"`   // sha256 of the raw bytes, hex
	Size   int64  `json:"size"`   // raw bytes
	Stored int64  `json:"stored"` // compressed bytes in the store
}

// KindMemory marks the snapshot of a gVisor checkpoint's image (the
// files `runsc checkpoint` wrote: the memory of a hibernated box's
// processes). Such a snapshot is never a workspace: Get, Restore, List
// and so every create, fork and restore from a snapshot ignore it (box
// code must never read another process's memory); GetMemory reads it.
const KindMemory = "memory"

const manifestMagic = "plumb-snapshot/1 "

// Sum is the sha256 of m's JSON body (the checksum Marshal writes in its
// header), hex: a worker pins it to know that a manifest it reads back
// is the one it wrote.
func (m *Manifest) Sum() (string, error) {
	body, err := json.Marshal(m)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(body)
	return hex.EncodeToString(sum[:]), nil
}

// Marshal encodes m with its checksum: a header line with the sha256 of
// the JSON body, then the body.
func (m *Manifest) Marshal() ([]byte, error) {
	body, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(body)
	var b bytes.Buffer
	b.WriteString(manifestMagic)
	b.WriteString(hex.EncodeToString(sum[:]))
	b.WriteByte('\n')
	b.Write(body)
	return b.Bytes(), nil
}

// ParseManifest decodes and checks a manifest: its checksum, then every
// rule of Validate. Any failure is CodeDataLoss.
func ParseManifest(data []byte) (*Manifest, error) {
	head, body, ok := bytes.Cut(data, []byte{'\n'})
	if !ok || !bytes.HasPrefix(head, []byte(manifestMagic)) {
		return nil, errorf(CodeDataLoss, "snapshot manifest: no header (truncated or not a manifest)")
	}
	want, err := hex.DecodeString(string(head[len(manifestMagic):]))
	if err != nil || len(want) != sha256.Size {
		return nil, errorf(CodeDataLoss, "snapshot manifest: bad checksum in its header")
	}
	if sum := sha256.Sum256(body); !bytes.Equal(sum[:], want) {
		return nil, errorf(CodeDataLoss, "snapshot manifest: checksum mismatch (corrupt or truncated)")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	var m Manifest
	if err := dec.Decode(&m); err != nil {
		return nil, &Error{Code: CodeDataLoss, Message: "snapshot manifest: undecodable", Err: err}
	}
	if err := m.Validate(); err != nil {
		return nil, &Error{Code: CodeDataLoss, Message: "snapshot manifest: invalid", Err: err}
	}
	return &m, nil
}

// Validate checks the rules a restore relies on: paths relative, clean and
// unique, every parent an earlier directory entry (so nothing lies beneath
// a symlink), known types, permission bits only, chunks adding up to their
// file's size, hard links naming a file entry, bounded sizes.
func (m *Manifest) Validate() error {
	if m.Version != 1 {
		return fmt.Errorf("version %d, want 1", m.Version)
	}
	if !validID(m.ID) {
		return fmt.Errorf("bad id %q", m.ID)
	}
	if m.Kind != "" && m.Kind != KindMemory {
		return fmt.Errorf("unknown kind %q", m.Kind)
	}
	if m.Parent != "" && !validID(m.Parent) {
		return fmt.Errorf("bad parent %q", m.Parent)
	}
	if len(m.Entries) > MaxEntries {
		return fmt.Errorf("%d entries, over %d", len(m.Entries), MaxEntries)
	}
	kinds := make(map[string]string, len(m.Entries))
	var size int64
	prev := ""
	for i, e := range m.Entries {
		if err := checkPath(e.Path); err != nil {
			return fmt.Errorf("entry %d: %w", i, err)
		}
		if i > 0 && e.Path <= prev {
			return fmt.Errorf("entry %q: entries out of order or repeated", e.Path)
		}
		prev = e.Path
		if dir, _, ok := cutLast(e.Path); ok && kinds[dir] != TypeDir {
			return fmt.Errorf("entry %q: its parent is not a directory entry", e.Path)
		}
		if e.Mode&^0o777 != 0 {
			return fmt.Errorf("entry %q: mode %o has bits beyond 0777", e.Path, e.Mode)
		}
		switch e.Type {
		case TypeDir, TypeFIFO:
			if e.Size != 0 || len(e.Chunks) != 0 || e.Link != "" {
				return fmt.Errorf("entry %q: a %s has no size, chunks or link", e.Path, e.Type)
			}
		case TypeFile:
			if e.Link != "" {
				return fmt.Errorf("entry %q: a file has no link", e.Path)
			}
			var sum int64
			for _, c := range e.Chunks {
				if !validHash(c.Hash) || c.Size <= 0 || c.Size > ChunkSize || c.Stored <= 0 || c.Stored > 2*ChunkSize {
					return fmt.Errorf("entry %q: bad chunk %+v", e.Path, c)
				}
				sum += c.Size
			}
			if sum != e.Size {
				return fmt.Errorf("entry %q: chunks hold %d bytes, size says %d", e.Path, sum, e.Size)
			}
			if size += e.Size; size > MaxSize {
				return fmt.Errorf("files hold over %d bytes", int64(MaxSize))
			}
		case TypeSymlink:
			if e.Link == "" || len(e.Link) > MaxPath || strings.ContainsRune(e.Link, 0) || e.Size != 0 || len(e.Chunks) != 0 {
				return fmt.Errorf("entry %q: bad symlink", e.Path)
			}
		case TypeHardlink:
			if e.Size != 0 || len(e.Chunks) != 0 || checkPath(e.Link) != nil {
				return fmt.Errorf("entry %q: bad hard link", e.Path)
			}
		default:
			return fmt.Errorf("entry %q: unknown type %q", e.Path, e.Type)
		}
		kinds[e.Path] = e.Type
	}
	for _, e := range m.Entries {
		if e.Type == TypeHardlink && kinds[e.Link] != TypeFile {
			return fmt.Errorf("entry %q: hard link to %q, which is not a file entry", e.Path, e.Link)
		}
	}
	if size != m.Size {
		return fmt.Errorf("files hold %d bytes, size says %d", size, m.Size)
	}
	return nil
}

// checkPath accepts a relative, clean, '/'-separated path without control
// characters.
func checkPath(p string) error {
	if p == "" || len(p) > MaxPath {
		return fmt.Errorf("path of %d bytes", len(p))
	}
	for _, r := range p {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("path %q has a control character", p)
		}
	}
	for _, part := range strings.Split(p, "/") {
		if part == "" || part == "." || part == ".." {
			return fmt.Errorf("path %q is not relative and clean", p)
		}
	}
	return nil
}

func cutLast(p string) (dir, name string, ok bool) {
	i := strings.LastIndexByte(p, '/')
	if i < 0 {
		return "", p, false
	}
	return p[:i], p[i+1:], true
}

func validHash(h string) bool {
	if len(h) != 64 {
		return false
	}
	_, err := hex.DecodeString(h)
	return err == nil && strings.ToLower(h) == h
}

// validID accepts snapshot ids: "snap-" and 24 lower-case hex digits.
func validID(id string) bool {
	if len(id) != 29 || !strings.HasPrefix(id, "snap-") {
		return false
	}
	_, err := hex.DecodeString(id[5:])
	return err == nil && strings.ToLower(id) == id
}

// ValidID reports whether id has the form of a snapshot id.
func ValidID(id string) bool { return validID(id) }
