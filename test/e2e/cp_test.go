package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	v3lockpb "go.etcd.io/etcd/server/v3/etcdserver/api/v3lock/v3lockpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Without a quorum a linearizable read fails with an error within its
// timeout; it never answers (stale or not).
func TestNoQuorumNoAnswer(t *testing.T) {
	c := start(t, clusterOpts())
	ctx := testCtx(t, 60*time.Second)
	if _, err := c.ClientAll().Put(ctx, "/cp", "v1"); err != nil {
		t.Fatal(err)
	}
	const remaining = 2
	// the remaining member has applied v1 (so a stale answer is possible).
	eventually(t, 10*time.Second, "member 2 applied v1", func() error {
		_, err := c.Client(remaining).Get(ctx, "/cp", clientv3.WithSerializable())
		return err
	})
	c.Pause(0)
	c.Pause(1)
	paused := true
	defer func() {
		if paused {
			c.Resume(0)
			c.Resume(1)
		}
	}()
	const reqTimeout = 2 * time.Second
	for _, op := range []string{"get", "put"} {
		rctx, cancel := context.WithTimeout(ctx, reqTimeout)
		begin := time.Now()
		var err error
		var r *clientv3.GetResponse
		if op == "get" {
			r, err = c.Client(remaining).Get(rctx, "/cp")
		} else {
			_, err = c.Client(remaining).Put(rctx, "/cp", "v2")
		}
		cancel()
		el := time.Since(begin)
		t.Logf("%s without quorum: %v after %v", op, err, el.Round(time.Millisecond))
		if err == nil {
			t.Errorf("%s without quorum succeeded (%v)", op, r)
		}
		if el > reqTimeout+time.Second {
			t.Errorf("%s without quorum took %v, want an error within %v", op, el, reqTimeout)
		}
	}
	// A client that asked for a leader (clientv3.WithRequireLeader) is told
	// at once that there is none, for writes, reads and lock calls alike,
	// once the member has noticed (its election timeout). A plain gRPC
	// connection: clientv3's interceptor retries a read on Unavailable.
	conn := plainConn(t, c.Endpoint(remaining))
	kv := pb.NewKVClient(conn)
	for _, op := range []string{"put", "get", "lock"} {
		eventually(t, 10*time.Second, op+" asking for a leader answers no leader", func() error {
			rctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(ctx, rpctypes.MetadataRequireLeaderKey, rpctypes.MetadataHasLeader), reqTimeout)
			defer cancel()
			begin := time.Now()
			var err error
			switch op {
			case "put":
				_, err = kv.Put(rctx, &pb.PutRequest{Key: []byte("/cp"), Value: []byte("v2")})
			case "get":
				_, err = kv.Range(rctx, &pb.RangeRequest{Key: []byte("/cp")})
			default:
				_, err = v3lockpb.NewLockClient(conn).Lock(rctx, &v3lockpb.LockRequest{Name: []byte("cp"), Lease: 1})
			}
			if s := status.Convert(err); s.Code() != codes.Unavailable || s.Message() != rpctypes.ErrNoLeader.Error() {
				return fmt.Errorf("got %v", err)
			}
			if el := time.Since(begin); el > reqTimeout/2 {
				t.Errorf("%s: no leader after %v, want it at once", op, el)
			}
			return nil
		})
	}
	c.Resume(0)
	c.Resume(1)
	paused = false
	resumed := time.Now()
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("cluster ready %v after resume", time.Since(resumed).Round(time.Millisecond))
	r, err := c.Client(remaining).Get(ctx, "/cp")
	if err != nil {
		t.Fatal(err)
	}
	if v := string(r.Kvs[0].Value); v != "v1" && v != "v2" {
		t.Errorf("after recovery /cp = %q", v)
	}
	if _, err := c.Client(remaining).Put(ctx, "/cp", "v3"); err != nil {
		t.Errorf("write after recovery: %v", err)
	}
}
