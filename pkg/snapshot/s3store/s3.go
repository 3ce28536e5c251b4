package s3store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/plumbhq/plumb/pkg/snapshot"
)

// Config says where the bucket is.
type Config struct {
	// Endpoint is host:port of the S3 API (no scheme).
	Endpoint string
	// Secure uses HTTPS.
	Secure bool
	Region string
	Bucket string
	// Prefix is prepended to every object name ("" = none; otherwise it
	// should end with '/').
	Prefix string
	// AccessKey and SecretKey; both empty = the AWS_ACCESS_KEY_ID,
	// AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN) environment variables.
	AccessKey, SecretKey string
	// CreateBucket makes the bucket when it does not exist.
	CreateBucket bool
}

// String never shows the secret key.
func (c Config) String() string {
	return fmt.Sprintf("s3://%s/%s%s (endpoint %s)", c.Bucket, c.Prefix, "", c.Endpoint)
}

// Store is a snapshot.Store in an S3 bucket: chunks/<key> and
// manifests/<key> under the prefix.
type Store struct {
	cl     *minio.Client
	bucket string
	prefix string
}

var _ snapshot.Store = (*Store)(nil)

// New connects to the bucket (and makes it when asked).
func New(ctx context.Context, cfg Config) (*Store, error) {
	if cfg.Endpoint == "" || cfg.Bucket == "" {
		return nil, errors.New("s3 snapshot store: endpoint and bucket are required")
	}
	var creds *credentials.Credentials
	if cfg.AccessKey != "" || cfg.SecretKey != "" {
		creds = credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, "")
	} else {
		creds = credentials.NewEnvAWS()
	}
	cl, err := minio.New(cfg.Endpoint, &minio.Options{Creds: creds, Secure: cfg.Secure, Region: cfg.Region, BucketLookup: minio.BucketLookupPath})
	if err != nil {
		return nil, fmt.Errorf("s3 snapshot store %s: %w", cfg, err)
	}
	s := &Store{cl: cl, bucket: cfg.Bucket, prefix: cfg.Prefix}
	ok, err := cl.BucketExists(ctx, cfg.Bucket)
	if err != nil {
		return nil, fmt.Errorf("s3 snapshot store %s: %w", cfg, err)
	}
	if !ok {
		if !cfg.CreateBucket {
			return nil, fmt.Errorf("s3 snapshot store %s: no such bucket", cfg)
		}
		if err := cl.MakeBucket(ctx, cfg.Bucket, minio.MakeBucketOptions{Region: cfg.Region}); err != nil {
			return nil, fmt.Errorf("s3 snapshot store %s: make bucket: %w", cfg, err)
		}
	}
	return s, nil
}

func (s *Store) name(kind, key string) string { return s.prefix + kind + "/" + key }

func (s *Store) put(ctx context.Context, kind, key string, data []byte) error {
	_, err := s.cl.PutObject(ctx, s.bucket, s.name(kind, key), bytes.NewReader(data), int64(len(data)), minio.PutObjectOptions{ContentType: "application/octet-stream", DisableMultipart: true})
	return err
}

func notFound(err error) bool {
	var r minio.ErrorResponse
	if errors.As(err, &r) {
		return r.StatusCode == http.StatusNotFound || r.Code == "NoSuchKey"
	}
	return false
}

func (s *Store) get(ctx context.Context, kind, key string) ([]byte, error) {
	o, err := s.cl.GetObject(ctx, s.bucket, s.name(kind, key), minio.GetObjectOptions{})
	if err != nil {
		if notFound(err) {
			return nil, fmt.Errorf("%s %s: %w", kind, key, snapshot.ErrNotExist)
		}
		return nil, err
	}
	defer o.Close()
	b, err := readObject(o)
	if err != nil {
		if notFound(err) {
			return nil, fmt.Errorf("%s %s: %w", kind, key, snapshot.ErrNotExist)
		}
		return nil, err
	}
	return b, nil
}

// preallocMax bounds the buffer allocated from an object's declared
// length: a larger object is read as it arrives, so a store cannot make
// the worker allocate what it does not send.
const preallocMax = 16 << 20

// readObject reads a whole object into one buffer of its declared length
// (no growth, no copies) when that is small enough.
func readObject(o *minio.Object) ([]byte, error) {
	st, err := o.Stat() // the GET's own response: no other request
	if err != nil {
		return nil, err
	}
	if st.Size < 0 || st.Size > preallocMax {
		return io.ReadAll(o)
	}
	b := make([]byte, st.Size+1) // one byte more: a longer body is seen
	n, err := io.ReadFull(o, b)
	switch {
	case err == io.ErrUnexpectedEOF || err == io.EOF:
		return b[:n], nil // the caller checks the length it expects
	case err != nil:
		return nil, err
	}
	rest, err := io.ReadAll(o) // longer than declared
	return append(b, rest...), err
}

func (s *Store) del(ctx context.Context, kind, key string) error {
	err := s.cl.RemoveObject(ctx, s.bucket, s.name(kind, key), minio.RemoveObjectOptions{})
	if err != nil && !notFound(err) {
		return err
	}
	return nil
}

// PutChunk stores a chunk.
func (s *Store) PutChunk(ctx context.Context, key string, data []byte) error {
	return s.put(ctx, "chunks", key, data)
}

// GetChunk reads a chunk.
func (s *Store) GetChunk(ctx context.Context, key string) ([]byte, error) {
	return s.get(ctx, "chunks", key)
}

// HasChunk reports whether a chunk is stored.
func (s *Store) HasChunk(ctx context.Context, key string) (bool, error) {
	_, err := s.cl.StatObject(ctx, s.bucket, s.name("chunks", key), minio.StatObjectOptions{})
	switch {
	case err == nil:
		return true, nil
	case notFound(err):
		return false, nil
	}
	return false, err
}

// DeleteChunk removes a chunk.
func (s *Store) DeleteChunk(ctx context.Context, key string) error {
	return s.del(ctx, "chunks", key)
}

// PutManifest stores a manifest.
func (s *Store) PutManifest(ctx context.Context, key string, data []byte) error {
	return s.put(ctx, "manifests", key, data)
}

// GetManifest reads a manifest.
func (s *Store) GetManifest(ctx context.Context, key string) ([]byte, error) {
	return s.get(ctx, "manifests", key)
}

// DeleteManifest removes a manifest.
func (s *Store) DeleteManifest(ctx context.Context, key string) error {
	return s.del(ctx, "manifests", key)
}

// ListManifests lists manifest keys under prefix.
func (s *Store) ListManifests(ctx context.Context, prefix string) ([]string, error) {
	base := s.prefix + "manifests/"
	var keys []string
	for o := range s.cl.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: base + prefix, Recursive: true}) {
		if o.Err != nil {
			return nil, o.Err
		}
		keys = append(keys, strings.TrimPrefix(o.Key, base))
	}
	sort.Strings(keys)
	return keys, nil
}
