// Package api is Tenure's edge: the etcd v3 gRPC services (KV, Lease,
// Cluster, Maintenance; Watch comes from package watch) on top of the raft
// node, the applier and the stores.
//
// Contract:
//   - Every request is validated before anything is proposed; bad input gets
//     etcd's error (rpctypes) and changes nothing.
//   - Writes are proposed through the applier and answered after they are
//     applied on this member. Linearizable reads wait for a ReadIndex barrier,
//     serializable reads are served from the local store.
//   - Internal errors are mapped to etcd's gRPC status codes and messages
//     here and only here (ToGRPC), so clientv3's rpctypes recognises them.
//   - Nothing here blocks the apply loop.
//
// Maintenance (maintenance.go): writes that can grow the store (Put, a Txn
// with a put, LeaseGrant) pass a quota gate — while NOSPACE is raised, or
// when the store is over QuotaBytes (which raises NOSPACE through raft), they
// fail with etcd's "database space exceeded". HashKV(rev) is equal on every
// member that applied the same log. Snapshot streams one Pebble snapshot of
// the state-machine range in the file format of snapshotfile.go (records,
// padding, trailing sha256); ReadSnapshot verifies it (ErrSnapshotFormat,
// ErrSnapshotChecksum).
//
// Locks (lock.go, tenure.go, session.go): etcd's v3lock and v3election and
// tenure.v1 Locks over the lock state machine; a waiting call is woken by
// the apply that granted it, or earlier by the grant the leader pushed
// (lock.Machine.DeliverGrant), and a lock op's caller by its result pushed
// the same way (apply.Applier.DeliverResult): a lock call on a follower
// does not wait for that follower's apply. A call that gave up after its
// acquire went to raft has the key deleted once the acquire applies here
// (Applier.DoLockOrphaned). tenure.v1 Session runs the Lock, Unlock,
// TryLock and CheckFence calls as messages on one stream, each in its own
// goroutine (a pooled one that keeps its grown stack: workers.go) under the
// stream's context (at most MaxSessionInFlight at once;
// one more is answered ResourceExhausted), errors per request.
package api
