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
// caller-owned Pebble batch through Begin/…/End, records the batch's latest
// revision with Seal (once per batch), then — after the caller has committed
// the batch — calls Publish, which makes the revision visible.
// Readers run concurrently on Pebble iterators, which are point-in-time
// consistent, and never see an unpublished revision.
//
// The write side keeps an in-memory index of every live key's newest version
// (create/mod revision, version, lease, and whether the value is empty, so an
// empty value, as every lock queue key has, is never read from storage; no
// value otherwise), a B-tree in key order,
// rebuilt at Open and Reload. A put or delete takes the previous version's
// metadata from it and reads the previous value only when asked (prev_kv,
// ignore_value, a VALUE compare). So events from End carry PrevKv with a nil
// Value ("not loaded"); LoadPrevValue reads it, which the watch hub does
// only for watchers that asked for prev_kv. Ranges at the newest revision
// walk the index instead of the version records and load only the values
// they return: inside a Txn the write side's index itself, for readers a
// copy-on-write clone that Publish makes while reads keep asking for one.
// Ranges at older revisions scan the version records. A Txn told that its
// range results go nowhere (DiscardRangeValues: the apply loop on a member
// that did not propose the request) walks the index as always but loads
// no values.
//
// Several Begin/End pairs may stage into one batch before it is committed:
// the store keeps a staged revision apart from the published one. If a
// batch is dropped instead of committed, call Abandon.
//
// Semantics follow etcd v3 (mvcc + server/etcdserver/txn): reads at a
// revision below CompactRev fail with ErrCompacted (the compaction revision
// itself stays readable), above Rev with ErrFutureRev; Range count is the
// number of keys in the interval before filters and limit; a Txn evaluates
// all compares on its chosen path against the state before it runs, checks
// every chosen op, then executes, all in one revision.
//
// Compaction at R: Txn.Compact records KeyCompactRev in the batch; after
// Publish a background goroutine deletes, per key, every version older than
// the newest one <= R (and that one if it is a tombstone), then the revision
// log below R, in bounded batches, and finally writes KeyCompactDone. It is
// idempotent and resumed by Open/Reload. The current revision lives only in
// KeyCurrentRev, so compaction can never move it backwards. Snapshot
// installers call PauseCompaction before replacing the key range and Reload
// after.
//
// Errors: ErrCompacted, ErrFutureRev, ErrKeyNotFound (ignore_value /
// ignore_lease on a missing key), ErrLeaseNotFound — all detected before
// anything is written to the batch. Any other error from a Txn method may
// leave partial writes: drop the batch and call Abandon. DeleteKeys panics
// on storage failure (the apply loop cannot continue after one); Publish
// panics for a revision no Seal recorded.
package mvcc
