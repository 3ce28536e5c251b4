package sandboxapi

import (
	"crypto/rand"
	"encoding/base32"
	"strings"
)

var idEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// NewID returns sbx-<worker>-<random>; the worker part routes calls.
func NewID(worker string) string {
	b := make([]byte, 10)
	_, _ = rand.Read(b)
	return "sbx-" + worker + "-" + idEncoding.EncodeToString(b)
}

// WorkerOf returns the worker part of a sandbox id, or "" if id is not a
// sandbox id.
func WorkerOf(id string) string {
	rest, ok := strings.CutPrefix(id, "sbx-")
	i := strings.LastIndexByte(rest, '-')
	if !ok || i <= 0 || i == len(rest)-1 {
		return ""
	}
	return rest[:i]
}

// ValidWorker reports whether s can name a worker in sandbox ids: 1 to
// 63 letters, digits, '-' and '.', not starting with '-' or '.'.
func ValidWorker(s string) bool {
	if len(s) == 0 || len(s) > 63 || s[0] == '-' || s[0] == '.' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}

// NewVolumeID returns vol-<worker>-<random>, a named volume's id; like a
// sandbox id, its worker part routes calls.
func NewVolumeID(worker string) string {
	b := make([]byte, 10)
	_, _ = rand.Read(b)
	return "vol-" + worker + "-" + idEncoding.EncodeToString(b)
}

// VolumeWorkerOf returns the worker part of a volume id, or "" if id is
// not a volume id.
func VolumeWorkerOf(id string) string {
	rest, ok := strings.CutPrefix(id, "vol-")
	i := strings.LastIndexByte(rest, '-')
	if !ok || i <= 0 || i == len(rest)-1 {
		return ""
	}
	return rest[:i]
}
