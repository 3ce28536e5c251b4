package snapshot_test

import (
	"testing"

	"github.com/plumbhq/plumb/pkg/snapshot"
	"github.com/plumbhq/plumb/pkg/snapshot/snapshottest"
)

func TestDirConformance(t *testing.T) {
	snapshottest.Run(t, func(t *testing.T) snapshot.Store {
		s, err := snapshot.NewDir(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}
