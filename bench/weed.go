package main

import (
	"context"
	"errors"
	"os"

	"github.com/plumbhq/plumb/pkg/snapshot/s3store"
	"github.com/plumbhq/plumb/pkg/snapshot/s3store/weedtest"
)

// startWeed runs SeaweedFS's `weed server -s3` on loopback ports in a
// temporary directory, as pkg/snapshot/s3store/weedtest starts it for the
// tests (the same binary: $PLUMB_WEED, ~/.cache/plumb/weed-<version>/weed
// or weed on PATH), and returns an S3 snapshot store on a new bucket of
// it. stop ends the server's whole process group and removes its data.
// Without the binary it is an error naming how to get one: the rows that
// need it fail rather than skip.
func startWeed(ctx context.Context, e *env) (*s3store.Store, func(), error) {
	bin := weedtest.Binary()
	if bin == "" {
		return nil, nil, errors.New("no SeaweedFS weed binary: run scripts/test-deps.sh (it builds ~/.cache/plumb/weed-" + weedtest.Version + "/weed) or set PLUMB_WEED")
	}
	dir, err := os.MkdirTemp("", "plumb-bench-weed")
	if err != nil {
		return nil, nil, err
	}
	e.log("starting weed's S3 gateway")
	srv, stopWeed, err := weedtest.Run(ctx, bin, dir, "plumbbenchaccess", "plumbbenchsecret0123456789")
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	stop := func() {
		stopWeed()
		os.RemoveAll(dir)
	}
	st, err := s3store.New(ctx, s3store.Config{Endpoint: srv.Endpoint, Bucket: "plumb-bench", AccessKey: srv.AccessKey, SecretKey: srv.SecretKey, CreateBucket: true})
	if err != nil {
		stop()
		return nil, nil, err
	}
	return st, stop, nil
}
