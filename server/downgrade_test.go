package server

import (
	"context"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// etcdctl downgrade validate|enable|cancel gets a refusal that says why (no
// etcd release can open a Tenure data directory) and what to use instead,
// not gRPC's bare "method Downgrade not implemented"; the cluster's version
// and store stay as they were.
func TestDowngradeIsRefusedWithAReason(t *testing.T) {
	cli := startSingle(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	put, err := cli.Put(ctx, "k", "v")
	if err != nil {
		t.Fatal(err)
	}
	ep := cli.Endpoints()[0]
	for name, action := range map[string]clientv3.DowngradeAction{
		"validate": clientv3.DowngradeValidate,
		"enable":   clientv3.DowngradeEnable,
		"cancel":   clientv3.DowngradeCancel,
	} {
		_, err := cli.Downgrade(ctx, action, "3.6.0")
		if status.Code(err) != codes.Unimplemented || !strings.Contains(err.Error(), "make-mirror") {
			t.Errorf("downgrade %s: err = %v, want Unimplemented naming make-mirror", name, err)
		}
	}
	st, err := cli.Status(ctx, ep)
	if err != nil {
		t.Fatal(err)
	}
	if st.DowngradeInfo.GetEnabled() || st.Header.Revision != put.Header.Revision {
		t.Fatalf("after refused downgrades: downgrade enabled %v, revision %d (want false, %d)",
			st.DowngradeInfo.GetEnabled(), st.Header.Revision, put.Header.Revision)
	}
}
