package lease

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/tenure-io/tenure/server/storage"
)

type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

func open(t *testing.T, dir string) (*pebble.DB, *Lessor, *fakeClock) {
	t.Helper()
	db, err := storage.Open(dir, storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	l, err := New(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := &fakeClock{t: time.Unix(1000, 0)}
	l.SetClock(c.now)
	return db, l, c
}

func commit(t *testing.T, db *pebble.DB, f func(b *pebble.Batch)) {
	t.Helper()
	b := db.NewIndexedBatch()
	f(b)
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
}

func TestGrantRenewRevoke(t *testing.T) {
	db, l, _ := open(t, t.TempDir())
	defer db.Close()
	commit(t, db, func(b *pebble.Batch) {
		if err := l.Grant(b, 10, 7, 5); err != nil {
			t.Fatal(err)
		}
		if err := l.Grant(b, 11, 7, 5); !errors.Is(err, ErrLeaseExists) {
			t.Fatalf("duplicate grant: got %v, want ErrLeaseExists", err)
		}
		if err := l.Grant(b, 12, 8, MaxTTL+1); !errors.Is(err, ErrLeaseTTLTooLarge) {
			t.Fatalf("huge TTL: got %v, want ErrLeaseTTLTooLarge", err)
		}
		if _, err := l.Renew(b, 13, 99, time.Time{}); !errors.Is(err, ErrLeaseNotFound) {
			t.Fatalf("renew unknown: got %v", err)
		}
		if ttl, err := l.Renew(b, 14, 7, time.Time{}); err != nil || ttl != 5 {
			t.Fatalf("renew: ttl %d err %v", ttl, err)
		}
	})
	l.Attach(7, []byte("b"))
	l.Attach(7, []byte("a"))
	l.Attach(99, []byte("ignored"))
	got, ok := l.Get(7, true)
	if !ok || got.TTL != 5 || len(got.Keys) != 2 || string(got.Keys[0]) != "a" {
		t.Fatalf("Get: %+v %v", got, ok)
	}
	commit(t, db, func(b *pebble.Batch) {
		keys, err := l.Revoke(b, 7)
		if err != nil || len(keys) != 2 || string(keys[0]) != "a" || string(keys[1]) != "b" {
			t.Fatalf("revoke: %q %v", keys, err)
		}
		if _, err := l.Revoke(b, 7); !errors.Is(err, ErrLeaseNotFound) {
			t.Fatalf("second revoke: %v", err)
		}
	})
	if l.Exists(7) || l.Count() != 0 {
		t.Fatal("lease still present after revoke")
	}
}

func TestLeaderExpiryAndCheckpoint(t *testing.T) {
	db, l, c := open(t, t.TempDir())
	defer db.Close()
	commit(t, db, func(b *pebble.Batch) {
		_ = l.Grant(b, 1, 1, 10)
		_ = l.Grant(b, 2, 2, 20)
	})
	if e := l.Expired(10, time.Second); e.IDs != nil {
		t.Fatalf("a follower must never report expiries, got %v", e.IDs)
	}
	l.Promote()
	c.advance(9 * time.Second)
	if e := l.Expired(10, time.Second); len(e.IDs) != 0 {
		t.Fatalf("expired before TTL: %v", e.IDs)
	}
	c.advance(1 * time.Second)
	e := l.Expired(10, time.Second)
	if len(e.IDs) != 1 || e.IDs[0] != 1 || e.DecidedAt != 2 {
		t.Fatalf("want lease 1 expired at TTL, decided at index 2, got %+v", e)
	}
	// In flight: not proposed again until the retry window passes.
	if e := l.Expired(10, time.Second); len(e.IDs) != 0 || e.Backlog != 0 {
		t.Fatalf("an expiry in flight was returned again: %+v", e)
	}
	c.advance(time.Second)
	if e := l.Expired(10, time.Second); len(e.IDs) != 1 {
		t.Fatalf("a lost expiry proposal must be retried: %+v", e)
	}
	c.advance(-time.Second)
	// Renewal after the leader decided (index 5 > decidedAt 3) cancels the expiry.
	commit(t, db, func(b *pebble.Batch) { _, _ = l.Renew(b, 5, 1, time.Time{}) })
	if l.ExpiryStillValid(1, 3) {
		t.Fatal("an expiry decided before a renewal must not hold")
	}
	if !l.ExpiryStillValid(2, 3) {
		t.Fatal("an expiry of an unrenewed lease must hold")
	}
	// Checkpoints: lease 2 has 10 s left of 20; the replicated remaining is stale by 10 s.
	due, at := l.CheckpointDue(time.Second, 10)
	if len(due) != 1 || due[0][0] != 2 || due[0][1] != 10_000 || at != 5 {
		t.Fatalf("checkpoint due: %v at %d", due, at)
	}
	commit(t, db, func(b *pebble.Batch) { l.Checkpoint(b, at, 2, due[0][1]) })
	if due, _ := l.CheckpointDue(time.Second, 10); len(due) != 0 {
		t.Fatalf("nothing should be due right after a checkpoint: %v", due)
	}
}

// A restarted member must not shorten a lease (never earlier than promised)
// and must not reset it to the full TTL (etcd issue 9395): it uses the last
// replicated remaining TTL, counted from its restart.
func TestNewLeaderUsesCheckpointedRemaining(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "m")
	db, l, _ := open(t, dir)
	commit(t, db, func(b *pebble.Batch) {
		_ = l.Grant(b, 1, 1, 30)
		l.Checkpoint(b, 1, 1, 12_000)
	})
	db.Close()

	db2, l2, c2 := open(t, dir)
	defer db2.Close()
	if err := l2.Reload(db2); err != nil { // count from the restart on the test clock
		t.Fatal(err)
	}
	l2.Promote()
	c2.advance(11900 * time.Millisecond)
	if e := l2.Expired(10, time.Second); len(e.IDs) != 0 {
		t.Fatalf("new leader expired a lease before its checkpointed remaining: %v", e.IDs)
	}
	c2.advance(200 * time.Millisecond)
	if e := l2.Expired(10, time.Second); len(e.IDs) != 1 {
		t.Fatalf("new leader reset the lease instead of honouring 12 s remaining: %v", e.IDs)
	}
}

func TestExpiredIsRateLimitedAndOrdered(t *testing.T) {
	db, l, c := open(t, t.TempDir())
	defer db.Close()
	commit(t, db, func(b *pebble.Batch) {
		for i := int64(1); i <= 50; i++ {
			_ = l.Grant(b, uint64(i), i, 1+i%3)
		}
	})
	l.Promote()
	c.advance(time.Hour)
	e := l.Expired(7, time.Second)
	ids := e.IDs
	if len(ids) != 7 || e.Backlog != 50 {
		t.Fatalf("want at most 7 expiries per call of a backlog of 50, got %d of %d", len(ids), e.Backlog)
	}
	if e2 := l.Expired(7, time.Second); e2.Backlog != 43 || len(e2.IDs) != 7 {
		t.Fatalf("second call: want 7 of the 43 not in flight, got %d of %d", len(e2.IDs), e2.Backlog)
	}
	for i := 1; i < len(ids); i++ {
		if ids[i-1] == ids[i] {
			t.Fatal("duplicate id")
		}
	}
	l.Demote()
	if l.Expired(7, time.Second).IDs != nil {
		t.Fatal("demoted member still reports expiries")
	}
}

// A checkpoint decided before a renewal was applied must not shorten the
// renewed lease on the followers (they would hand the stale remaining to
// the next leader and revoke the lease before its TTL).
func TestCheckpointRacingRenewalIsIgnored(t *testing.T) {
	db, l, c := open(t, t.TempDir())
	defer db.Close()
	commit(t, db, func(b *pebble.Batch) { _ = l.Grant(b, 1, 1, 10) })
	c.advance(8 * time.Second)
	commit(t, db, func(b *pebble.Batch) {
		l.Checkpoint(b, 1, 1, 2_000)         // leader: 2 s left, as of index 1
		_, _ = l.Renew(b, 2, 1, time.Time{}) // renewal applied at index 2
		l.Checkpoint(b, 1, 1, 1_500)         // a second checkpoint decided before the renewal
	})
	l.Promote()
	c.advance(9900*time.Millisecond + RenewGrace(10))
	if e := l.Expired(10, time.Second); len(e.IDs) != 0 {
		t.Fatalf("a stale checkpoint shortened a renewed lease: %v", e.IDs)
	}
	c.advance(200 * time.Millisecond)
	if e := l.Expired(10, time.Second); len(e.IDs) != 1 {
		t.Fatalf("renewed lease did not expire at its TTL + grace: %+v", e)
	}
	// Renewal clears the in-flight mark: an expiry proposal cancelled by a
	// renewal does not keep the lease out of later decisions.
	commit(t, db, func(b *pebble.Batch) { _, _ = l.Renew(b, 3, 1, time.Time{}) })
	c.advance(10*time.Second + RenewGrace(10))
	if e := l.Expired(10, time.Minute); len(e.IDs) != 1 || e.DecidedAt != 3 {
		t.Fatalf("renewed lease not reconsidered: %+v", e)
	}
}

// A follower tracks deadlines from its own applies; when it becomes leader
// it keeps them instead of restarting the clock from the last checkpoint,
// so checkpoint staleness and leaderless time do not pile up over changes.
func TestPromoteKeepsFollowerDeadlines(t *testing.T) {
	db, l, c := open(t, t.TempDir())
	defer db.Close()
	commit(t, db, func(b *pebble.Batch) { _ = l.Grant(b, 1, 1, 10) })
	c.advance(4 * time.Second)
	commit(t, db, func(b *pebble.Batch) { l.Checkpoint(b, 1, 1, 6_500) }) // leader's view, 0.5 s stale
	c.advance(3 * time.Second)                                            // the old leader dies; an election
	l.Promote()
	c.advance(3400 * time.Millisecond)
	if e := l.Expired(10, time.Second); len(e.IDs) != 0 {
		t.Fatalf("expired before the follower's deadline: %v", e.IDs)
	}
	c.advance(200 * time.Millisecond)
	if e := l.Expired(10, time.Second); len(e.IDs) != 1 {
		t.Fatalf("new leader restarted the clock at promotion: %+v", e)
	}
}

// TestRenewLocalWithinGrace: a replicated renewal keeps the lease TTL +
// grace, and lets the leader acknowledge further renewals without raft
// only while a renewal it started itself is less than the grace old — so
// every acknowledgement still leaves at least TTL on every member's clock.
// Leadership plays no part: the promise rests on the committed renewal.
func TestRenewLocalWithinGrace(t *testing.T) {
	db, l, c := open(t, t.TempDir())
	defer db.Close()
	commit(t, db, func(b *pebble.Batch) {
		_ = l.Grant(b, 1, 1, 10) // grace 250 ms (capped)
	})
	if g := RenewGrace(10); g != 250*time.Millisecond {
		t.Fatalf("RenewGrace(10 s) = %v, want the 250 ms cap", g)
	}
	if g := RenewGrace(1); g != 100*time.Millisecond {
		t.Fatalf("RenewGrace(1 s) = %v, want TTL/10", g)
	}
	l.Promote()
	if _, ok := l.RenewLocal(1); ok {
		t.Fatal("a grant must not allow renewals without raft")
	}
	// A renewal proposed by another member (no start time here): the
	// deadline moves, local acknowledgements stay off.
	commit(t, db, func(b *pebble.Batch) { _, _ = l.Renew(b, 3, 1, time.Time{}) })
	if _, ok := l.RenewLocal(1); ok {
		t.Fatal("a renewal this member did not start must not allow renewals without raft")
	}
	// This member's own renewal, received 40 ms before it was applied.
	started := c.now()
	c.advance(40 * time.Millisecond)
	commit(t, db, func(b *pebble.Batch) { _, _ = l.Renew(b, 4, 1, started) })
	if ttl, ok := l.RenewLocal(1); !ok || ttl != 10 {
		t.Fatalf("RenewLocal right after an own renewal: ttl %d ok %v, want 10 true", ttl, ok)
	}
	c.advance(210 * time.Millisecond) // started + grace exactly
	if _, ok := l.RenewLocal(1); !ok {
		t.Fatal("RenewLocal must hold until started + grace")
	}
	// The promise of an acknowledgement at started + grace: TTL from now.
	got, _ := l.Get(1, false)
	if got.Remaining != 10*time.Second {
		t.Fatalf("remaining reported %v, want the TTL (grace is not reported)", got.Remaining)
	}
	if e := l.Expired(10, time.Second); len(e.IDs) != 0 {
		t.Fatalf("expired early: %v", e.IDs)
	}
	c.advance(time.Millisecond)
	if _, ok := l.RenewLocal(1); ok {
		t.Fatal("RenewLocal past started + grace must go through raft")
	}
	// Deadline: applied at started+40ms, kept TTL + grace from then; an
	// acknowledgement at started + grace is honoured for TTL.
	c.t = started.Add(40*time.Millisecond + 10*time.Second + 250*time.Millisecond - time.Millisecond)
	if e := l.Expired(10, time.Second); len(e.IDs) != 0 {
		t.Fatalf("expired before apply + TTL + grace: %v", e.IDs)
	}
	c.advance(time.Millisecond)
	if e := l.Expired(10, time.Second); len(e.IDs) != 1 || e.IDs[0] != 1 {
		t.Fatalf("want lease 1 expired at apply + TTL + grace, got %+v", e)
	}
	// The replicated remaining includes the grace, so a restart keeps it.
	started = c.now()
	commit(t, db, func(b *pebble.Batch) {
		_ = l.Grant(b, 5, 2, 1) // grace 100 ms (TTL/10)
		_, _ = l.Renew(b, 6, 2, started)
	})
	if _, ok := l.RenewLocal(2); !ok {
		t.Fatal("RenewLocal after an own renewal of lease 2")
	}
	l.Demote()
	if _, ok := l.RenewLocal(2); !ok {
		t.Fatal("a follower's own committed renewal allows renewals without raft too")
	}
	l.Promote()
	if err := l.Reload(db); err != nil {
		t.Fatal(err)
	}
	if _, ok := l.RenewLocal(2); ok {
		t.Fatal("after a reload nothing may be acknowledged without raft")
	}
	c.advance(time.Second + 100*time.Millisecond - time.Millisecond)
	if e := l.Expired(10, time.Second); len(e.IDs) != 0 {
		t.Fatalf("reloaded lease 2 expired before its replicated remaining (TTL + grace): %v", e.IDs)
	}
	c.advance(time.Millisecond)
	if e := l.Expired(10, time.Second); len(e.IDs) != 1 || e.IDs[0] != 2 {
		t.Fatalf("want lease 2 expired after its reloaded remaining, got %+v", e)
	}
}
