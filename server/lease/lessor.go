package lease

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/tenure-io/tenure/server/storage"
)

// Errors, mapped to etcd's gRPC errors at the API edge.
var (
	ErrLeaseNotFound    = errors.New("tenure: requested lease not found")
	ErrLeaseExists      = errors.New("tenure: lease already exists")
	ErrLeaseTTLTooLarge = errors.New("tenure: too large lease TTL")
)

// MaxTTL is etcd's upper bound on a lease TTL, in seconds.
const MaxTTL = 9_000_000_000

// Lease is a read-only copy of one lease's state.
type Lease struct {
	ID        int64
	TTL       int64         // granted TTL, seconds
	Remaining time.Duration // time left on this member's clock (leader: authoritative)
	Keys      [][]byte
}

type item struct {
	ttl         int64 // seconds
	remainingMs int64 // last replicated remaining TTL
	renewIndex  uint64
	deadline    time.Time // monotonic; this member's estimate, authoritative on the leader
	// ackUntil is the last moment at which this member may acknowledge a
	// renewal without raft (RenewLocal): every member's deadline is at or
	// after ackUntil + TTL. Not replicated; zero after a restart.
	ackUntil time.Time
	keys     map[string]struct{}
	// expiryProposed is when this leader last proposed an expiry for the
	// lease (zero: none in flight); Expired skips it until the retry window
	// passes, so a slow commit does not spend the rate limit twice.
	expiryProposed time.Time
}

// Lessor holds every lease. Mutating methods are called from the apply
// goroutine only (inside the apply batch); readers may call the accessors
// from any goroutine.
type Lessor struct {
	mu       sync.RWMutex
	leases   map[int64]*item
	isLeader bool
	// lastIndex is the highest raft index of a grant or renewal applied so
	// far; leader decisions (expiries, checkpoints) carry it, and a renewal
	// applied at a higher index wins over them.
	lastIndex uint64
	now       func() time.Time
	lg        *slog.Logger
	// renewedLocally counts renewals acknowledged without raft (metrics).
	renewedLocally atomic.Uint64
}

// New loads every lease from db.
func New(db storage.Iterable, lg *slog.Logger) (*Lessor, error) {
	l := &Lessor{leases: map[int64]*item{}, now: time.Now, lg: lg}
	if err := l.load(db); err != nil {
		return nil, err
	}
	return l, nil
}

// SetClock replaces the monotonic clock (tests).
func (l *Lessor) SetClock(now func() time.Time) { l.now = now }

func (l *Lessor) load(db storage.Iterable) error {
	it, err := db.NewIter(&pebble.IterOptions{
		LowerBound: []byte{storage.PrefixLease},
		UpperBound: []byte{storage.PrefixLease + 1},
	})
	if err != nil {
		return err
	}
	defer it.Close()
	now := l.now()
	leases := map[int64]*item{}
	var last uint64
	for it.First(); it.Valid(); it.Next() {
		k, v := it.Key(), it.Value()
		if len(k) != 9 || len(v) != 24 {
			return fmt.Errorf("tenure: lease: corrupt record %x", k)
		}
		id := int64(binary.BigEndian.Uint64(k[1:]))
		itm := &item{
			ttl:         int64(binary.BigEndian.Uint64(v[0:])),
			remainingMs: int64(binary.BigEndian.Uint64(v[8:])),
			renewIndex:  binary.BigEndian.Uint64(v[16:]),
			keys:        map[string]struct{}{},
		}
		itm.deadline = now.Add(time.Duration(itm.remainingMs) * time.Millisecond)
		leases[id] = itm
		last = max(last, itm.renewIndex)
	}
	l.mu.Lock()
	l.leases = leases
	l.lastIndex = max(l.lastIndex, last)
	l.mu.Unlock()
	return it.Error()
}

// Reload re-reads all leases after a snapshot replaced the store. Key
// attachments are rebuilt by the caller through Attach.
func (l *Lessor) Reload(db storage.Iterable) error { return l.load(db) }

func leaseKey(id int64) []byte { return storage.Key(storage.PrefixLease, storage.U64(uint64(id))) }

func (l *Lessor) persist(b *pebble.Batch, id int64, it *item) {
	var v [24]byte
	binary.BigEndian.PutUint64(v[0:], uint64(it.ttl))
	binary.BigEndian.PutUint64(v[8:], uint64(it.remainingMs))
	binary.BigEndian.PutUint64(v[16:], it.renewIndex)
	_ = b.Set(leaseKey(id), v[:], nil)
}

// Grant creates lease id with ttl seconds (apply goroutine).
func (l *Lessor) Grant(b *pebble.Batch, index uint64, id, ttl int64) error {
	if ttl > MaxTTL {
		return ErrLeaseTTLTooLarge
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.leases[id]; ok {
		return ErrLeaseExists
	}
	it := &item{ttl: ttl, remainingMs: ttl * 1000, renewIndex: index, keys: map[string]struct{}{}}
	it.deadline = l.now().Add(time.Duration(ttl) * time.Second)
	l.leases[id] = it
	l.lastIndex = max(l.lastIndex, index)
	l.persist(b, id, it)
	return nil
}

// RenewGrace is how much longer than its TTL a replicated renewal keeps a
// lease: TTL/10, at most 250 ms. A renewal acknowledged within the grace
// after a replicated one was started is answered without raft
// (RenewLocal). It is a pure function of the TTL so that every member
// applies the same remaining TTL.
func RenewGrace(ttl int64) time.Duration {
	return min(MaxRenewGrace, time.Duration(ttl)*time.Second/10)
}

// MaxRenewGrace bounds RenewGrace: it is all a lease can outlive its TTL
// because of renewals answered without raft.
const MaxRenewGrace = 250 * time.Millisecond

// Renew restarts lease id's TTL (apply goroutine) and returns the TTL. The
// lease is kept for TTL + RenewGrace from now. started is when this member
// received the renewal, before proposing it (zero when the renewal is not
// this member's own): the entry cannot have been applied anywhere before
// then, so every member's deadline is at or after started + grace + TTL,
// and until started + grace this member may acknowledge further renewals
// without raft (RenewLocal).
func (l *Lessor) Renew(b *pebble.Batch, index uint64, id int64, started time.Time) (int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	it, ok := l.leases[id]
	if !ok {
		return 0, ErrLeaseNotFound
	}
	grace := RenewGrace(it.ttl)
	it.remainingMs = it.ttl*1000 + grace.Milliseconds()
	it.renewIndex = index
	it.deadline = l.now().Add(time.Duration(it.ttl)*time.Second + grace)
	if !started.IsZero() {
		if u := started.Add(grace); u.After(it.ackUntil) {
			it.ackUntil = u
		}
	}
	it.expiryProposed = time.Time{}
	l.lastIndex = max(l.lastIndex, index)
	l.persist(b, id, it)
	return it.ttl, nil
}

// RenewLocal acknowledges a renewal of lease id without raft when that
// keeps the lease's promise: a renewal this member started at most
// RenewGrace ago has been applied (so it is committed), so every member
// keeps the lease for at least TTL from now. It returns the TTL and true,
// or false when the renewal must go through raft. Any member may do this,
// leader or not: the promise rests on the committed renewal, not on who
// answers. What it does not order is a revoke this member has not applied
// yet: for at most the grace, a member behind the log (or cut off from
// the quorum) may answer a keepalive of a lease already revoked elsewhere.
func (l *Lessor) RenewLocal(id int64) (int64, bool) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	it, ok := l.leases[id]
	if !ok || l.now().After(it.ackUntil) {
		return 0, false
	}
	l.renewedLocally.Add(1)
	return it.ttl, true
}

// RenewedLocally counts the renewals RenewLocal acknowledged.
func (l *Lessor) RenewedLocally() uint64 { return l.renewedLocally.Load() }

// Checkpoint records a remaining TTL decided by the leader when it had seen
// grants and renewals up to index decidedAt (apply goroutine). A lease
// granted or renewed after that index keeps its fresher state: a checkpoint
// that raced a renewal must not shorten the renewed lease.
func (l *Lessor) Checkpoint(b *pebble.Batch, decidedAt uint64, id, remainingMs int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	it, ok := l.leases[id]
	if !ok || it.renewIndex > decidedAt {
		return
	}
	if remainingMs < 0 {
		remainingMs = 0
	}
	it.remainingMs = remainingMs
	d := l.now().Add(time.Duration(remainingMs) * time.Millisecond)
	// A follower adopts the leader's view (counted from its own apply, so
	// never earlier than the leader's deadline). A leader applying an older
	// leader's checkpoint keeps the earlier of the two: both are at or
	// after every promise made.
	if !l.isLeader || d.Before(it.deadline) {
		it.deadline = d
	}
	l.persist(b, id, it)
}

// Revoke removes lease id and returns the keys attached to it, sorted, so
// the caller deletes them in the same revision (apply goroutine).
func (l *Lessor) Revoke(b *pebble.Batch, id int64) ([][]byte, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	it, ok := l.leases[id]
	if !ok {
		return nil, ErrLeaseNotFound
	}
	delete(l.leases, id)
	_ = b.Delete(leaseKey(id), nil)
	keys := make([][]byte, 0, len(it.keys))
	for k := range it.keys {
		keys = append(keys, []byte(k))
	}
	sort.Slice(keys, func(i, j int) bool { return string(keys[i]) < string(keys[j]) })
	return keys, nil
}

// ExpiryStillValid reports whether an expiry decided at decidedAt still holds:
// the lease exists and was not renewed after the leader decided.
func (l *Lessor) ExpiryStillValid(id int64, decidedAt uint64) bool {
	l.mu.RLock()
	defer l.mu.RUnlock()
	it, ok := l.leases[id]
	return ok && it.renewIndex <= decidedAt
}

// Exists, Attach and Detach implement mvcc.LeaseIndex.
func (l *Lessor) Exists(id int64) bool {
	l.mu.RLock()
	defer l.mu.RUnlock()
	_, ok := l.leases[id]
	return ok
}

// Attach records that key is bound to lease id.
func (l *Lessor) Attach(id int64, key []byte) {
	l.mu.Lock()
	if it, ok := l.leases[id]; ok {
		it.keys[string(key)] = struct{}{}
	}
	l.mu.Unlock()
}

// Detach records that key is no longer bound to lease id.
func (l *Lessor) Detach(id int64, key []byte) {
	l.mu.Lock()
	if it, ok := l.leases[id]; ok {
		delete(it.keys, string(key))
	}
	l.mu.Unlock()
}

// Promote is called when this member becomes leader. Deadlines are kept as
// this member's clock has tracked them: each was set when this member
// applied the last grant, renewal or checkpoint, to (apply time + the
// remaining TTL the leader recorded), which is never earlier than the old
// leader's deadline (the remaining was measured before it was applied here)
// and not extended by the staleness of the checkpoint, so staleness does not
// pile up over successive leader changes. (etcd resets to the full TTL, or
// to now + remaining, on promotion: issue 9395.) A member that restarted
// counts from its restart (see load): later, never earlier.
func (l *Lessor) Promote() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, it := range l.leases {
		it.expiryProposed = time.Time{}
	}
	l.isLeader = true
}

// Demote is called when this member stops being leader.
func (l *Lessor) Demote() {
	l.mu.Lock()
	l.isLeader = false
	l.mu.Unlock()
}

// IsLeader reports whether Promote is in effect.
func (l *Lessor) IsLeader() bool {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.isLeader
}

// Expiry is a leader's decision to end leases.
type Expiry struct {
	// DecidedAt is the highest grant/renewal index the decision saw; a
	// renewal applied at a higher index cancels the expiry of its lease.
	DecidedAt uint64
	// IDs are the leases to end, earliest deadline first (at most max).
	IDs []int64
	// Backlog counts every expired lease not yet in flight, IDs included:
	// more than len(IDs) means the rate limit is holding revocations back.
	Backlog int
}

// Expired returns up to max leases whose deadline has passed on the
// leader's clock, earliest first, and marks them in flight: they are not
// returned again for retry (a lost proposal is retried after that), unless
// renewed meanwhile. A follower returns an empty Expiry.
func (l *Lessor) Expired(max int, retry time.Duration) Expiry {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.isLeader {
		return Expiry{}
	}
	now := l.now()
	type exp struct {
		id int64
		at time.Time
	}
	var out []exp
	for id, it := range l.leases {
		if it.deadline.After(now) {
			continue
		}
		if !it.expiryProposed.IsZero() && now.Sub(it.expiryProposed) < retry {
			continue
		}
		out = append(out, exp{id, it.deadline})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].at.Equal(out[j].at) {
			return out[i].id < out[j].id
		}
		return out[i].at.Before(out[j].at)
	})
	e := Expiry{DecidedAt: l.lastIndex, Backlog: len(out)}
	if len(out) > max {
		out = out[:max]
	}
	e.IDs = make([]int64, len(out))
	for i, x := range out {
		e.IDs[i] = x.id
		l.leases[x.id].expiryProposed = now
	}
	return e
}

// CheckpointDue returns (id, remaining ms) for every live lease whose
// replicated remaining TTL is more than slack above what the leader's clock
// says, so a leader change would not extend it by more than slack, and the
// grant/renewal index the decision saw (for Checkpoint). Leases already past
// their deadline are left to Expired.
func (l *Lessor) CheckpointDue(slack time.Duration, max int) ([][2]int64, uint64) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if !l.isLeader {
		return nil, 0
	}
	now := l.now()
	var out [][2]int64
	for id, it := range l.leases {
		rem := it.deadline.Sub(now)
		if rem <= 0 {
			continue
		}
		if time.Duration(it.remainingMs)*time.Millisecond-rem > slack {
			out = append(out, [2]int64{id, rem.Milliseconds()})
		}
	}
	// Stalest first, so a cap never starves the same leases.
	sort.Slice(out, func(i, j int) bool {
		si := l.leases[out[i][0]].remainingMs - out[i][1]
		sj := l.leases[out[j][0]].remainingMs - out[j][1]
		if si != sj {
			return si > sj
		}
		return out[i][0] < out[j][0]
	})
	if len(out) > max {
		out = out[:max]
	}
	return out, l.lastIndex
}

// Get returns a copy of lease id.
func (l *Lessor) Get(id int64, withKeys bool) (Lease, bool) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	it, ok := l.leases[id]
	if !ok {
		return Lease{}, false
	}
	// The renewal grace is slack, not part of what a client was promised:
	// report at most the TTL.
	rem := min(it.deadline.Sub(l.now()), time.Duration(it.ttl)*time.Second)
	if rem < 0 {
		rem = 0
	}
	out := Lease{ID: id, TTL: it.ttl, Remaining: rem}
	if withKeys {
		for k := range it.keys {
			out.Keys = append(out.Keys, []byte(k))
		}
		sort.Slice(out.Keys, func(i, j int) bool { return string(out.Keys[i]) < string(out.Keys[j]) })
	}
	return out, true
}

// IDs lists every lease id in ascending order.
func (l *Lessor) IDs() []int64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	ids := make([]int64, 0, len(l.leases))
	for id := range l.leases {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}

// Count is the number of leases.
func (l *Lessor) Count() int {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return len(l.leases)
}
