package preview

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"
)

// MinKeyBytes is the shortest signing key accepted.
const MinKeyBytes = 32

const (
	idBytes    = 16
	macBytes   = sha256.Size
	tokenBytes = idBytes + 8 + macBytes
	macContext = "plumb-preview-v1"
)

// Keys sign and verify tokens: new tokens are signed with the current key;
// tokens signed with the current or the previous key verify (rotation).
type Keys struct {
	current, previous []byte
}

// NewKeys returns Keys with a current key and an optional previous one
// (nil), each at least MinKeyBytes long.
func NewKeys(current, previous []byte) (Keys, error) {
	if len(current) < MinKeyBytes || previous != nil && len(previous) < MinKeyBytes {
		return Keys{}, fmt.Errorf("a preview key must be at least %d bytes", MinKeyBytes)
	}
	return Keys{current: bytes.Clone(current), previous: bytes.Clone(previous)}, nil
}

// LoadKeys reads a key file: the current key on its first line and,
// optionally, the previous one on its second (blank lines are skipped).
func LoadKeys(path string) (Keys, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Keys{}, fmt.Errorf("preview key file: %w", err)
	}
	var lines [][]byte
	for l := range strings.SplitSeq(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, []byte(l))
		}
	}
	switch len(lines) {
	case 1:
		lines = append(lines, nil)
	case 2:
	default:
		return Keys{}, fmt.Errorf("preview key file %s: want the current key on one line and optionally the previous one on a second, got %d lines", path, len(lines))
	}
	k, err := NewKeys(lines[0], lines[1])
	if err != nil {
		return Keys{}, fmt.Errorf("preview key file %s: %w", path, err)
	}
	return k, nil
}

// Sign returns the token of preview id (hex of idBytes bytes) expiring at
// exp.
func (k Keys) Sign(id string, exp time.Time) (string, error) {
	raw, err := hex.DecodeString(id)
	if err != nil || len(raw) != idBytes {
		return "", fmt.Errorf("preview id %q is not %d hex bytes", id, idBytes)
	}
	b := make([]byte, 0, tokenBytes)
	b = append(b, raw...)
	b = binary.BigEndian.AppendUint64(b, uint64(exp.Unix())) //nolint:gosec // times after 1970
	b = append(b, mac(k.current, b)...)
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// errBadToken: the token is malformed or its MAC matches neither key.
var errBadToken = errors.New("bad preview token")

// Verify returns the preview id and expiry a token carries, or errBadToken
// when it is malformed or signed by neither key.
func (k Keys) Verify(tok string) (id string, exp time.Time, err error) {
	if base64.RawURLEncoding.DecodedLen(len(tok)) != tokenBytes {
		return "", time.Time{}, errBadToken
	}
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil || len(b) != tokenBytes {
		return "", time.Time{}, errBadToken
	}
	body, sum := b[:idBytes+8], b[idBytes+8:]
	ok := hmac.Equal(sum, mac(k.current, body))
	if k.previous != nil {
		ok = hmac.Equal(sum, mac(k.previous, body)) || ok
	}
	if !ok {
		return "", time.Time{}, errBadToken
	}
	secs := binary.BigEndian.Uint64(body[idBytes:])
	return hex.EncodeToString(body[:idBytes]), time.Unix(int64(secs), 0).UTC(), nil //nolint:gosec // signed by us
}

func mac(key, body []byte) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(macContext))
	h.Write(body)
	return h.Sum(nil)
}
