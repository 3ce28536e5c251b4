package secrets

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"strings"
	"testing"
)

func newKey(t *testing.T) (*Key, string) {
	t.Helper()
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	s := base64.StdEncoding.EncodeToString(b)
	k, err := ParseKey(s)
	if err != nil {
		t.Fatal(err)
	}
	return k, s
}

func TestParseKey(t *testing.T) {
	_, good := newKey(t)
	tests := []struct {
		name, in, err string
	}{
		{name: "std", in: good},
		{name: "raw", in: strings.TrimRight(good, "=")},
		{name: "not base64", in: "!!!", err: "not base64"},
		{name: "short", in: base64.StdEncoding.EncodeToString([]byte("short")), err: "5 bytes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseKey(tc.in)
			if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
				t.Fatalf("ParseKey = %v, want %q", err, tc.err)
			}
		})
	}
}

func TestSealOpen(t *testing.T) {
	k1, _ := newKey(t)
	k2, _ := newKey(t)
	value := []byte("ghp_0123456789abcdef")
	sealed, err := NewSealer(k1, nil).Seal("acme", "gh", value)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(sealed, value) {
		t.Fatal("the sealed form holds the value")
	}
	tamper := func(b []byte) []byte { c := bytes.Clone(b); c[len(c)-1] ^= 1; return c }
	tests := []struct {
		name         string
		s            *Sealer
		tenant, item string
		sealed       []byte
		err          error
	}{
		{name: "current key", s: NewSealer(k1, nil), tenant: "acme", item: "gh", sealed: sealed},
		{name: "rotated: previous key", s: NewSealer(k2, k1), tenant: "acme", item: "gh", sealed: sealed},
		{name: "wrong key", s: NewSealer(k2, nil), tenant: "acme", item: "gh", sealed: sealed, err: ErrUnknownKey},
		{name: "no key", s: NewSealer(nil, nil), tenant: "acme", item: "gh", sealed: sealed, err: ErrNoKey},
		{name: "tampered", s: NewSealer(k1, nil), tenant: "acme", item: "gh", sealed: tamper(sealed), err: ErrCorrupt},
		{name: "truncated", s: NewSealer(k1, nil), tenant: "acme", item: "gh", sealed: sealed[:12], err: ErrCorrupt},
		{name: "other tenant", s: NewSealer(k1, nil), tenant: "evil", item: "gh", sealed: sealed, err: ErrCorrupt},
		{name: "other name", s: NewSealer(k1, nil), tenant: "acme", item: "gh2", sealed: sealed, err: ErrCorrupt},
		{name: "garbage", s: NewSealer(k1, nil), tenant: "acme", item: "gh", sealed: []byte("plain"), err: ErrCorrupt},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.s.Open(tc.tenant, tc.item, tc.sealed)
			if !errors.Is(err, tc.err) {
				t.Fatalf("Open = %v, want %v", err, tc.err)
			}
			if err == nil && !bytes.Equal(got, value) {
				t.Fatalf("Open = %q", got)
			}
			if err != nil && strings.Contains(err.Error(), string(value)) {
				t.Fatal("the error holds the value")
			}
		})
	}
}

func TestValidName(t *testing.T) {
	for name, ok := range map[string]bool{"GITHUB_TOKEN": true, "a.b-c_1": true, "": false, "1abc": false, "a b": false, "a/b": false, strings.Repeat("a", 64): false} {
		if err := ValidName(name); (err == nil) != ok {
			t.Errorf("ValidName(%q) = %v, want ok %v", name, err, ok)
		}
	}
}
