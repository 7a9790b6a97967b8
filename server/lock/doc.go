// Package lock is the lock and election state machine: one FIFO queue per
// lock name, kept inside apply.
//
// Layout (etcd's, so clientv3's concurrency.Mutex/Election share the queue):
// a waiter is the key <name>/<lease hex>; the owner is the live key under
// <name>/ with the smallest create revision; the fencing token is that create
// revision.
//
// Contract:
//   - Observe is called by apply after every mvcc txn with its events; when an
//     owner key goes, the same call grants the next key (one raft round per
//     hand-off). Notes (granted, removed, lost, updated, delay started) are
//     staged and delivered by Publish after the batch is committed: a Granted
//     or Removed note reaches only the waiter registered for that key (exactly
//     one wake-up per hand-off; Wakeups counts them).
//   - A key deleted before it was granted (its lease expired or was revoked)
//     is never granted: its waiter gets NoteRemoved (etcd issues 11456, 19597).
//   - Deterministic: no clocks, no randomness, no map iteration in apply. Lock
//     names in use are persisted under storage.PrefixLock with their lock-delay
//     and running-delay epoch; queues are rebuilt from the mvcc store by
//     New/Reload. A lock with no keys, no delay and no explicit registration is
//     idle: it stays registered until more than idleMax (1,024) locks are
//     idle, then the smallest idle names are forgotten. The idle set follows
//     from replicated state alone, so restarted members forget alike.
//   - Lock-delay: when an owner's lease expires and the lock has a delay, apply
//     records the raft index (epoch) and grants nobody; the leader's
//     DelayScheduler waits the delay on its monotonic clock and proposes
//     OpEndDelay for that epoch. A new leader restarts delays at full length.
//   - An acquire always writes the key: a new key is enqueued; a key the same
//     lease already has queued or granted keeps its place, token and value
//     but gets a new mod revision, reported as AcquireResult.ModRev. A call
//     that gives up deletes its key only at that mod revision, so its delete,
//     however late, spares a later call of the same lease.
//   - An OpAcquire carries the member where its call waits and the call's
//     request ID (Op.Origin, Op.ReqID; a trailing field, absent from older
//     entries). They only route: NoteGranted carries them, the grant hook
//     (SetGrantHook) sees every such grant after Publish, and the server on
//     the leader pushes it to that member, where DeliverGrant wakes the call
//     before the member applies the entry. A waiter gets each grant once,
//     pushed or applied. Neither ever changes an outcome. Every op carries
//     Origin; the applier pushes each op's result to it the same way
//     (MarshalResultNotice: the lock errors above and mvcc.ErrLeaseNotFound
//     travel; any other outcome is left to that member's apply).
//   - Every limit that affects the outcome (MaxWaiters) travels in the entry.
//   - Names of forgotten locks are cached as empty (bounded) so a lock used
//     again does not re-read its prefix from the store (a read that costs a
//     seek per key ever written there since the last compaction); any put
//     under the prefix drops the entry. The cache never changes an outcome.
//
// Errors: ErrLeaseRequired, ErrInvalidName, ErrTooManyWaiters,
// ErrWaiterRemoved (returned by the API edge when a NoteRemoved ends a wait),
// ErrDelayTooLong, ErrUnknownLock; mvcc.ErrLeaseNotFound for an unknown lease.
package lock
