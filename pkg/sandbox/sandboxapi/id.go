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
