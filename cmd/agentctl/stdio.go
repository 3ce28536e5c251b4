package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
)

// stdio is the outside world of a command: its streams, whether a human
// sits at stdin, the environment and the editor. Tests replace all of it.
type stdio struct {
	in       io.Reader
	out, err io.Writer
	// terminal is true when stdin is an interactive terminal, so
	// agentctl may ask for decisions.
	terminal bool
	getenv   func(string) string
	// edit runs editor on path and waits for it to exit.
	edit func(ctx context.Context, editor, path string) error
}

// osStdio is the process's stdio.
func osStdio() stdio {
	return stdio{
		in: os.Stdin, out: os.Stdout, err: os.Stderr,
		terminal: isTerminal(os.Stdin),
		getenv:   os.Getenv,
		edit:     runEditor,
	}
}

// runEditor runs $EDITOR through the shell, so that values such as
// "code --wait" work, attached to the terminal.
func runEditor(ctx context.Context, editor, path string) error {
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", editor+` "$1"`, "agentctl", path)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("editor %q: %w", editor, err)
	}
	return nil
}

// lineReader reads lines from a reader without outliving a cancelled
// context: each read runs in a goroutine of its own, started only when a
// line is wanted, so nothing reads stdin while an editor owns the
// terminal. After ctx ends a pending read is abandoned (agentctl is about
// to exit) and picked up by the next call, if any.
type lineReader struct {
	r       *bufio.Reader
	pending chan lineResult
	eof     bool
}

type lineResult struct {
	line string
	err  error
}

func newLineReader(r io.Reader) *lineReader { return &lineReader{r: bufio.NewReader(r)} }

// errStdinClosed is returned once stdin has no more lines.
var errStdinClosed = errors.New("stdin closed")

// line returns the next line without its line ending.
func (l *lineReader) line(ctx context.Context) (string, error) {
	if l.eof {
		return "", errStdinClosed
	}
	if l.pending == nil {
		ch := make(chan lineResult, 1)
		go func() {
			s, err := l.r.ReadString('\n')
			ch <- lineResult{s, err}
		}()
		l.pending = ch
	}
	select {
	case res := <-l.pending:
		l.pending = nil
		if res.err != nil {
			l.eof = true
			if res.line == "" {
				if errors.Is(res.err, io.EOF) {
					return "", errStdinClosed
				}
				return "", res.err
			}
		}
		return strings.TrimRight(res.line, "\r\n"), nil
	case <-ctx.Done():
		return "", ctx.Err()
	}
}
