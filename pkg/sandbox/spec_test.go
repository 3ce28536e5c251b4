package sandbox

import (
	"slices"
	"testing"

	"github.com/plumbhq/plumb/pkg/sandbox/agentproto"
)

// TestAgentEnv sets GOMAXPROCS for the agent only where the box's CPU
// limit is below the host's CPUs and nobody else set it.
func TestAgentEnv(t *testing.T) {
	own := agentproto.OwnEnv + "=GOMAXPROCS"
	for _, tt := range []struct {
		name     string
		t        Template
		host     int
		imageEnv []string
		want     []string
	}{
		{"one CPU of two", Template{CPUs: 1}, 2, []string{"PATH=/bin"}, []string{"GOMAXPROCS=1", own}},
		{"a fraction rounds up", Template{CPUs: 0.5}, 4, nil, []string{"GOMAXPROCS=1", own}},
		{"1.5 rounds up", Template{CPUs: 1.5}, 4, nil, []string{"GOMAXPROCS=2", own}},
		{"every CPU of the host", Template{CPUs: 2}, 2, nil, nil},
		{"host unknown", Template{CPUs: 1}, 0, nil, nil},
		{"the tenant's value", Template{CPUs: 1, Env: map[string]string{"GOMAXPROCS": "3"}}, 2, nil, nil},
		{"the image's value", Template{CPUs: 1}, 2, []string{"GOMAXPROCS=4"}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := agentEnv(tt.t, tt.host, tt.imageEnv); !slices.Equal(got, tt.want) {
				t.Fatalf("agentEnv = %q, want %q", got, tt.want)
			}
		})
	}
}
