package agentproto

import "io"

// writeEach writes each buffer with one Write.
func writeEach(w io.Writer, bufs [][]byte) error {
	for _, b := range bufs {
		if len(b) == 0 {
			continue
		}
		if _, err := w.Write(b); err != nil {
			return err
		}
	}
	return nil
}

// nonEmpty drops the empty buffers of bufs (in place).
func nonEmpty(bufs [][]byte) [][]byte {
	out := bufs[:0]
	for _, b := range bufs {
		if len(b) > 0 {
			out = append(out, b)
		}
	}
	return out
}

// consume drops the first n bytes of bufs.
func consume(bufs [][]byte, n int) [][]byte {
	for n > 0 && len(bufs) > 0 {
		if n < len(bufs[0]) {
			bufs[0] = bufs[0][n:]
			return bufs
		}
		n -= len(bufs[0])
		bufs = bufs[1:]
	}
	for len(bufs) > 0 && len(bufs[0]) == 0 {
		bufs = bufs[1:]
	}
	return bufs
}
