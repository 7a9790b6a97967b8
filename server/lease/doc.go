// Package lease is Tenure's lessor: the replicated table of leases and the
// leader-side clock that decides when they end.
//
// What is replicated (through raft, applied deterministically): grant, revoke,
// renew (every keepalive is a raft entry, so an acknowledged renewal is on a
// quorum before the client hears of it), checkpoints of remaining TTL, and
// expiries. What is not replicated: deadlines. Each member keeps, on its own
// monotonic clock, deadline = (time it applied the last grant/renew/checkpoint)
// + remaining; only the leader acts on it, by proposing an expiry.
//
// The promise: a lease is never revoked before TTL has passed since its last
// acknowledged renewal, and is revoked no later than TTL + checkpoint interval
// + the time the cluster had no leader (+ scheduling slack). A new leader
// resets every deadline to now + the last replicated remaining TTL, which is
// never earlier than what the old leader promised (the remaining was recorded
// no later than now) and late by at most one checkpoint interval plus the
// leaderless gap (etcd issue 9395: etcd resets to the full TTL instead).
//
// An expiry entry carries the applied index at which the leader decided; a
// renewal applied after that index wins over the expiry, so a keepalive that
// races an expiry is never acknowledged for a lease that is then revoked.
//
// Errors: ErrLeaseNotFound, ErrLeaseExists, ErrLeaseTTLTooLarge.
package lease
