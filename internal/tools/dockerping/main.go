// Command dockerping exits 0 when the Docker Engine (DOCKER_HOST or the
// default socket) answers a ping, and 1 with a one-line reason otherwise.
// CI uses it to fail loudly when the engine is unreachable.
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/moby/moby/client"
)

func main() {
	cli, err := client.New(client.FromEnv)
	if err != nil {
		fmt.Fprintf(os.Stderr, "dockerping: %v\n", err)
		os.Exit(1)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ping, err := cli.Ping(ctx, client.PingOptions{})
	if err != nil {
		fmt.Fprintf(os.Stderr, "dockerping: Docker Engine unreachable: %v\n", err)
		os.Exit(1)
	}
	fmt.Printf("Docker Engine reachable (API %s)\n", ping.APIVersion)
}
