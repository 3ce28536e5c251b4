package preview

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var (
	keyA = []byte(strings.Repeat("a", MinKeyBytes))
	keyB = []byte(strings.Repeat("b", MinKeyBytes))
)

const id = "00112233445566778899aabbccddeeff"

func TestTokenRotation(t *testing.T) {
	exp := time.Unix(1_900_000_000, 0).UTC()
	onlyA, _ := NewKeys(keyA, nil)
	bThenA, _ := NewKeys(keyB, keyA)
	onlyB, _ := NewKeys(keyB, nil)
	tokA, err := onlyA.Sign(id, exp)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		keys Keys
		tok  string
		ok   bool
	}{
		{"signed with the current key", onlyA, tokA, true},
		{"signed with the previous key", bThenA, tokA, true},
		{"the previous key was dropped", onlyB, tokA, false},
		{"truncated", onlyA, tokA[:len(tokA)-1], false},
		{"one character changed", onlyA, "B" + tokA[1:], false},
		{"empty", onlyA, "", false},
		{"not base64", onlyA, strings.Repeat("*", len(tokA)), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gotID, gotExp, err := tt.keys.Verify(tt.tok)
			if (err == nil) != tt.ok {
				t.Fatalf("Verify = %v, want ok %v", err, tt.ok)
			}
			if tt.ok && (gotID != id || !gotExp.Equal(exp)) {
				t.Fatalf("Verify = %s %v, want %s %v", gotID, gotExp, id, exp)
			}
		})
	}
	// New tokens are signed with the current key only.
	tokB, _ := bThenA.Sign(id, exp)
	if _, _, err := onlyA.Verify(tokB); err == nil {
		t.Fatal("a token of the rotated-in key verified under the old key alone")
	}
}

func TestLoadKeys(t *testing.T) {
	tests := []struct {
		name, content string
		ok            bool
	}{
		{"one key", string(keyA) + "\n", true},
		{"current and previous", string(keyB) + "\n\n" + string(keyA) + "\n", true},
		{"short key", "short\n", false},
		{"short previous key", string(keyA) + "\nshort\n", false},
		{"three lines", string(keyA) + "\n" + string(keyA) + "\n" + string(keyA) + "\n", false},
		{"empty", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "key")
			if err := os.WriteFile(p, []byte(tt.content), 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := LoadKeys(p); (err == nil) != tt.ok {
				t.Fatalf("LoadKeys = %v, want ok %v", err, tt.ok)
			}
		})
	}
}

// FuzzVerify: Verify never panics and accepts only what Sign made.
func FuzzVerify(f *testing.F) {
	keys, _ := NewKeys(keyA, keyB)
	tok, _ := keys.Sign(id, time.Unix(1_900_000_000, 0))
	f.Add(tok)
	f.Add("")
	f.Add(tok[:10])
	f.Fuzz(func(t *testing.T, s string) {
		gotID, exp, err := keys.Verify(s)
		if err != nil {
			return
		}
		again, _ := keys.Sign(gotID, exp)
		if again != s {
			t.Fatalf("Verify accepted %q, which Sign would write as %q", s, again)
		}
	})
}
