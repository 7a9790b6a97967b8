// Package apply is the deterministic state machine's dispatcher and the
// proposer's side of it.
//
// Entry format (raft entry data): one kind byte, then the payload.
//   - KindEtcd: a proto-encoded etcdserverpb.InternalRaftRequest (Put,
//     DeleteRange, Txn, Compaction, LeaseGrant, LeaseRevoke).
//   - KindLeaseRenew: one or more (request id, lease id) pairs, each a
//     renewal at the entry's index (keepalives are batched per member, and
//     the leader merges followers' forwarded batches into its own:
//     AbsorbProposal) — every acknowledged keepalive is covered by a
//     replicated renewal (within its grace, a member answers without raft:
//     lease.Lessor.RenewLocal), so it survives any leader change.
//   - KindLeaseExpire: the highest grant/renewal index the leader had
//     applied when it decided, then lease ids; a renewal applied after that
//     index cancels the expiry. Each lease's keys go in one revision.
//   - KindLeaseCheckpoint: the same decision index, then (lease id,
//     remaining ms) pairs from the leader; a lease renewed after that index
//     ignores the checkpoint (it must not shorten a fresher renewal).
//   - 0xFE is reserved for raftnode's own entries.
//
// The Applier implements raftnode.StateMachine: ApplyEntry stages effects in
// the caller's batch and remembers results; Committed (after the batch is in
// the store) publishes the revision, feeds the watch hub in revision order and
// answers the proposers waiting on this member. Nothing in ApplyEntry reads a
// clock or a random source, or iterates a map, so every member computes the
// same state from the same log. The one local fact it consults is whether a
// caller here waits for a txn's result: where none does, the txn's ranges
// load no values (mvcc.Txn.DiscardRangeValues), which changes only a
// response nobody reads.
//
// Proposers either wait (Do, DoLock, Renew) or take a Call (StartLock) and
// wait on its channel in a select of their own; a caller that stops waiting
// Abandons it, and an acquire's result that applies later still reaches its
// orphan handler, so an abandoned waiter's key leaves the queue.
//
// Alarms (alarm.go): an AlarmRequest in a KindEtcd entry raises or clears an
// alarm; the set is state-machine data (PrefixMeta 'A' keys), so it is the
// same on every member, survives restarts and travels in snapshots. While
// NOSPACE is raised, Put, a Txn with a put and LeaseGrant apply as
// ErrNoSpace on every member (etcd's applierV3Capped).
//
// Errors: ErrRequestTooLarge, ErrTimeout, ErrStopped, ErrNoSpace; mvcc and lease errors
// pass through unchanged for the API edge to map.
package apply
