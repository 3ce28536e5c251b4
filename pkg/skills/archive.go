package skills

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
)

// Pack encodes a skill's files as one tar archive, in path order with
// fixed headers, so that the same files give the same bytes (and SHA-256).
func Pack(files map[string][]byte) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, p := range sortedKeys(files) {
		c := files[p]
		if err := tw.WriteHeader(&tar.Header{Name: p, Mode: 0o644, Size: int64(len(c)), Typeflag: tar.TypeReg, Format: tar.FormatPAX}); err != nil {
			return nil, fmt.Errorf("pack %s: %w", p, err)
		}
		if _, err := tw.Write(c); err != nil {
			return nil, fmt.Errorf("pack %s: %w", p, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("pack: %w", err)
	}
	return buf.Bytes(), nil
}

// Unpack decodes an archive of Pack, within the skill bounds.
func Unpack(archive []byte) (map[string][]byte, error) {
	tr := tar.NewReader(bytes.NewReader(archive))
	files := map[string][]byte{}
	var total int64
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files, nil
		}
		if err != nil {
			return nil, fmt.Errorf("unpack: %w", err)
		}
		if h.Typeflag != tar.TypeReg {
			return nil, fmt.Errorf("unpack %s: not a regular file", h.Name)
		}
		if err := ValidPath(h.Name); err != nil {
			return nil, fmt.Errorf("unpack %s: %w", h.Name, err)
		}
		if len(files) >= MaxFiles || h.Size < 0 || total+h.Size > MaxTotalBytes {
			return nil, fmt.Errorf("unpack: the archive exceeds the skill bounds")
		}
		c, err := io.ReadAll(io.LimitReader(tr, h.Size))
		if err != nil {
			return nil, fmt.Errorf("unpack %s: %w", h.Name, err)
		}
		total += int64(len(c))
		files[h.Name] = c
	}
}

// Digest is the hex SHA-256 of an archive.
func Digest(archive []byte) string {
	sum := sha256.Sum256(archive)
	return hex.EncodeToString(sum[:])
}
