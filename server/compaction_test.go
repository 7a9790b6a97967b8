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

// --auto-compaction-retention=2s (periodic): the leader compacts the
// history older than the retention by itself; the newest revision stays
// readable.
func TestAutoCompactionPeriodic(t *testing.T) {
	cli, _ := startSingleConfig(t, func(c *Config) {
		c.AutoCompactionMode, c.AutoCompactionRetention = "periodic", "2s"
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	first, err := cli.Put(ctx, "k", "v0")
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for i := 1; ; i++ {
		if _, err := cli.Put(ctx, "k", "v"); err != nil {
			t.Fatal(err)
		}
		_, err := cli.Get(ctx, "k", clientv3.WithRev(first.Header.Revision))
		if errors.Is(err, rpctypes.ErrCompacted) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("revision %d still readable after %d puts and 20s with a 2s retention", first.Header.Revision, i)
		}
		time.Sleep(100 * time.Millisecond) // a put rate, not a wait for a condition
	}
	if g, err := cli.Get(ctx, "k"); err != nil || len(g.Kvs) != 1 {
		t.Fatalf("latest after auto compaction: %v %v", g, err)
	}
}

// Bad values are refused with the flag named, as etcd does.
func TestAutoCompactionFlagsValidated(t *testing.T) {
	for _, tt := range []struct{ mode, retention, want string }{
		{"periodic", "soon", "--auto-compaction-retention"},
		{"revision", "1h", "--auto-compaction-retention"},
		{"hourly", "1", "--auto-compaction-mode"},
	} {
		cfg := DefaultConfig()
		cfg.DataDir = t.TempDir()
		cfg.AutoCompactionMode, cfg.AutoCompactionRetention = tt.mode, tt.retention
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("mode %q retention %q: %v, want an error naming %s", tt.mode, tt.retention, err, tt.want)
		}
	}
}
