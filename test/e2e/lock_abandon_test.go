package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3lock/v3lockpb"

	"github.com/tenure-io/tenure/api/tenurev1"
	"github.com/tenure-io/tenure/test/cluster"
)

// TestWaiterLeavingACutOffMember: a waiter gives up (its call is cancelled)
// on a member that is cut off from the quorum, so the delete of its key
// cannot commit then. The member keeps retrying the delete: once the
// partition heals, the key goes although its lease is still alive. And if
// the same lease locks again elsewhere in the meantime, the late delete
// leaves that call's key alone: it compares the mod revision the departed
// call wrote, which the new call's acquire moved.
func TestWaiterLeavingACutOffMember(t *testing.T) {
	if cluster.TargetFromEnv(t) == cluster.Etcd {
		t.Skip("Tenure lock semantics (etcd's lock service deletes once)")
	}
	c := start(t, cluster.Options{Size: 3, Proxied: true})
	ctx := testCtx(t, 150*time.Second)
	lead, err := c.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cut := (lead + 1) % 3
	major := c.Client(lead)
	lc := lockClientsOf(major)
	waiterConn := plainConn(t, c.DirectEndpoint(cut))
	pendingURL := c.DirectEndpoint(cut) + "/metrics"
	pending := func() float64 { return scrape(t, pendingURL)["tenure_lock_abandoned_keys_pending"] }
	name := []byte("cut-off")
	keyOf := func(lease clientv3.LeaseID) string { return fmt.Sprintf("%s/%x", name, int64(lease)) }

	ownerLease := grantLease(t, ctx, major, 60)
	owner, err := lc.native.Lock(ctx, &tenurev1.LockRequest{Name: name, Lease: int64(ownerLease)})
	if err != nil {
		t.Fatal(err)
	}

	// queueOnCutMember starts a v3lock Lock on the member about to be cut
	// off, waits until that member has applied its key, cuts it off and
	// cancels the call; it returns once the member reports the delete of
	// the key as pending (its first attempt did not commit).
	queueOnCutMember := func(lease clientv3.LeaseID) {
		t.Helper()
		wctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = v3lockpb.NewLockClient(waiterConn).Lock(wctx, &v3lockpb.LockRequest{Name: name, Lease: int64(lease)})
		}()
		waitQueueLength(t, ctx, lc, name, 2, "the waiter queued")
		eventually(t, 10*time.Second, "the cut-off member applied the waiter's key", func() error {
			r, err := c.Client(cut).Get(ctx, keyOf(lease), clientv3.WithSerializable())
			if err != nil || r.Count != 1 {
				return fmt.Errorf("%v %v", r, err)
			}
			return nil
		})
		c.Partition([]int{cut}, []int{lead, (lead + 2) % 3})
		cancel()
		<-done
		eventually(t, 20*time.Second, "the cut-off member retries the departed waiter's delete", func() error {
			if n := pending(); n != 1 {
				return fmt.Errorf("tenure_lock_abandoned_keys_pending %v", n)
			}
			return nil
		})
		r, err := major.Get(ctx, keyOf(lease))
		if err != nil || r.Count != 1 {
			t.Fatalf("the departed waiter's key on the majority side: %v %v, want it still there (the delete could not commit)", r, err)
		}
	}

	// 1. The retry deletes the key once the member is back.
	gone := grantLease(t, ctx, major, 60)
	queueOnCutMember(gone)
	c.Heal()
	eventually(t, 30*time.Second, "the departed waiter's key deleted after the partition healed", func() error {
		r, err := major.Get(ctx, keyOf(gone))
		if err != nil || r.Count != 0 {
			return fmt.Errorf("key %s: %v %v", keyOf(gone), r, err)
		}
		if n := pending(); n != 0 {
			return fmt.Errorf("tenure_lock_abandoned_keys_pending %v", n)
		}
		return nil
	})
	ttl, err := major.TimeToLive(ctx, gone, clientv3.WithAttachedKeys())
	if err != nil || ttl.TTL <= 0 || len(ttl.Keys) != 0 {
		t.Fatalf("the departed waiter's lease: %+v %v, want alive with no keys (the key went with the call, not the lease)", ttl, err)
	}
	waitQueueLength(t, ctx, lc, name, 1, "only the owner left")

	// 2. The same lease locks again on the majority side while the
	// departed call's delete is pending; it is granted when the owner
	// unlocks, and the late delete, once the member is back, leaves it.
	again := grantLease(t, ctx, major, 60)
	queueOnCutMember(again)
	type lockOut struct {
		r   *tenurev1.LockResponse
		err error
	}
	relock := make(chan lockOut, 1)
	go func() {
		r, err := lc.native.Lock(ctx, &tenurev1.LockRequest{Name: name, Lease: int64(again)})
		relock <- lockOut{r, err}
	}()
	// The re-Lock found its key queued (no third key) and rewrote it.
	var waitingRev int64
	eventually(t, 10*time.Second, "the same lease's Lock rewrote its queued key", func() error {
		r, err := major.Get(ctx, keyOf(again))
		if err != nil || r.Count != 1 {
			return fmt.Errorf("%v %v", r, err)
		}
		if kv := r.Kvs[0]; kv.ModRevision == kv.CreateRevision {
			return fmt.Errorf("key %s not rewritten yet (mod revision %d)", kv.Key, kv.ModRevision)
		}
		waitingRev = r.Kvs[0].CreateRevision
		return nil
	})
	waitQueueLength(t, ctx, lc, name, 2, "the owner and the same waiter's key")
	if un, err := lc.native.Unlock(ctx, &tenurev1.UnlockRequest{Name: name, Lease: int64(ownerLease), Token: owner.Token}); err != nil || !un.Released {
		t.Fatalf("owner's Unlock: %+v %v", un, err)
	}
	var got lockOut
	select {
	case got = <-relock:
	case <-ctx.Done():
		t.Fatal("the same lease's Lock was not granted after the owner unlocked")
	}
	if got.err != nil || got.r.Token != waitingRev {
		t.Fatalf("the same lease's Lock: %+v %v, want granted at the queued key's token %d", got.r, got.err, waitingRev)
	}
	c.Heal()
	eventually(t, 30*time.Second, "the cut-off member gave up the stale delete", func() error {
		if n := pending(); n != 0 {
			return fmt.Errorf("tenure_lock_abandoned_keys_pending %v", n)
		}
		return nil
	})
	// The cut-off member has caught up past the grant; the lock is still
	// held by the call that was granted, at its token.
	eventually(t, 10*time.Second, "the re-locked key, rewritten, on the cut-off member (the late delete left it)", func() error {
		r, err := c.Client(cut).Get(ctx, keyOf(again), clientv3.WithSerializable())
		if err != nil || r.Count != 1 || r.Kvs[0].ModRevision == r.Kvs[0].CreateRevision {
			return fmt.Errorf("%v %v", r, err)
		}
		return nil
	})
	d, err := lc.native.Describe(ctx, &tenurev1.DescribeRequest{Name: name})
	if err != nil || d.Token != got.r.Token || d.QueueLength != 1 {
		t.Fatalf("Describe after the heal: %+v %v, want the re-locked call holding at token %d", d, err, got.r.Token)
	}
	f, err := lc.native.CheckFence(ctx, &tenurev1.CheckFenceRequest{Name: name, Token: got.r.Token})
	if err != nil || !f.Current {
		t.Fatalf("CheckFence(%d) after the heal: %+v %v, want current", got.r.Token, f, err)
	}
}
