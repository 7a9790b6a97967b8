package server

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Every error a client can provoke comes back as etcd's error and changes
// nothing: the revision after each bad request is the revision before it.
func TestBadRequestsAreRefusedAndChangeNothing(t *testing.T) {
	cli := startSingle(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, "k", "v2"); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Compact(ctx, 2); err != nil {
		t.Fatal(err)
	}
	rev := func() int64 {
		r, err := cli.Get(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		return r.Header.Revision
	}
	manyOps := make([]clientv3.Op, DefaultMaxTxnOps+1)
	for i := range manyOps {
		manyOps[i] = clientv3.OpGet("k")
	}
	cases := []struct {
		name string
		do   func() error
		want error
	}{
		{"oversized value", func() error {
			_, err := cli.Put(ctx, "big", strings.Repeat("x", DefaultMaxRequestBytes+1024))
			return err
		}, rpctypes.ErrRequestTooLarge},
		{"empty key", func() error { _, err := cli.Put(ctx, "", "v"); return err }, rpctypes.ErrEmptyKey},
		{"too many txn ops", func() error { _, err := cli.Txn(ctx).Then(manyOps...).Commit(); return err }, rpctypes.ErrTooManyOps},
		{"duplicate key in txn", func() error {
			_, err := cli.Txn(ctx).Then(clientv3.OpPut("a", "1"), clientv3.OpPut("a", "2")).Commit()
			return err
		}, rpctypes.ErrDuplicateKey},
		{"unknown lease", func() error {
			_, err := cli.Put(ctx, "k", "v", clientv3.WithLease(clientv3.LeaseID(0x1234)))
			return err
		}, rpctypes.ErrLeaseNotFound},
		{"revoke unknown lease", func() error { _, err := cli.Revoke(ctx, 0x1234); return err }, rpctypes.ErrLeaseNotFound},
		{"future revision", func() error { _, err := cli.Get(ctx, "k", clientv3.WithRev(1000)); return err }, rpctypes.ErrFutureRev},
		{"compacted revision", func() error { _, err := cli.Get(ctx, "k", clientv3.WithRev(1)); return err }, rpctypes.ErrCompacted},
		{"compact again below", func() error { _, err := cli.Compact(ctx, 1); return err }, rpctypes.ErrCompacted},
		{"ignore_value on a missing key", func() error {
			_, err := cli.Put(ctx, "missing", "", clientv3.WithIgnoreValue())
			return err
		}, rpctypes.ErrKeyNotFound},
		{"move leadership to an unknown member", func() error {
			_, err := cli.MoveLeader(ctx, 0x1234)
			return err
		}, rpctypes.ErrBadLeaderTransferee},
	}
	for _, c := range cases {
		before := rev()
		err := c.do()
		if !errors.Is(rpctypes.Error(err), c.want) {
			t.Errorf("%s: got %v, want %v", c.name, err, c.want)
		}
		if after := rev(); after != before {
			t.Errorf("%s changed the store: revision %d -> %d", c.name, before, after)
		}
	}
}
