// Package snapshottest is the conformance suite every snapshot.Store
// passes (the local directory and S3), run through a snapshot.Repo: raw
// objects, capture and restore, deduplication, garbage collection,
// corruption, tenancy and quota.
package snapshottest
