package server

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// etcd's Auth service answers as an etcd with authentication disabled
// would where that is the truth (status, disable, authenticate), and with a
// clear "not supported" for users and roles, instead of gRPC's "unknown
// service"; none of it changes the store.
func TestAuthIsReportedDisabledAndUsersUnsupported(t *testing.T) {
	cli, cfg := startSingleConfig(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	put, err := cli.Put(ctx, "k", "v")
	if err != nil {
		t.Fatal(err)
	}
	st, err := cli.AuthStatus(ctx)
	if err != nil {
		t.Fatalf("AuthStatus: %v", err)
	}
	if st.Enabled || st.Header.GetRevision() != put.Header.Revision {
		t.Fatalf("AuthStatus = enabled %v at revision %d, want disabled at %d", st.Enabled, st.Header.GetRevision(), put.Header.Revision)
	}
	if _, err := cli.AuthDisable(ctx); err != nil {
		t.Fatalf("AuthDisable on a cluster without auth: %v", err)
	}
	unsupported := map[string]func() error{
		"AuthEnable": func() error { _, err := cli.AuthEnable(ctx); return err },
		"UserAdd":    func() error { _, err := cli.UserAdd(ctx, "root", "pw"); return err },
		"UserList":   func() error { _, err := cli.UserList(ctx); return err },
		"RoleAdd":    func() error { _, err := cli.RoleAdd(ctx, "root"); return err },
		"RoleGrantPermission": func() error {
			_, err := cli.RoleGrantPermission(ctx, "root", "a", "b", clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
	}
	for name, call := range unsupported {
		err := call()
		if status.Code(err) != codes.Unimplemented || !strings.Contains(err.Error(), "TLS certificates") {
			t.Errorf("%s: err = %v, want Unimplemented pointing to TLS certificates", name, err)
		}
	}
	// clientv3 given a user name authenticates first; "authentication is
	// not enabled" is the answer it tolerates (as against etcd with auth
	// off) and goes on without a token.
	ucli, err := clientv3.New(clientv3.Config{Endpoints: cfg.AdvertiseClientURLs, Username: "root", Password: "pw", DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("clientv3 with a user name: %v", err)
	}
	defer ucli.Close()
	if _, err := ucli.Get(ctx, "k"); err != nil {
		t.Fatalf("read through a client with a user name: %v", err)
	}
	if _, err := ucli.Authenticate(ctx, "root", "pw"); !errors.Is(err, rpctypes.ErrAuthNotEnabled) {
		t.Fatalf("Authenticate: err = %v, want %v", err, rpctypes.ErrAuthNotEnabled)
	}
	r, err := cli.Get(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if r.Header.Revision != put.Header.Revision {
		t.Fatalf("revision moved from %d to %d", put.Header.Revision, r.Header.Revision)
	}
}
