// Package s3store is the S3-compatible snapshot.Store (any server that
// speaks the S3 API: AWS S3, MinIO, SeaweedFS, Ceph RGW), through
// minio-go. Credentials come from the Config or the standard AWS_*
// environment variables; they are never logged and never leave this
// package except in the requests' signatures.
package s3store
