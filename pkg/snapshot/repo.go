package snapshot

import (
	"archive/tar"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/klauspost/compress/zstd"
)

// Repo keeps the snapshots of every tenant in one Store: it captures a
// workspace's tar into chunks and a manifest, restores a verified tar,
// lists, deletes and collects. Chunks are per tenant (no cross-tenant
// deduplication, see docs/security.md). One Repo serialises the captures
// and deletes of a tenant; two workers sharing a bucket do not
// coordinate (docs/workspaces.md, "Limits").
type Repo struct {
	store Store
	// Quota caps a tenant's stored bytes (0 = none).
	quota int64
	now   func() time.Time

	enc *zstd.Encoder
	dec *zstd.Decoder
	// raw holds decompressed chunks' buffers (ChunkSize) for reuse: a
	// restore decompresses every chunk once, and a new 1 MiB buffer each
	// time is zeroed and collected for nothing.
	raw sync.Pool

	mu    sync.Mutex
	locks map[string]*sync.Mutex
}

// QuotaLimit names the per-tenant quota in errors.
const QuotaLimit = "snapshots.per_tenant_bytes"

// NewRepo returns a Repo over store with a per-tenant quota of stored
// bytes (0 = unlimited).
func NewRepo(store Store, quota int64) (*Repo, error) {
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithEncoderConcurrency(1))
	if err != nil {
		return nil, err
	}
	// A chunk never inflates past ChunkSize: a "zip bomb" fails here. The
	// frame's own checksum is checked too: a stored chunk with any byte
	// changed is DATA_LOSS, even where its content would still verify.
	dec, err := zstd.NewReader(nil, zstd.WithDecoderMaxMemory(ChunkSize), zstd.WithDecoderConcurrency(ReadAhead))
	if err != nil {
		return nil, err
	}
	r := &Repo{store: store, quota: quota, now: time.Now, enc: enc, dec: dec, locks: map[string]*sync.Mutex{}}
	r.raw.New = func() any {
		b := make([]byte, 0, ChunkSize)
		return &b
	}
	return r, nil
}

// Store returns the repo's store.
func (r *Repo) Store() Store { return r.store }

func (r *Repo) lock(tenant string) func() {
	r.mu.Lock()
	l := r.locks[tenant]
	if l == nil {
		l = &sync.Mutex{}
		r.locks[tenant] = l
	}
	r.mu.Unlock()
	l.Lock()
	return l.Unlock
}

// tenantKey is the store prefix of a tenant: the tenant name never
// appears in a key.
func tenantKey(tenant string) string {
	sum := sha256.Sum256([]byte("plumb-snapshot-tenant\x00" + tenant))
	return hex.EncodeToString(sum[:16])
}

func chunkKey(tenant, hash string) string  { return tenantKey(tenant) + "/" + hash[:2] + "/" + hash }
func manifestKey(tenant, id string) string { return tenantKey(tenant) + "/" + id }
func newSnapshotID() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return "snap-" + hex.EncodeToString(b)
}

// Meta is what the caller says about a new snapshot.
type Meta struct {
	Tenant, Sandbox, Template, Parent string
	Kind                              string // "" or KindMemory
	Settings                          json.RawMessage
}

// Capture reads a workspace tar (the engine's archive of the directory
// named root: entries "root", "root/a", …) and stores it as a new snapshot
// of meta.Tenant. The tar is hostile input: names must stay under root,
// device nodes are refused (CodeInvalid), sockets and other types skipped,
// ownership, setuid, setgid and sticky bits dropped, and more than maxSize
// file bytes (0 = MaxSize) is CodeInvalid. Over the tenant's quota it is
// CodeQuota and the chunks it wrote are removed again.
func (r *Repo) Capture(ctx context.Context, meta Meta, tarball io.Reader, root string, maxSize int64) (*Manifest, error) {
	if maxSize <= 0 || maxSize > MaxSize {
		maxSize = MaxSize
	}
	unlock := r.lock(meta.Tenant)
	defer unlock()
	used, held, err := r.usage(ctx, meta.Tenant)
	if err != nil {
		return nil, err
	}
	m := &Manifest{Version: 1, ID: newSnapshotID(), Tenant: meta.Tenant, Sandbox: meta.Sandbox, Template: meta.Template, Parent: meta.Parent, Kind: meta.Kind, Created: r.now().UTC(), Settings: meta.Settings}
	var written []string // chunk keys this capture put
	fail := func(err error) (*Manifest, error) {
		for _, k := range written {
			_ = r.store.DeleteChunk(context.WithoutCancel(ctx), k)
		}
		return nil, err
	}
	seen := map[string]bool{}
	tr := tar.NewReader(tarball)
	buf := make([]byte, ChunkSize)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fail(&Error{Code: CodeInvalid, Message: "read the workspace archive", Err: err})
		}
		name, ok := relName(h.Name, root)
		if !ok {
			return fail(errorf(CodeInvalid, "workspace archive: entry %q is outside %s", h.Name, root))
		}
		if name == "" || name == "lost+found" {
			continue // the workspace itself; the file system's own directory
		}
		if err := checkPath(name); err != nil {
			return fail(&Error{Code: CodeInvalid, Message: "workspace archive", Err: err})
		}
		if seen[name] {
			return fail(errorf(CodeInvalid, "workspace archive: %q appears twice", name))
		}
		seen[name] = true
		e := Entry{Path: name, Mode: uint32(h.Mode) & 0o777, MTime: h.ModTime.Unix()}
		switch h.Typeflag {
		case tar.TypeDir:
			e.Type = TypeDir
		case tar.TypeReg:
			e.Type, e.Size = TypeFile, h.Size
			if m.Size+h.Size > maxSize {
				return fail(errorf(CodeInvalid, "the workspace holds over %d bytes", maxSize))
			}
			var n int64
			for {
				k, err := io.ReadFull(tr, buf)
				if k > 0 {
					c, w, err := r.putChunk(ctx, meta.Tenant, buf[:k], held)
					if err != nil {
						return fail(err)
					}
					if w {
						written = append(written, chunkKey(meta.Tenant, c.Hash))
						m.StoredBytes += c.Stored
						if r.quota > 0 && used+m.StoredBytes > r.quota {
							return fail(&Error{Code: CodeQuota, Limit: QuotaLimit, Message: fmt.Sprintf("tenant %q would store over its snapshot quota of %d bytes (%s)", meta.Tenant, r.quota, QuotaLimit)})
						}
					}
					e.Chunks = append(e.Chunks, c)
					n += int64(k)
				}
				if err == io.EOF || err == io.ErrUnexpectedEOF {
					break
				}
				if err != nil {
					return fail(&Error{Code: CodeInvalid, Message: "read the workspace archive", Err: err})
				}
			}
			if n != h.Size {
				return fail(errorf(CodeInvalid, "workspace archive: %q is %d bytes, its header says %d", name, n, h.Size))
			}
			m.Size += n
		case tar.TypeSymlink:
			e.Type, e.Link, e.Mode = TypeSymlink, h.Linkname, 0
		case tar.TypeLink:
			target, ok := relName(h.Linkname, root)
			if !ok || target == "" {
				return fail(errorf(CodeInvalid, "workspace archive: hard link %q to %q outside %s", name, h.Linkname, root))
			}
			e.Type, e.Link, e.Mode, e.MTime = TypeHardlink, target, 0, 0
		case tar.TypeFifo:
			e.Type = TypeFIFO
		case tar.TypeChar, tar.TypeBlock:
			return fail(errorf(CodeInvalid, "workspace archive: %q is a device node", name))
		default:
			continue // sockets and the like: not kept
		}
		m.Entries = append(m.Entries, e)
		if err := ctx.Err(); err != nil {
			return fail(err)
		}
	}
	sort.Slice(m.Entries, func(i, j int) bool { return m.Entries[i].Path < m.Entries[j].Path })
	if err := m.Validate(); err != nil {
		return fail(&Error{Code: CodeInvalid, Message: "workspace archive", Err: err})
	}
	data, err := m.Marshal()
	if err != nil {
		return fail(err)
	}
	if err := r.store.PutManifest(ctx, manifestKey(meta.Tenant, m.ID), data); err != nil {
		return fail(fmt.Errorf("store snapshot manifest: %w", err))
	}
	return m, nil
}

// relName maps an archive name under root to a workspace path ("" for
// root itself).
func relName(name, root string) (string, bool) {
	name = strings.TrimSuffix(name, "/")
	name = strings.TrimPrefix(name, "./")
	if name == root {
		return "", true
	}
	rest, ok := strings.CutPrefix(name, root+"/")
	if !ok || rest == "" {
		return "", false
	}
	if path.Clean(rest) != rest {
		return "", false
	}
	return rest, true
}

// putChunk stores one chunk unless the tenant holds it; wrote reports a
// chunk new to the tenant (it counts against the quota).
func (r *Repo) putChunk(ctx context.Context, tenant string, raw []byte, held map[string]int64) (c Chunk, wrote bool, err error) {
	sum := sha256.Sum256(raw)
	c = Chunk{Hash: hex.EncodeToString(sum[:]), Size: int64(len(raw))}
	if n, ok := held[c.Hash]; ok {
		c.Stored = n
		return c, false, nil
	}
	z := r.enc.EncodeAll(raw, make([]byte, 0, len(raw)/2+64))
	c.Stored = int64(len(z))
	if err := r.store.PutChunk(ctx, chunkKey(tenant, c.Hash), z); err != nil {
		return c, false, fmt.Errorf("store snapshot chunk: %w", err)
	}
	held[c.Hash] = c.Stored
	return c, true, nil
}

// usage returns a tenant's stored bytes (each chunk its manifests name,
// once) and those chunks' stored sizes.
func (r *Repo) usage(ctx context.Context, tenant string) (int64, map[string]int64, error) {
	ms, err := r.manifests(ctx, tenant)
	if err != nil {
		return 0, nil, err
	}
	held := map[string]int64{}
	var used int64
	for _, m := range ms {
		if m.m == nil {
			continue
		}
		for _, e := range m.m.Entries {
			for _, c := range e.Chunks {
				if _, ok := held[c.Hash]; !ok {
					held[c.Hash] = c.Stored
					used += c.Stored
				}
			}
		}
	}
	return used, held, nil
}

// Usage returns the bytes a tenant's snapshots hold in the store.
func (r *Repo) Usage(ctx context.Context, tenant string) (int64, error) {
	used, _, err := r.usage(ctx, tenant)
	return used, err
}

type listed struct {
	id  string
	m   *Manifest
	err error
}

func (r *Repo) manifests(ctx context.Context, tenant string) ([]listed, error) {
	prefix := tenantKey(tenant) + "/"
	keys, err := r.store.ListManifests(ctx, prefix)
	if err != nil {
		return nil, fmt.Errorf("list snapshot manifests: %w", err)
	}
	out := make([]listed, 0, len(keys))
	for _, k := range keys {
		id := strings.TrimPrefix(k, prefix)
		m, err := r.get(ctx, tenant, id)
		if CodeOf(err) != CodeDataLoss && err != nil {
			if CodeOf(err) == CodeNotFound {
				continue // deleted meanwhile
			}
			return nil, err
		}
		out = append(out, listed{id: id, m: m, err: err})
	}
	return out, nil
}

// Get returns a tenant's workspace snapshot, its manifest verified.
// Another tenant's snapshot, or a memory image, is CodeNotFound; a corrupt
// one CodeDataLoss.
func (r *Repo) Get(ctx context.Context, tenant, id string) (*Manifest, error) {
	return r.getKind(ctx, tenant, id, "")
}

// GetMemory returns a tenant's memory image (KindMemory), its manifest
// verified; anything else is CodeNotFound.
func (r *Repo) GetMemory(ctx context.Context, tenant, id string) (*Manifest, error) {
	return r.getKind(ctx, tenant, id, KindMemory)
}

func (r *Repo) getKind(ctx context.Context, tenant, id, kind string) (*Manifest, error) {
	m, err := r.get(ctx, tenant, id)
	if err == nil && m.Kind != kind {
		return nil, errorf(CodeNotFound, "snapshot %s not found", id)
	}
	return m, err
}

func (r *Repo) get(ctx context.Context, tenant, id string) (*Manifest, error) {
	if !validID(id) {
		return nil, errorf(CodeNotFound, "snapshot %q not found", id)
	}
	data, err := r.store.GetManifest(ctx, manifestKey(tenant, id))
	if errors.Is(err, ErrNotExist) {
		return nil, errorf(CodeNotFound, "snapshot %s not found", id)
	}
	if err != nil {
		return nil, fmt.Errorf("read snapshot %s: %w", id, err)
	}
	m, err := ParseManifest(data)
	if err != nil {
		return nil, &Error{Code: CodeDataLoss, Message: fmt.Sprintf("snapshot %s is corrupt", id), Err: err}
	}
	if m.ID != id || m.Tenant != tenant {
		return nil, errorf(CodeDataLoss, "snapshot %s: its manifest names another snapshot or tenant", id)
	}
	return m, nil
}

// Summary is a snapshot as List shows it; a manifest that does not verify
// is listed with Corrupt set (delete it).
type Summary struct {
	ID, Sandbox, Template, Parent string
	Created                       time.Time
	Size, StoredBytes             int64
	Corrupt                       bool
}

// List returns a tenant's snapshots, oldest first.
func (r *Repo) List(ctx context.Context, tenant string) ([]Summary, error) {
	ms, err := r.manifests(ctx, tenant)
	if err != nil {
		return nil, err
	}
	out := make([]Summary, 0, len(ms))
	for _, l := range ms {
		if l.m == nil {
			out = append(out, Summary{ID: l.id, Corrupt: true})
			continue
		}
		m := l.m
		if m.Kind == KindMemory {
			continue // part of a hibernation, not a workspace (its bytes count in Usage)
		}
		out = append(out, Summary{ID: m.ID, Sandbox: m.Sandbox, Template: m.Template, Parent: m.Parent, Created: m.Created, Size: m.Size, StoredBytes: m.StoredBytes})
	}
	sort.SliceStable(out, func(i, j int) bool {
		if !out[i].Created.Equal(out[j].Created) {
			return out[i].Created.Before(out[j].Created)
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
}

// Delete removes a tenant's snapshot and then every chunk no other
// snapshot of the tenant names. A corrupt manifest is removed too; its
// chunks stay (nothing says which they are) until a sweep.
func (r *Repo) Delete(ctx context.Context, tenant, id string) error {
	unlock := r.lock(tenant)
	defer unlock()
	m, err := r.get(ctx, tenant, id)
	if err != nil && CodeOf(err) != CodeDataLoss {
		return err
	}
	if err := r.store.DeleteManifest(ctx, manifestKey(tenant, id)); err != nil {
		return fmt.Errorf("delete snapshot %s: %w", id, err)
	}
	if m == nil {
		return nil
	}
	_, held, err := r.usage(ctx, tenant)
	if err != nil {
		return err
	}
	done := map[string]bool{}
	for _, e := range m.Entries {
		for _, c := range e.Chunks {
			if _, ok := held[c.Hash]; ok || done[c.Hash] {
				continue
			}
			done[c.Hash] = true
			if err := r.store.DeleteChunk(ctx, chunkKey(tenant, c.Hash)); err != nil {
				return fmt.Errorf("collect snapshot chunk: %w", err)
			}
		}
	}
	return nil
}

// Restore writes the tenant's snapshot id as a tar (names relative to the
// workspace, owned by uid:gid, permission bits only; directories first,
// then files and FIFOs, then hard links and symlinks) to w, verifying every
// chunk on the way: a corrupt, truncated or missing chunk is CodeDataLoss.
// w may have received part of the tar when it fails: write into a
// temporary file, or into something thrown away on error (a created, not
// started container), and use it only when Restore returns nil.
func (r *Repo) Restore(ctx context.Context, tenant, id string, w io.Writer, uid, gid int) (*Manifest, error) {
	m, err := r.Get(ctx, tenant, id)
	if err != nil {
		return nil, err
	}
	if err := r.WriteTar(ctx, m, w, uid, gid); err != nil {
		return nil, err
	}
	return m, nil
}

// ReadAhead is how many chunks WriteTar fetches, decompresses and
// verifies ahead of the one it writes: the store's latency (an S3 round
// trip per chunk) and the checks overlap the writer's consumer (the
// engine extracting the tar), at most ReadAhead+1 chunks in memory.
const ReadAhead = 4

// WriteTar writes the tar of m, a manifest Get returned (verified), to w
// as Restore does. Every chunk is verified before any of its bytes reach
// w, and a file's header goes out only once its first chunk verified;
// chunks are read ahead (ReadAhead) so the store, the checks and w's
// reader work at once. On error w may have received a prefix of the tar
// (only verified bytes, never an end-of-archive marker).
func (r *Repo) WriteTar(ctx context.Context, m *Manifest, w io.Writer, uid, gid int) error {
	tw := tar.NewWriter(w)
	err := r.Each(ctx, m, func(e Entry, content func(io.Writer) error) error {
		h := &tar.Header{Name: e.Path, Mode: int64(e.Mode), Uid: uid, Gid: gid, ModTime: time.Unix(e.MTime, 0), Format: tar.FormatPAX}
		switch e.Type {
		case TypeDir:
			h.Typeflag, h.Name = tar.TypeDir, e.Path+"/"
		case TypeFIFO:
			h.Typeflag = tar.TypeFifo
		case TypeFile:
			h.Typeflag, h.Size = tar.TypeReg, e.Size
		case TypeHardlink:
			h.Typeflag, h.Linkname, h.Mode = tar.TypeLink, e.Link, 0o777
		default:
			h.Typeflag, h.Linkname, h.Mode = tar.TypeSymlink, e.Link, 0o777
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		return content(tw)
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// Each calls fn for every entry of m, a manifest Get returned (verified),
// in the order WriteTar writes them: directories, files and FIFOs as the
// manifest lists them (a directory before its contents), then every link.
// content writes a file's bytes (nothing for any other entry) to its
// writer, chunk by chunk, each decompressed and verified before any of
// its bytes are written; a file's first chunk has verified before fn is
// called. Chunks are read ahead (ReadAhead) across files, so the store,
// the checks and fn work at once; a chunk that fails is CodeDataLoss
// naming its file.
func (r *Repo) Each(ctx context.Context, m *Manifest, fn func(e Entry, content func(io.Writer) error) error) (err error) {
	ctx, cancel := context.WithCancel(ctx)
	chunks := r.readAhead(ctx, m)
	defer func() {
		// Every fetch has ended before Each returns: none outlives it.
		cancel()
		for f := range chunks {
			<-f
		}
	}()
	none := func(io.Writer) error { return nil }
	var links []Entry
	for _, e := range m.Entries {
		switch e.Type {
		case TypeDir, TypeFIFO:
			err = fn(e, none)
		case TypeFile:
			err = r.eachFile(ctx, m.ID, e, chunks, fn)
		default:
			links = append(links, e)
		}
		if err != nil {
			return err
		}
	}
	for _, e := range links {
		if err := fn(e, none); err != nil {
			return err
		}
	}
	return nil
}

// eachFile hands file e, its chunks in order, to fn.
func (r *Repo) eachFile(ctx context.Context, id string, e Entry, chunks chan chan fetched, fn func(Entry, func(io.Writer) error) error) error {
	var first *fetched
	if len(e.Chunks) > 0 {
		var err error
		if first, err = next(ctx, chunks, id, e.Path); err != nil {
			return err
		}
	}
	written := 0
	err := fn(e, func(w io.Writer) error {
		for f := first; written < len(e.Chunks); written++ {
			if written > 0 {
				var err error
				if f, err = next(ctx, chunks, id, e.Path); err != nil {
					return err
				}
			}
			_, err := w.Write(f.raw)
			r.release(f.raw) // w has copied it
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil && written < len(e.Chunks) {
		err = fmt.Errorf("snapshot %s: file %q: %d of its %d chunks not written", id, e.Path, len(e.Chunks)-written, len(e.Chunks))
	}
	return err
}

// fetched is one chunk read ahead.
type fetched struct {
	raw []byte
	err error
}

// readAhead fetches and verifies the chunks of m's files in the order
// WriteTar writes them, ReadAhead at a time; the channel yields one
// future per chunk, in order, and is closed after the last (or when ctx
// ends).
func (r *Repo) readAhead(ctx context.Context, m *Manifest) chan chan fetched {
	out := make(chan chan fetched, ReadAhead)
	go func() {
		defer close(out)
		for _, e := range m.Entries {
			if e.Type != TypeFile {
				continue
			}
			for _, c := range e.Chunks {
				f := make(chan fetched, 1)
				select {
				case out <- f:
				case <-ctx.Done():
					return
				}
				go func() {
					raw, err := r.chunk(ctx, m.Tenant, c)
					f <- fetched{raw: raw, err: err}
				}()
			}
		}
	}()
	return out
}

// next waits for the next chunk read ahead; a failed one is CodeDataLoss
// naming the file.
func next(ctx context.Context, chunks chan chan fetched, id, file string) (*fetched, error) {
	var f fetched
	select {
	case fc, ok := <-chunks:
		if !ok {
			return nil, ctx.Err()
		}
		f = <-fc
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if f.err != nil {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		return nil, &Error{Code: CodeDataLoss, Message: fmt.Sprintf("snapshot %s: file %q", id, file), Err: f.err}
	}
	return &f, nil
}

// chunk reads and verifies one chunk.
func (r *Repo) chunk(ctx context.Context, tenant string, c Chunk) ([]byte, error) {
	z, err := r.store.GetChunk(ctx, chunkKey(tenant, c.Hash))
	if errors.Is(err, ErrNotExist) {
		return nil, errorf(CodeDataLoss, "chunk %s is missing from the store", c.Hash)
	}
	if err != nil {
		return nil, fmt.Errorf("read chunk %s: %w", c.Hash, err)
	}
	if int64(len(z)) != c.Stored {
		return nil, errorf(CodeDataLoss, "chunk %s is %d bytes in the store, want %d (truncated or corrupt)", c.Hash, len(z), c.Stored)
	}
	buf := r.raw.Get().(*[]byte) // a manifest's chunk is at most ChunkSize
	raw, err := r.dec.DecodeAll(z, (*buf)[:0])
	if err != nil {
		return nil, &Error{Code: CodeDataLoss, Message: fmt.Sprintf("chunk %s does not decompress", c.Hash), Err: err}
	}
	if sum := sha256.Sum256(raw); int64(len(raw)) != c.Size || hex.EncodeToString(sum[:]) != c.Hash {
		return nil, errorf(CodeDataLoss, "chunk %s: checksum mismatch", c.Hash)
	}
	return raw, nil
}

// release gives a chunk's buffer back for reuse; raw is not used after.
func (r *Repo) release(raw []byte) {
	if cap(raw) == ChunkSize {
		raw = raw[:0]
		r.raw.Put(&raw)
	}
}

// Verify reads and checks every chunk of a tenant's snapshot without
// writing anything.
func (r *Repo) Verify(ctx context.Context, tenant, id string) error {
	m, err := r.get(ctx, tenant, id)
	if err != nil {
		return err
	}
	return r.WriteTar(ctx, m, io.Discard, 0, 0)
}

// ChunkKey is the store key of a tenant's chunk (tests and tools).
func ChunkKey(tenant, hash string) string { return chunkKey(tenant, hash) }

// ManifestKey is the store key of a tenant's manifest (tests and tools).
func ManifestKey(tenant, id string) string { return manifestKey(tenant, id) }
