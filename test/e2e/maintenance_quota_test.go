package e2e

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tenure-io/tenure/test/cluster"
)

// TestQuotaAlarm: past --quota-backend-bytes a write raises NOSPACE through
// raft (every member lists it, it survives a restart), writes (Put, Txn with
// a put, LeaseGrant) fail with etcd's "database space exceeded" while reads,
// deletes and compaction work; compaction + defragment + disarm recover.
func TestQuotaAlarm(t *testing.T) {
	const quota = 3 << 20
	c := start(t, cluster.Options{Size: 3, SnapshotCount: 50,
		ExtraArgs: []string{"--quota-backend-bytes", fmt.Sprint(quota)}})
	ctx := testCtx(t, 120*time.Second)
	cli := c.Client(0)
	big := strings.Repeat("x", 100<<10)

	var lastErr error
	for i := 0; i < 200; i++ {
		if _, lastErr = cli.Put(ctx, fmt.Sprintf("big%d", i%5), big); lastErr != nil {
			break
		}
	}
	if !errors.Is(lastErr, rpctypes.ErrNoSpace) {
		t.Fatalf("writing past the quota: got %v, want %v", lastErr, rpctypes.ErrNoSpace)
	}
	if lastErr.Error() != "etcdserver: mvcc: database space exceeded" {
		t.Fatalf("error text %q", lastErr.Error())
	}

	// Replicated: every member lists the alarm and refuses writes.
	for i := range c.Members {
		eventually(t, 10*time.Second, fmt.Sprintf("member %d lists NOSPACE", i), func() error {
			resp, err := c.Client(i).AlarmList(ctx)
			if err != nil {
				return err
			}
			if len(resp.Alarms) != 1 || resp.Alarms[0].Alarm != pb.AlarmType_NOSPACE {
				return fmt.Errorf("alarms %v", resp.Alarms)
			}
			return nil
		})
		if _, err := c.Client(i).Put(ctx, "small", "v"); !errors.Is(err, rpctypes.ErrNoSpace) {
			t.Fatalf("member %d Put under NOSPACE: %v", i, err)
		}
	}
	if _, err := cli.Txn(ctx).Then(clientv3.OpPut("t", "v")).Commit(); !errors.Is(err, rpctypes.ErrNoSpace) {
		t.Fatalf("Txn with a put under NOSPACE: %v", err)
	}
	if _, err := cli.Grant(ctx, 60); !errors.Is(err, rpctypes.ErrNoSpace) {
		t.Fatalf("LeaseGrant under NOSPACE: %v", err)
	}
	st, err := cli.Status(ctx, c.Endpoint(0))
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Errors) == 0 || !strings.Contains(strings.Join(st.Errors, ";"), "NOSPACE") || st.DbSizeQuota != quota {
		t.Fatalf("status: errors %v quota %d", st.Errors, st.DbSizeQuota)
	}
	out, err := c.Etcdctl(ctx, "alarm", "list")
	if err != nil || !strings.Contains(out, "alarm:NOSPACE") {
		t.Fatalf("etcdctl alarm list: %v %q", err, out)
	}

	// Persisted: a restarted member still has it.
	c.Stop(2)
	c.Restart(2)
	if err := c.WaitMemberReady(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if resp, err := c.Client(2).AlarmList(ctx); err != nil || len(resp.Alarms) != 1 {
		t.Fatalf("after restart: %v, %v", resp, err)
	}

	// Reads, deletes (also in a Txn) and compaction keep working.
	if _, err := cli.Get(ctx, "big0"); err != nil {
		t.Fatalf("Get under NOSPACE: %v", err)
	}
	if _, err := cli.Txn(ctx).Then(clientv3.OpDelete("big0")).Commit(); err != nil {
		t.Fatalf("Txn delete under NOSPACE: %v", err)
	}
	del, err := cli.Delete(ctx, "big", clientv3.WithPrefix())
	if err != nil {
		t.Fatalf("Delete under NOSPACE: %v", err)
	}
	if _, err := cli.Compact(ctx, del.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatalf("Compact under NOSPACE: %v", err)
	}
	// Disarming while still full is allowed but the next write raises it
	// again; defragment every member first.
	for i := range c.Members {
		if _, err := c.Client(i).Defragment(ctx, c.Endpoint(i)); err != nil {
			t.Fatalf("defragment member %d: %v", i, err)
		}
		st, err := c.Client(i).Status(ctx, c.Endpoint(i))
		if err != nil {
			t.Fatal(err)
		}
		if st.DbSize >= quota {
			t.Fatalf("member %d: %d bytes after compaction and defragment, quota %d", i, st.DbSize, quota)
		}
	}
	if out, err := c.Etcdctl(ctx, "alarm", "disarm"); err != nil || !strings.Contains(out, "alarm:NOSPACE") {
		t.Fatalf("etcdctl alarm disarm: %v %q", err, out)
	}
	for i := range c.Members {
		eventually(t, 10*time.Second, fmt.Sprintf("member %d accepts writes", i), func() error {
			_, err := c.Client(i).Put(ctx, "after", "v")
			return err
		})
	}
	if resp, err := cli.AlarmList(ctx); err != nil || len(resp.Alarms) != 0 {
		t.Fatalf("alarms after disarm: %v, %v", resp, err)
	}
	if _, err := cli.Grant(ctx, 60); err != nil {
		t.Fatalf("LeaseGrant after disarm: %v", err)
	}
}
