// Package lease is Tenure's lessor: the replicated table of leases and the
// leader-side clock that decides when they end.
//
// What is replicated (through raft, applied deterministically): grant, revoke,
// renew (batched, many renewals to an entry, each applied on its own),
// checkpoints of remaining TTL, and expiries. Every acknowledged keepalive is
// covered by a committed renewal: a replicated renewal keeps the lease TTL +
// RenewGrace from its apply, and until RenewGrace after the member started
// it, that member answers further keepalives without raft (RenewLocal).
// What is not replicated: deadlines. Each member keeps, on its own monotonic
// clock, deadline = (time it applied the last grant/renew/checkpoint) +
// remaining; only the leader acts on it, by proposing an expiry.
//
// The promise: a lease is never revoked before TTL has passed since its last
// acknowledged renewal, and is revoked no later than TTL + checkpoint interval
// + the time the cluster had no leader (+ RenewGrace, at most 250 ms, +
// scheduling slack). Every member tracks each deadline on its own clock from
// the moment it applied the last grant, renewal or checkpoint (apply time +
// replicated remaining), which is never earlier than the leader's deadline
// (the remaining was measured before it was applied). A new leader keeps
// those deadlines, so a lease ends at its promised time plus the grace and
// apply lag, whatever the number of leader changes; only a member that
// restarted counts from its restart (now + last checkpointed remaining: late
// by at most one checkpoint interval plus the downtime). etcd instead resets
// leases on promotion (to the full TTL before checkpointing, issue 9395).
//
// Checkpoints: every LeaseCheckpointInterval/2 the leader proposes, in one
// entry, the remaining TTL of every lease whose replicated remaining is stale
// by more than half the interval. A checkpoint carries the decision index
// (below) and is ignored by a lease renewed after it.
//
// An expiry entry carries the decision index (the highest grant/renewal index
// the leader had applied when it decided); a renewal applied after that index
// wins over the expiry, so a keepalive that races an expiry is never
// acknowledged for a lease that is then revoked. A renewal proposed on a
// follower is forwarded to the leader by raft and ordered in the log like any
// other entry. Expired marks the leases it returns as in flight, so the rate
// limit is not spent twice on one lease while its expiry commits.
//
// Errors: ErrLeaseNotFound, ErrLeaseExists, ErrLeaseTTLTooLarge.
package lease
