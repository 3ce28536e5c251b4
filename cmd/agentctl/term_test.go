package main

import (
	"os"
	"testing"
)

func TestIsTerminal(t *testing.T) {
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	if isTerminal(null) {
		t.Error("/dev/null is not a terminal")
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if isTerminal(r) {
		t.Error("a pipe is not a terminal")
	}
	if tty, err := os.Open("/dev/tty"); err == nil {
		defer tty.Close()
		if !isTerminal(tty) {
			t.Error("/dev/tty is a terminal")
		}
	}
}
