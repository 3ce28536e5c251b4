package backendtest_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that LocalProcesses leaves no goroutine behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
