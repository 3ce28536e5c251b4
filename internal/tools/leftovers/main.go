// Command leftovers removes every container and volume that the tests of
// one `make test` run left behind (label plumb.test-run=<run>), with the
// loop devices of the workspace images in those volumes, and exits 1,
// naming them, when there were any; 0 when the run left nothing.
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/moby/moby/client"
	"github.com/plumbhq/plumb/pkg/sandbox/sandboxtest"
)

func main() {
	run := os.Getenv(sandboxtest.RunEnv)
	if run == "" {
		fmt.Fprintf(os.Stderr, "leftovers: set %s to the run id\n", sandboxtest.RunEnv)
		os.Exit(2)
	}
	cli, err := client.New(client.FromEnv)
	if err != nil {
		fmt.Fprintln(os.Stderr, "leftovers:", err)
		os.Exit(1)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cs, vs, err := sandboxtest.RemoveLeftovers(ctx, cli, sandboxtest.Label(sandboxtest.LabelTestRun, run))
	if err != nil {
		fmt.Fprintln(os.Stderr, "leftovers:", err)
		os.Exit(1)
	}
	if len(cs)+len(vs) > 0 {
		fmt.Fprintf(os.Stderr, "leftovers: the tests left %d containers %v and %d volumes %v behind (%s=%s); removed them\n",
			len(cs), cs, len(vs), vs, sandboxtest.LabelTestRun, run)
		os.Exit(1)
	}
	fmt.Printf("leftovers: none (%s=%s)\n", sandboxtest.LabelTestRun, run)
}
