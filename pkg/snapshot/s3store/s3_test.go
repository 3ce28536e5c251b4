package s3store_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"

	"github.com/plumbhq/plumb/pkg/snapshot"
	"github.com/plumbhq/plumb/pkg/snapshot/s3store"
	"github.com/plumbhq/plumb/pkg/snapshot/s3store/weedtest"
	"github.com/plumbhq/plumb/pkg/snapshot/snapshottest"
)

func TestS3Conformance(t *testing.T) {
	srv := weedtest.Start(t)
	// One bucket (each is a SeaweedFS collection with volumes of its own),
	// a fresh prefix per case.
	snapshottest.Run(t, func(t *testing.T) snapshot.Store {
		b := make([]byte, 4)
		_, _ = rand.Read(b)
		s, err := s3store.New(context.Background(), s3store.Config{
			Endpoint: srv.Endpoint, Bucket: "plumb-conformance", CreateBucket: true, Prefix: "case-" + hex.EncodeToString(b) + "/",
			AccessKey: srv.AccessKey, SecretKey: srv.SecretKey,
		})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

func TestS3CredentialsFromEnvironment(t *testing.T) {
	srv := weedtest.Start(t)
	t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey)
	ctx := context.Background()
	s, err := s3store.New(ctx, s3store.Config{Endpoint: srv.Endpoint, Bucket: "env-creds", CreateBucket: true})
	if err != nil {
		t.Fatalf("credentials from the environment: %v", err)
	}
	if err := s.PutChunk(ctx, "ab/cd", []byte("x")); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AWS_SECRET_ACCESS_KEY", "wrong")
	if _, err := s3store.New(ctx, s3store.Config{Endpoint: srv.Endpoint, Bucket: "env-creds"}); err == nil {
		t.Error("a wrong secret key was accepted")
	}
}
