package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tenure-io/tenure/api/tenurev1"
	"github.com/tenure-io/tenure/test/cluster"
)

// TestLockGrantPushedToALaggingFollower: a waiter on a follower whose apply
// lags is granted as soon as the leader applies the hand-off — the leader
// pushes the grant to that member — not when the follower's own apply gets
// there; its Unlock is answered the same way (the leader pushes the op's
// result). The follower applies every batch 1.5 s late (failpoint); the
// grant must reach its client while the follower's store is still below
// the grant's revision, and the follower's apply must get there after.
// Without the push the grant waits for that apply, and the whole queue
// behind this waiter with it.
// withSlowApplyFollower restarts a follower of c so that it applies every
// batch delay late (failpoint apply-before-commit) and returns the leader
// and that follower.
func withSlowApplyFollower(t *testing.T, ctx context.Context, c *cluster.Cluster, delay string) (leader, follower int) {
	t.Helper()
	l, err := c.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	f := (l + 1) % len(c.Members)
	c.Stop(f)
	c.RestartWithEnv(f, []string{"TENURE_FAILPOINTS=apply-before-commit=sleep:" + delay})
	if err := c.WaitMemberReady(ctx, f); err != nil {
		t.Fatal(err)
	}
	return l, f
}

func TestLockGrantPushedToALaggingFollower(t *testing.T) {
	if cluster.TargetFromEnv(t) == cluster.Etcd {
		t.Skip("Tenure's lock service and failpoints")
	}
	c := start(t, cluster.Options{Size: 3})
	ctx := testCtx(t, 120*time.Second)
	l, f := withSlowApplyFollower(t, ctx, c, "1500ms")
	if nl, err := c.WaitLeader(ctx); err != nil || nl != l {
		t.Fatalf("leader after restarting follower %d: %d (%v), want %d still", f, nl, err, l)
	}
	ll, lf := lockClientsOf(c.Client(l)), lockClientsOf(c.Client(f))
	name := []byte("pushed/a")
	holderLease, waiterLease := int64(grantLease(t, ctx, ll.cli, 60)), int64(grantLease(t, ctx, ll.cli, 60))

	holder, waiter := openSession(t, ctx, ll), openSession(t, ctx, lf)
	holder.send(lockOp(name, holderLease))
	r := holder.recv(10 * time.Second)
	if r.GetLock() == nil {
		t.Fatalf("Lock on the leader: %v", r)
	}
	holderToken := r.GetLock().Token
	waiter.send(lockOp(name, waiterLease))
	waitQueueLength(t, ctx, ll, name, 2, "the lagging follower's Lock queued")

	holder.send(&tenurev1.SessionRequest{Op: &tenurev1.SessionRequest_Unlock{Unlock: &tenurev1.UnlockRequest{Name: name, Lease: holderLease, Token: holderToken}}})
	if r := holder.recv(10 * time.Second); !r.GetUnlock().GetReleased() {
		t.Fatalf("Unlock: %v", r)
	}
	r = waiter.recv(30 * time.Second)
	if r.GetLock() == nil || r.GetLock().Token <= holderToken {
		t.Fatalf("hand-off to the lagging follower: %v, want a token above %d", r, holderToken)
	}
	// The follower has not applied the hand-off yet: its own store (a
	// serializable read answers from it alone) is below the grant's
	// revision.
	grantRev := r.GetLock().Header.GetRevision()
	holderKey := fmt.Sprintf("%s/%x", name, holderLease)
	got, err := c.Client(f).Get(ctx, holderKey, clientv3.WithSerializable())
	if err != nil {
		t.Fatal(err)
	}
	if got.Header.Revision >= grantRev {
		t.Fatalf("follower %d was at revision %d, the grant's %d, when its waiter was granted: the grant waited for its apply instead of coming from the leader", f, got.Header.Revision, grantRev)
	}
	// The waiter's Unlock on that member is answered from the leader's
	// apply too (the op's result is pushed), again ahead of its own.
	waiterToken := r.GetLock().Token
	waiter.send(&tenurev1.SessionRequest{Op: &tenurev1.SessionRequest_Unlock{Unlock: &tenurev1.UnlockRequest{Name: name, Lease: waiterLease, Token: waiterToken}}})
	u := waiter.recv(30 * time.Second)
	if !u.GetUnlock().GetReleased() {
		t.Fatalf("Unlock on the lagging follower: %v", u)
	}
	unlockRev := u.GetUnlock().Header.GetRevision()
	if got, err = c.Client(f).Get(ctx, holderKey, clientv3.WithSerializable()); err != nil {
		t.Fatal(err)
	}
	if got.Header.Revision >= unlockRev {
		t.Fatalf("follower %d was at revision %d, the unlock's %d, when it answered the Unlock: the answer waited for its own apply", f, got.Header.Revision, unlockRev)
	}
	grantRev = unlockRev
	// And its apply does get there: the grant is the replicated outcome.
	eventually(t, 60*time.Second, "the follower applying the hand-off", func() error {
		got, err := c.Client(f).Get(ctx, holderKey, clientv3.WithSerializable())
		if err != nil {
			return err
		}
		if got.Header.Revision < grantRev || len(got.Kvs) != 0 {
			return fmt.Errorf("follower %d at revision %d (old owner key present: %v), want %d and the key gone", f, got.Header.Revision, len(got.Kvs) != 0, grantRev)
		}
		return nil
	})
}
