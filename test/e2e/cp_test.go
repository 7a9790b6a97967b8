package e2e

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
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
