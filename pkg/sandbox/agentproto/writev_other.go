//go:build !linux

package agentproto

import "io"

// writeBuffers writes every byte of bufs to w, one Write per buffer (the
// writev path is Linux's, where the agent runs).
func writeBuffers(w io.Writer, bufs [][]byte) error { return writeEach(w, bufs) }
