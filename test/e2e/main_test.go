// Package e2e holds Tenure's end-to-end tests: real processes, real
// clients (clientv3, etcdctl), real faults. They run against Tenure by
// default; TENURE_TEST_TARGET=etcd (or TENURE_TEST_ETCD=1) runs them against
// real etcd to validate the tests themselves.
package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tenure-io/tenure/test/cluster"
)

const (
	heartbeatMs = 50
	electionMs  = 500
)

func start(t *testing.T, opts cluster.Options) *cluster.Cluster {
	t.Helper()
	opts.Binary = cluster.TargetFromEnv(t)
	if opts.Size == 0 {
		opts.Size = 3
	}
	if opts.HeartbeatMs == 0 {
		opts.HeartbeatMs = heartbeatMs
	}
	if opts.ElectionMs == 0 {
		opts.ElectionMs = electionMs
	}
	return cluster.Start(t, opts)
}

func testCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// plainConn is a gRPC connection to one client endpoint (http://host:port)
// without clientv3's interceptors, which retry some failures the tests must
// see; closed on cleanup (closing it earlier is fine).
func plainConn(t *testing.T, endpoint string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(strings.TrimPrefix(endpoint, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// eventually polls f until it returns nil or the deadline passes.
func eventually(t *testing.T, d time.Duration, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	var err error
	for {
		if err = f(); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not true within %v: %v", what, d, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
