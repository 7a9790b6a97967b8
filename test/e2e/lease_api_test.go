package e2e

import (
	"errors"
	"fmt"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tenure-io/tenure/server/lease"
	"github.com/tenure-io/tenure/test/cluster"
)

// A TTL below the safe minimum, ceil(1.5 × election timeout), is raised and
// the response says what was granted; a lease that does not exist gives
// etcd's "requested lease not found" on every path.
func TestLeaseMinTTLAndNotFound(t *testing.T) {
	// Election 1000 ms: minimum TTL ceil(1.5 s) = 2 s.
	c := start(t, cluster.Options{Size: 1, HeartbeatMs: 100, ElectionMs: 1000})
	ctx := testCtx(t, 60*time.Second)
	cli := c.Client(0)

	g, err := cli.Grant(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if g.TTL != 2 {
		t.Errorf("Grant(1) granted TTL %d, want it raised to the minimum 2", g.TTL)
	}
	if ttl, err := cli.TimeToLive(ctx, g.ID); err != nil || ttl.GrantedTTL != 2 {
		t.Errorf("TimeToLive of the raised lease: %v %v", ttl, err)
	}

	const missing = clientv3.LeaseID(0x7e57)
	if _, err := cli.Revoke(ctx, missing); !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		t.Errorf("Revoke(missing) = %v, want %v", err, rpctypes.ErrLeaseNotFound)
	}
	if ttl, err := cli.TimeToLive(ctx, missing); err != nil || ttl.TTL != -1 {
		t.Errorf("TimeToLive(missing) = %v %v, want TTL -1", ttl, err)
	}
	if _, err := cli.KeepAliveOnce(ctx, missing); !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		t.Errorf("KeepAliveOnce(missing) = %v, want %v", err, rpctypes.ErrLeaseNotFound)
	}
	if _, err := cli.Put(ctx, "/lease-api/k", "v", clientv3.WithLease(missing)); !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		t.Errorf("Put with a missing lease = %v, want %v", err, rpctypes.ErrLeaseNotFound)
	}
	// On the wire, a keepalive for a missing lease answers TTL 0 (etcd's behaviour).
	stream, err := pb.NewLeaseClient(cli.ActiveConnection()).LeaseKeepAlive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&pb.LeaseKeepAliveRequest{ID: int64(missing)}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil || resp.TTL != 0 || resp.ID != int64(missing) {
		t.Errorf("raw keepalive for a missing lease: %v %v, want TTL 0", resp, err)
	}
	_ = stream.CloseSend()
}

// A keepalive stream on a member cut off from quorum fails with an error
// instead of going silent. Within the renewal grace after its last
// replicated renewal (started before the acknowledged keepalive) the
// member may still answer — that answer is covered by the committed
// renewal — but never later.
func TestLeaseKeepAliveWithoutQuorumErrors(t *testing.T) {
	c := start(t, cluster.Options{})
	ctx := testCtx(t, 60*time.Second)
	cli := c.Client(0)
	g, err := cli.Grant(ctx, 30)
	if err != nil {
		t.Fatal(err)
	}
	stream, err := pb.NewLeaseClient(cli.ActiveConnection()).LeaseKeepAlive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&pb.LeaseKeepAliveRequest{ID: int64(g.ID)}); err != nil {
		t.Fatal(err)
	}
	if r, err := stream.Recv(); err != nil || r.TTL != 30 {
		t.Fatalf("keepalive with quorum: %v %v", r, err)
	}
	acked := time.Now()
	c.Pause(1)
	c.Pause(2)
	defer c.Resume(1)
	defer c.Resume(2)
	answers := make(chan error, 1)
	recv := func() {
		r, err := stream.Recv()
		if err == nil && r.TTL != 30 {
			err = fmt.Errorf("answer without quorum with TTL %d", r.TTL)
		}
		answers <- err
	}
	for {
		sent := time.Now()
		if err := stream.Send(&pb.LeaseKeepAliveRequest{ID: int64(g.ID)}); err != nil {
			t.Fatal(err)
		}
		go recv()
		var err error
		select {
		case err = <-answers:
		case <-time.After(20 * time.Second):
			t.Fatal("keepalive stream stayed silent for 20s without quorum")
		}
		if err == nil {
			if time.Since(acked) > lease.MaxRenewGrace {
				t.Fatalf("keepalive answered without quorum %v after the last acknowledged renewal, beyond the %v grace", time.Since(acked).Round(time.Millisecond), lease.MaxRenewGrace)
			}
			continue // covered by the replicated renewal; try again
		}
		ev := rpctypes.Error(err)
		if !errors.Is(ev, rpctypes.ErrNoLeader) && !errors.Is(ev, rpctypes.ErrTimeout) {
			t.Fatalf("keepalive without quorum ended with %v, want %q or %q", err, rpctypes.ErrNoLeader, rpctypes.ErrTimeout)
		}
		t.Logf("keepalive stream without quorum failed after %v: %v", time.Since(sent).Round(time.Millisecond), err)
		return
	}
}
