package kvfs

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"unicode/utf8"

	"github.com/plumbhq/plumb/pkg/backend"
)

// File is one stored file: the value under a key.
//
// Content holds the raw bytes. Encoding records how the content is
// represented when serialized (docs/file-tools.md §4.9): utf-8 when Content is valid UTF-8,
// base64 otherwise. FS sets it on every write; it never changes what
// Content holds. CreatedAt and ModifiedAt are RFC 3339 UTC timestamps; an
// overwrite keeps CreatedAt and bumps ModifiedAt.
//
// The JSON form is {"content", "encoding", "created_at", "modified_at"}
// with content as text for utf-8 and as standard base64 for base64, so a
// round trip through JSON is byte-identical.
type File struct {
	Content    []byte
	Encoding   backend.Encoding
	CreatedAt  string
	ModifiedAt string
}

// EncodingOf returns the docs/file-tools.md §4.9 encoding of content: utf-8 when it is valid
// UTF-8, base64 otherwise.
func EncodingOf(content []byte) backend.Encoding {
	if utf8.Valid(content) {
		return backend.EncodingUTF8
	}
	return backend.EncodingBase64
}

type fileJSON struct {
	Content    string           `json:"content"`
	Encoding   backend.Encoding `json:"encoding"`
	CreatedAt  string           `json:"created_at"`
	ModifiedAt string           `json:"modified_at"`
}

// MarshalJSON encodes f with its content as text (utf-8) or base64. A
// utf-8 File whose content is not valid UTF-8 (only possible when built by
// hand) is written as base64, so nothing is lost.
func (f File) MarshalJSON() ([]byte, error) {
	j := fileJSON{Encoding: f.Encoding, CreatedAt: f.CreatedAt, ModifiedAt: f.ModifiedAt}
	if f.Encoding != backend.EncodingBase64 && utf8.Valid(f.Content) {
		j.Encoding = backend.EncodingUTF8
		j.Content = string(f.Content)
	} else {
		j.Encoding = backend.EncodingBase64
		j.Content = base64.StdEncoding.EncodeToString(f.Content)
	}
	return json.Marshal(j)
}

// UnmarshalJSON decodes the form MarshalJSON writes. An absent encoding
// means utf-8.
func (f *File) UnmarshalJSON(data []byte) error {
	var j fileJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return err
	}
	switch j.Encoding {
	case backend.EncodingBase64:
		b, err := base64.StdEncoding.DecodeString(j.Content)
		if err != nil {
			return fmt.Errorf("file content: %w", err)
		}
		f.Content = b
	case backend.EncodingUTF8, "":
		f.Content = []byte(j.Content)
		j.Encoding = backend.EncodingUTF8
	default:
		return fmt.Errorf("file content: unknown encoding %q", j.Encoding)
	}
	f.Encoding, f.CreatedAt, f.ModifiedAt = j.Encoding, j.CreatedAt, j.ModifiedAt
	return nil
}

// Entry is a file's metadata, as Stat and Scan return it.
type Entry struct {
	// Key is the file's normalized path.
	Key string
	// Size is len(Content).
	Size int64
	// CreatedAt and ModifiedAt are the File's timestamps.
	CreatedAt, ModifiedAt string
	// Rev identifies this version of the file: every Put gives the key a
	// Rev that it never had before (also across a delete and re-create).
	// Edit uses it to detect a concurrent change between its read and
	// its write.
	Rev int64
}

// Reader is the read side of a KV. Keys are normalized paths, ordered
// bytewise.
type Reader interface {
	// Stat returns the metadata of key; ok is false when there is no
	// such key.
	Stat(ctx context.Context, key string) (e Entry, ok bool, err error)
	// Get returns the file under key with its metadata. The caller must
	// not modify f.Content.
	Get(ctx context.Context, key string) (f File, e Entry, ok bool, err error)
	// Scan returns at most limit entries whose keys k satisfy
	// from <= k < to (bytewise), in key order. Implementations answer it
	// from an ordered index on the key; it is the only way FS enumerates
	// keys. Bounds may hold bytes no key contains (FS uses k+"\x01" for
	// "just after k").
	Scan(ctx context.Context, from, to string, limit int) ([]Entry, error)
}

// Streamer is implemented by KVs that can stream a file's content rather
// than load it whole (the Store). Read and grep then hold one piece of a
// file at a time, so their memory is O(window), not O(file).
type Streamer interface {
	// Open returns a reader of key's content from its first byte, with
	// its metadata; the reader sees the version e describes. ok is false
	// when there is no such key. The caller closes rc.
	Open(ctx context.Context, key string) (rc io.ReadCloser, e Entry, ok bool, err error)
}

// Tx is a read-write transaction (see KV.Update).
type Tx interface {
	Reader
	// Put stores f under key, replacing any file there, with a fresh
	// Rev. It does not check the tree invariants; FS does, in the same
	// transaction.
	Put(ctx context.Context, key string, f File) error
	// DeleteTree removes key and every key under key+"/" and returns how
	// many keys it removed.
	DeleteTree(ctx context.Context, key string) (removed int, err error)
}

// KV is the storage FS runs on. Reads outside Update may interleave with
// other writers; Update runs fn in a transaction that is atomic and
// isolated from every other Update on the same data (an implementation
// may simply serialize them). When fn returns an error the transaction
// must leave no trace; FS helps simple implementations by mutating only
// after every check has passed.
//
// Errors a KV returns are passed through when they are *backend.Error
// values (a KV should map its own failures, such as a full disk, to
// codes) and reported as internal otherwise.
type KV interface {
	Reader
	Update(ctx context.Context, fn func(Tx) error) error
}
