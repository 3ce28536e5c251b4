// Package sandboxtest gives tests a real Docker Engine, the offline busybox
// sandbox image and a freshly built sandbox-agent binary. Under CI=true a
// missing engine fails the test; elsewhere it skips it with the reason.
package sandboxtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"github.com/plumbhq/plumb/pkg/sandbox/testimage"
)

// Docker returns a client of the local engine. Without a reachable engine
// the test fails under CI=true and is skipped otherwise.
func Docker(t testing.TB) *client.Client {
	t.Helper()
	cli, err := client.New(client.FromEnv)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err = cli.Ping(ctx, client.PingOptions{})
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("Docker Engine unreachable under CI=true: %v", err)
		}
		t.Skipf("Docker Engine unreachable: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

var (
	imageOnce sync.Once
	imageRef  string
	imageErr  error
)

// Image returns the busybox sandbox test image, importing it on first use.
func Image(t testing.TB, cli *client.Client) string {
	t.Helper()
	imageOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		imageRef, imageErr = testimage.Ensure(ctx, cli, "")
	})
	if imageErr != nil {
		t.Fatalf("sandbox test image: %v", imageErr)
	}
	return imageRef
}

var (
	agentOnce sync.Once
	agentBin  []byte
	agentErr  error
)

// Agent returns a static sandbox-agent binary built from this checkout.
func Agent(t testing.TB) []byte {
	t.Helper()
	agentOnce.Do(func() {
		dir, err := os.MkdirTemp("", "sandbox-agent")
		if err != nil {
			agentErr = err
			return
		}
		defer os.RemoveAll(dir)
		out := filepath.Join(dir, "sandbox-agent")
		cmd := exec.Command("go", "build", "-trimpath", "-o", out, "github.com/plumbhq/plumb/cmd/sandbox-agent")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
		if b, err := cmd.CombinedOutput(); err != nil {
			agentErr = fmt.Errorf("build sandbox-agent: %v: %s", err, b)
			return
		}
		agentBin, agentErr = os.ReadFile(out)
	})
	if agentErr != nil {
		t.Fatal(agentErr)
	}
	return agentBin
}

// Leftovers lists the containers and volumes carrying label key=value.
func Leftovers(ctx context.Context, cli *client.Client, key, value string) (containers, volumes []string, err error) {
	f := client.Filters{}.Add("label", key+"="+value)
	cl, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		return nil, nil, err
	}
	for _, c := range cl.Items {
		containers = append(containers, c.ID)
	}
	vl, err := cli.VolumeList(ctx, client.VolumeListOptions{Filters: f})
	if err != nil {
		return nil, nil, err
	}
	for _, v := range vl.Items {
		volumes = append(volumes, v.Name)
	}
	return containers, volumes, nil
}
