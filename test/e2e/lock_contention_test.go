package e2e

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3lock/v3lockpb"

	"github.com/tenure-io/tenure/test/cluster"
)

// fencedResource accepts a write only with a token at least as large as
// every token it has accepted (the article's UPDATE … WHERE token >= max).
// It records the accepted writes so that overlapping critical sections show.
type fencedResource struct {
	mu       sync.Mutex
	max      int64
	inside   int64 // token of the section that entered and has not exited
	rejected int
	sections int
	overlaps []string
	tokens   []int64 // accepted entries, in the order the resource saw them
}

func (r *fencedResource) enter(token int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if token < r.max {
		r.rejected++
		return false
	}
	if token == r.max {
		r.overlaps = append(r.overlaps, fmt.Sprintf("token %d granted twice", token))
	}
	if r.inside != 0 {
		r.overlaps = append(r.overlaps, fmt.Sprintf("token %d entered while %d was inside", token, r.inside))
	}
	r.max, r.inside = token, token
	r.tokens = append(r.tokens, token)
	return true
}

func (r *fencedResource) exit(token int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if token != r.max {
		r.rejected++ // fenced off: someone newer entered
		return false
	}
	r.inside = 0
	r.sections++
	return true
}

// TestLockContentionWithLeaderKills: 20 clients contend for one lock
// through the v3lock service while the leader is killed and restarted; no
// two critical sections overlap at the fenced resource and tokens strictly
// increase, through the 1,000 hand-offs issue 4 asks for (about 30 s here);
// TENURE_LOCK_HANDOFFS sets another count.
func TestLockContentionWithLeaderKills(t *testing.T) {
	if cluster.TargetFromEnv(t) == cluster.Etcd {
		t.Skip("runs against Tenure's lock service")
	}
	target := 1000
	if v := os.Getenv("TENURE_LOCK_HANDOFFS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			t.Fatalf("TENURE_LOCK_HANDOFFS=%q", v)
		}
		target = n
	}
	c := start(t, cluster.Options{Size: 3})
	ctx := testCtx(t, 8*time.Minute)
	const clients = 20
	res := &fencedResource{}
	var handoffs atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < clients; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			cli := c.NewClient(c.Endpoints()...)
			lk := v3lockpb.NewLockClient(cli.ActiveConnection())
			var s *concurrency.Session
			for handoffs.Load() < int64(target) {
				select {
				case <-stop:
					return
				default:
				}
				if s == nil {
					var err error
					s, err = concurrency.NewSession(cli, concurrency.WithTTL(5))
					if err != nil {
						continue
					}
				}
				select {
				case <-s.Done(): // the session's lease is gone: start over
					s = nil
					continue
				default:
				}
				lctx, cancel := context.WithTimeout(ctx, 20*time.Second)
				r, err := lk.Lock(lctx, &v3lockpb.LockRequest{Name: []byte("contended"), Lease: int64(s.Lease())})
				cancel()
				if err != nil {
					continue // leader change, timeout: try again
				}
				kv, err := cli.Get(ctx, string(r.Key))
				if err != nil || len(kv.Kvs) == 0 {
					// Cannot learn the token; release and retry.
					_, _ = lk.Unlock(ctx, &v3lockpb.UnlockRequest{Key: r.Key})
					continue
				}
				token := kv.Kvs[0].CreateRevision
				if res.enter(token) {
					res.exit(token)
					handoffs.Add(1)
				}
				for {
					uctx, cancel := context.WithTimeout(ctx, 5*time.Second)
					_, err := lk.Unlock(uctx, &v3lockpb.UnlockRequest{Key: r.Key})
					cancel()
					if err == nil || ctx.Err() != nil {
						break
					}
				}
			}
		}(i)
	}
	// Kill and restart the leader at a few points of the run.
	kills := 0
	for _, at := range []int64{int64(target) / 4, int64(target) / 2, 3 * int64(target) / 4} {
		eventually(t, 4*time.Minute, fmt.Sprintf("%d hand-offs", at), func() error {
			if n := handoffs.Load(); n < at {
				return fmt.Errorf("%d hand-offs", n)
			}
			return nil
		})
		l, err := c.Leader(ctx)
		if err != nil {
			t.Fatal(err)
		}
		c.Kill(l)
		if _, err := c.WaitLeader(ctx, l); err != nil {
			t.Fatal(err)
		}
		c.Restart(l)
		kills++
	}
	eventually(t, 4*time.Minute, fmt.Sprintf("%d hand-offs", target), func() error {
		if n := handoffs.Load(); n < int64(target) {
			return fmt.Errorf("%d hand-offs", n)
		}
		return nil
	})
	close(stop)
	wg.Wait()
	res.mu.Lock()
	defer res.mu.Unlock()
	if len(res.overlaps) > 0 {
		t.Fatalf("overlapping owners at the fenced resource: %v", res.overlaps)
	}
	for i := 1; i < len(res.tokens); i++ {
		if res.tokens[i] <= res.tokens[i-1] {
			t.Fatalf("tokens not strictly increasing: %d then %d", res.tokens[i-1], res.tokens[i])
		}
	}
	t.Logf("%d hand-offs, %d leader kills, %d fenced-off writes", res.sections, kills, res.rejected)
}
