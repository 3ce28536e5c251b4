package secrets

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// Errors of a Sealer.
var (
	// ErrNoKey: no key is configured, so nothing can be sealed or opened.
	ErrNoKey = errors.New("no secrets key is configured (secrets_key or PLUMB_SECRETS_KEY: 32 bytes, base64)")
	// ErrUnknownKey: the value was sealed under a key that is not
	// configured (neither the current nor the previous one).
	ErrUnknownKey = errors.New("the secret was sealed under a key that is not configured")
	// ErrCorrupt: the sealed value does not open under its key (tampered,
	// truncated, or moved to another tenant or name).
	ErrCorrupt = errors.New("the sealed secret does not open: tampered, truncated or moved")
)

// MaxValueBytes bounds a secret's value.
const MaxValueBytes = 16 << 10

const version = "v1"

// Key is one AES-256 key with its id (a hash prefix, safe to store).
type Key struct {
	id   string
	aead cipher.AEAD
}

// ParseKey decodes a base64 (standard or URL, padded or not) 32-byte key.
func ParseKey(s string) (*Key, error) {
	s = strings.TrimSpace(s)
	var b []byte
	var err error
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err = enc.DecodeString(s); err == nil {
			break
		}
	}
	if err != nil {
		return nil, errors.New("secrets key: not base64")
	}
	if len(b) != 32 {
		return nil, fmt.Errorf("secrets key: %d bytes, want 32", len(b))
	}
	block, err := aes.NewCipher(b)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(append([]byte("plumb secrets key id\x00"), b...))
	return &Key{id: hex.EncodeToString(sum[:4]), aead: aead}, nil
}

// Sealer seals under its current key and opens under it or the previous
// one. A nil or keyless Sealer refuses with ErrNoKey.
type Sealer struct {
	cur, prev *Key
}

// NewSealer returns a sealer; prev may be nil, cur may be nil (no key).
func NewSealer(cur, prev *Key) *Sealer { return &Sealer{cur: cur, prev: prev} }

// Enabled reports whether a current key is configured.
func (s *Sealer) Enabled() bool { return s != nil && s.cur != nil }

func aad(tenant, name string) []byte { return []byte("plumb secret\x00" + tenant + "\x00" + name) }

// Seal encrypts value for (tenant, name).
func (s *Sealer) Seal(tenant, name string, value []byte) ([]byte, error) {
	if !s.Enabled() {
		return nil, ErrNoKey
	}
	nonce := make([]byte, s.cur.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	out := []byte(version + ":" + s.cur.id + ":")
	out = append(out, nonce...)
	return s.cur.aead.Seal(out, nonce, value, aad(tenant, name)), nil
}

// Open decrypts a value Seal returned for (tenant, name).
func (s *Sealer) Open(tenant, name string, sealed []byte) ([]byte, error) {
	if !s.Enabled() {
		return nil, ErrNoKey
	}
	ver, rest, ok := strings.Cut(string(sealed), ":")
	if !ok || ver != version {
		return nil, ErrCorrupt
	}
	id, body, ok := strings.Cut(rest, ":")
	if !ok {
		return nil, ErrCorrupt
	}
	var k *Key
	for _, c := range []*Key{s.cur, s.prev} {
		if c != nil && c.id == id {
			k = c
		}
	}
	if k == nil {
		return nil, ErrUnknownKey
	}
	n := k.aead.NonceSize()
	if len(body) < n {
		return nil, ErrCorrupt
	}
	v, err := k.aead.Open(nil, []byte(body[:n]), []byte(body[n:]), aad(tenant, name))
	if err != nil {
		return nil, ErrCorrupt
	}
	return v, nil
}

// nameRE is what a secret's name may be: it appears in agent configs and
// logs, never as a value.
var nameRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_.-]{0,62}$`)

// ValidName reports whether name is a valid secret name, and why not.
func ValidName(name string) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("secret name %q: want a letter then up to 62 letters, digits, '_', '.' or '-'", name)
	}
	return nil
}
