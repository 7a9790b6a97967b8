// Package mvcc is Tenure's multi-version key-value store with etcd v3
// semantics, kept in Pebble.
//
// Layout (prefixes from package storage):
//   - PrefixKV: one record per (key, revision) — escaped key, a terminator,
//     then the bitwise complement of the main revision, so a key's versions
//     sort newest first and a range at revision R is one forward scan that
//     seeks past versions newer than R. The value is a flag byte (put or
//     tombstone) followed by the mvccpb.KeyValue.
//   - PrefixRevLog: one record per change in revision order (main, sub) that
//     points at the version record; it is the watch history.
//   - storage.KeyCurrentRev / KeyCompactRev / KeyCompactDone: revisions.
//
// Concurrency: exactly one writer (the apply goroutine) stages changes into a
// caller-owned Pebble batch through Begin/…/End, then — after the caller has
// committed the batch — calls Publish, which makes the revision visible.
// Readers run concurrently on Pebble iterators, which are point-in-time
// consistent, and never see an unpublished revision.
//
// Errors: ErrCompacted, ErrFutureRev, ErrKeyNotFound (ignore_value /
// ignore_lease on a missing key), ErrLeaseNotFound.
package mvcc
