package main

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// fakeSecrets records the secrets agentctl stores.
type fakeSecrets struct {
	plumbv1.UnimplementedAgentServiceServer
	mu     sync.Mutex
	values map[string]string
}

func (f *fakeSecrets) PutSecret(_ context.Context, r *plumbv1.PutSecretRequest) (*plumbv1.PutSecretResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, had := f.values[r.GetName()]
	f.values[r.GetName()] = r.GetValue()
	return &plumbv1.PutSecretResponse{Secret: &plumbv1.SecretInfo{Name: r.GetName()}, Created: !had}, nil
}

func (f *fakeSecrets) ListSecrets(context.Context, *plumbv1.ListSecretsRequest) (*plumbv1.ListSecretsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	resp := &plumbv1.ListSecretsResponse{}
	for n := range f.values {
		ts := timestamppb.New(time.Unix(1700000000, 0))
		resp.Secrets = append(resp.Secrets, &plumbv1.SecretInfo{Name: n, CreateTime: ts, UpdateTime: ts})
	}
	return resp, nil
}

func (f *fakeSecrets) DeleteSecret(_ context.Context, r *plumbv1.DeleteSecretRequest) (*plumbv1.DeleteSecretResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.values[r.GetName()]; !ok {
		return nil, status.Error(codes.NotFound, "secret not found")
	}
	delete(f.values, r.GetName())
	return &plumbv1.DeleteSecretResponse{}, nil
}

func TestSecretsCommands(t *testing.T) {
	const value = "sk-test-value-42"
	f := &fakeSecrets{values: map[string]string{}}
	addr := serve(t, f)
	ctx := t.Context()
	tests := []struct {
		name, stdin string
		args        []string
		out, err    string
	}{
		{name: "put", stdin: value + "\n", args: []string{"secrets", "put", "API"}, out: "secret API created\n"},
		{name: "put again", stdin: value, args: []string{"secrets", "put", "API"}, out: "secret API updated\n"},
		{name: "put empty", stdin: "\n", args: []string{"secrets", "put", "X"}, err: "empty"},
		{name: "put without name", args: []string{"secrets", "put"}, err: "unexpected"},
		{name: "list", args: []string{"secrets", "list"}, out: "API   2023-11-14T22:13:20Z"},
		{name: "delete", args: []string{"secrets", "delete", "API"}, out: "secret API deleted\n"},
		{name: "delete missing", args: []string{"secrets", "delete", "API"}, err: "not found"},
		{name: "no verb", args: []string{"secrets"}, err: "want put"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := &cli{stdin: tc.stdin}
			err := c.run(ctx, addr, tc.args...)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || !strings.Contains(c.out.String(), tc.out) {
				t.Fatalf("out %q, err %v; want %q", c.out.String(), err, tc.out)
			}
			if strings.Contains(c.out.String()+c.err.String(), value) {
				t.Fatal("agentctl printed the value")
			}
			if tc.args[1] == "put" && f.values["API"] != value {
				t.Fatalf("stored %q, want the value without its newline", f.values["API"])
			}
		})
	}
	if f.values["API"] != "" {
		t.Fatal("delete did not reach the server")
	}
}
