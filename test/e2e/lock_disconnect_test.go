package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3election/v3electionpb"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3lock/v3lockpb"
	"google.golang.org/grpc"

	"github.com/tenure-io/tenure/api/tenurev1"
)

// TestWaiterThatDisconnectsLeavesTheQueue: a client whose connection closes
// while its Lock (v3lock or native) or Campaign waits leaves the queue at
// once, although its lease is still alive, and nobody is ever granted on its
// behalf. Each waiter talks to a different member, so the removal is
// proposed by the leader and by followers alike.
func TestWaiterThatDisconnectsLeavesTheQueue(t *testing.T) {
	c, lc := startLocks(t, 3)
	ctx := testCtx(t, 90*time.Second)
	name := []byte("disconnect")
	ownerLease := int64(grantLease(t, ctx, lc.cli, 60))
	owner, err := lc.native.Lock(ctx, &tenurev1.LockRequest{Name: name, Lease: ownerLease})
	if err != nil {
		t.Fatal(err)
	}
	waiters := []struct {
		api  string
		wait func(ctx context.Context, conn *grpc.ClientConn, lease int64) error
	}{
		{"v3lock Lock", func(ctx context.Context, conn *grpc.ClientConn, lease int64) error {
			_, err := v3lockpb.NewLockClient(conn).Lock(ctx, &v3lockpb.LockRequest{Name: name, Lease: lease})
			return err
		}},
		{"tenure.v1 Lock", func(ctx context.Context, conn *grpc.ClientConn, lease int64) error {
			_, err := tenurev1.NewLocksClient(conn).Lock(ctx, &tenurev1.LockRequest{Name: name, Lease: lease})
			return err
		}},
		{"v3election Campaign", func(ctx context.Context, conn *grpc.ClientConn, lease int64) error {
			_, err := v3electionpb.NewElectionClient(conn).Campaign(ctx, &v3electionpb.CampaignRequest{Name: name, Lease: lease, Value: []byte("w")})
			return err
		}},
	}
	for i, w := range waiters {
		member := i % len(c.Members)
		conn := plainConn(t, c.DirectEndpoint(member))
		lease := grantLease(t, ctx, lc.cli, 60)
		// The call's own error tells nothing about the server (closing the
		// connection fails it on the client's side); the queue and the
		// lease below do.
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = w.wait(ctx, conn, int64(lease))
		}()
		waitQueueLength(t, ctx, lc, name, 2, fmt.Sprintf("%s queued on member %d", w.api, member))
		if err := conn.Close(); err != nil {
			t.Fatal(err)
		}
		waitQueueLength(t, ctx, lc, name, 1, fmt.Sprintf("%s left the queue when its connection closed", w.api))
		<-done
		// The key went with the connection, not with the lease.
		ttl, err := lc.cli.TimeToLive(ctx, lease, clientv3.WithAttachedKeys())
		if err != nil || ttl.TTL <= 0 || len(ttl.Keys) != 0 {
			t.Fatalf("%s: lease after the disconnect: %+v %v, want alive with no keys", w.api, ttl, err)
		}
	}
	// The owner is untouched; once it releases, nobody is left to grant.
	d, err := lc.native.Describe(ctx, &tenurev1.DescribeRequest{Name: name})
	if err != nil || d.Token != owner.Token || len(d.Waiters) != 0 {
		t.Fatalf("Describe after the disconnects: %+v %v, want owner token %d and no waiters", d, err, owner.Token)
	}
	un, err := lc.native.Unlock(ctx, &tenurev1.UnlockRequest{Name: name, Lease: ownerLease, Token: owner.Token})
	if err != nil || !un.Released {
		t.Fatalf("owner's Unlock: %+v %v", un, err)
	}
	waitQueueLength(t, ctx, lc, name, 0, "nobody granted after the owner released")
	kv, err := lc.cli.Get(ctx, string(name)+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || kv.Count != 0 {
		t.Fatalf("keys under the lock after the release: %v %v", kv, err)
	}
}
