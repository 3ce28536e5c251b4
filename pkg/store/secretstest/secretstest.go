// Package secretstest is the conformance suite of store.Secrets, run
// against every durable store.
package secretstest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/plumbhq/plumb/pkg/store"
)

// Run checks s: put creates then replaces (keeping CreatedAt), get, list
// without values and by name, tenant scoping, delete.
func Run(t *testing.T, s store.Secrets) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	t0 := time.Unix(1700000000, 0).UTC()
	put := func(tenant, name, sealed string, at time.Time) bool {
		t.Helper()
		created, err := s.PutSecret(ctx, store.Secret{Tenant: tenant, Name: name, Sealed: []byte(sealed), CreatedAt: at, UpdatedAt: at})
		if err != nil {
			t.Fatal(err)
		}
		return created
	}
	if !put("a", "tok", "v1", t0) || !put("a", "alpha", "x", t0) || !put("b", "tok", "other", t0) {
		t.Fatal("first puts did not create")
	}
	if put("a", "tok", "v2", t0.Add(time.Hour)) {
		t.Fatal("a second put created")
	}
	got, err := s.GetSecret(ctx, "a", "tok")
	if err != nil || string(got.Sealed) != "v2" || !got.CreatedAt.Equal(t0) || !got.UpdatedAt.Equal(t0.Add(time.Hour)) {
		t.Fatalf("get = %+v, %v", got, err)
	}
	if _, err := s.GetSecret(ctx, "c", "tok"); !errors.Is(err, store.ErrSecretNotFound) {
		t.Fatalf("another tenant's get = %v, want ErrSecretNotFound", err)
	}
	list, err := s.ListSecrets(ctx, "a")
	if err != nil || len(list) != 2 || list[0].Name != "alpha" || list[1].Name != "tok" || list[0].Sealed != nil || list[1].Sealed != nil {
		t.Fatalf("list = %+v, %v", list, err)
	}
	if list, err := s.ListSecrets(ctx, "nobody"); err != nil || len(list) != 0 {
		t.Fatalf("empty tenant list = %+v, %v", list, err)
	}
	if err := s.DeleteSecret(ctx, "c", "tok"); !errors.Is(err, store.ErrSecretNotFound) {
		t.Fatalf("another tenant's delete = %v", err)
	}
	if err := s.DeleteSecret(ctx, "a", "tok"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetSecret(ctx, "a", "tok"); !errors.Is(err, store.ErrSecretNotFound) {
		t.Fatalf("get after delete = %v", err)
	}
	if got, err := s.GetSecret(ctx, "b", "tok"); err != nil || string(got.Sealed) != "other" {
		t.Fatalf("the other tenant's secret = %+v, %v", got, err)
	}
}
