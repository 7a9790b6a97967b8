package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/tenure-io/tenure/api/tenurev1"
	"github.com/tenure-io/tenure/test/cluster"
)

// TestLockTimedOutAcquireLeavesTheQueue: a Lock whose call times out after
// its acquire went to raft gets an error, and its key, once written, leaves
// the queue — it is never granted to a call nobody waits on. Before, the
// key stayed queued until its lease ran out and was then granted to
// nobody, holding up every waiter behind it. To time the call out, the
// member serving it is made the leader (no member pushes results to the
// leader) and applies every batch 6 s late, past the 5 s request timeout.
func TestLockTimedOutAcquireLeavesTheQueue(t *testing.T) {
	if cluster.TargetFromEnv(t) == cluster.Etcd {
		t.Skip("Tenure's lock service and failpoints")
	}
	c := start(t, cluster.Options{Size: 3})
	ctx := testCtx(t, 240*time.Second)
	l, f := withSlowApplyFollower(t, ctx, c, "6s")
	st, err := c.Client(f).Status(ctx, c.Endpoint(f))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client(l).MoveLeader(ctx, st.Header.MemberId); err != nil {
		t.Fatalf("move leader m%d → m%d: %v", l, f, err)
	}
	if nl, err := c.WaitLeader(ctx, l); err != nil || nl != f {
		t.Fatalf("leader after the move: %d (%v), want %d", nl, err, f)
	}
	// l now follows and applies at once: the holder and the checks use it.
	ll, lf := lockClientsOf(c.Client(l)), lockClientsOf(c.Client(f))
	name := []byte("orphan/a")
	// Leases far longer than the test: only leaving the queue can free it.
	holderLease, waiterLease := int64(grantLease(t, ctx, ll.cli, 600)), int64(grantLease(t, ctx, ll.cli, 600))
	holder := openSession(t, ctx, ll)
	holder.send(lockOp(name, holderLease))
	r := holder.recv(10 * time.Second)
	if r.GetLock() == nil {
		t.Fatalf("Lock on the leader: %v", r)
	}
	waiter := openSession(t, ctx, lf)
	waiter.send(lockOp(name, waiterLease))
	waitQueueLength(t, ctx, ll, name, 2, "the slow leader's Lock queued")
	if r := waiter.recv(60 * time.Second); r.GetError() == nil {
		t.Fatalf("Lock on the leader that applies 6 s late: %v, want the request timeout", r)
	}
	// The waiter's member applies its acquire, finds its call gone and
	// deletes the key: the queue is the holder alone again.
	// (Each of that member's apply batches takes 6 s; a few are queued.)
	eventually(t, 120*time.Second, "the timed-out waiter's key leaving the queue", func() error {
		d, err := ll.native.Describe(ctx, &tenurev1.DescribeRequest{Name: name})
		if err != nil {
			return err
		}
		if d.QueueLength != 1 {
			return fmt.Errorf("queue length %d", d.QueueLength)
		}
		return nil
	})
	holder.send(&tenurev1.SessionRequest{Op: &tenurev1.SessionRequest_Unlock{Unlock: &tenurev1.UnlockRequest{Name: name, Lease: holderLease, Token: r.GetLock().Token}}})
	if r := holder.recv(10 * time.Second); !r.GetUnlock().GetReleased() {
		t.Fatalf("Unlock: %v", r)
	}
	d, err := ll.native.Describe(ctx, &tenurev1.DescribeRequest{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	if len(d.OwnerKey) != 0 {
		t.Fatalf("after the holder's unlock the lock went to %s (token %d), a waiter whose call had failed", d.OwnerKey, d.Token)
	}
}
