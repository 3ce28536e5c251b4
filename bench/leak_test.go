package main

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that the harness leaves no goroutine behind (workers,
// gRPC servers and agent streams are all stopped by the end of a run).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
