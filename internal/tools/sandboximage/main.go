// Command sandboximage imports plumb's offline sandbox image (busybox from
// Debian's busybox-static, FROM scratch) into the local Docker Engine and
// prints its reference. It is a no-op when that exact build exists. `make
// sandbox-image-busybox` runs it; `make sandbox-image` builds the Debian
// Python image instead (scripts/sandbox-image.sh).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/moby/moby/client"
	"github.com/plumbhq/plumb/pkg/sandbox/testimage"
)

func main() {
	busybox := flag.String("busybox", testimage.DefaultBusybox, "static busybox binary")
	flag.Parse()
	cli, err := client.New(client.FromEnv)
	if err != nil {
		fmt.Fprintf(os.Stderr, "sandboximage: %v\n", err)
		os.Exit(1)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ref, err := testimage.Ensure(ctx, cli, *busybox)
	if err != nil {
		fmt.Fprintf(os.Stderr, "sandboximage: %v\n", err)
		os.Exit(1)
	}
	fmt.Println(ref)
}
