package e2e

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tenure-io/tenure/test/cluster"
)

// An expiry storm: 10,000 leases, each with a key, expire together on a
// 3-member cluster with --lease-expiry-rate 2000. The revocations are
// spread out at the rate (first to last delete ≥ N/rate − slack), the
// leader logs the storm, every lease's key is deleted exactly once, and
// during the storm puts and linearizable gets keep succeeding within the
// request timeout while the leader is killed and a new one elected.
func TestLeaseExpiryStorm(t *testing.T) {
	if cluster.TargetFromEnv(t) == cluster.Etcd {
		t.Skip("--lease-expiry-rate and the storm log line are Tenure's")
	}
	const (
		n      = 10000
		rate   = 2000
		ttl    = 20 // seconds; longer than granting 10,000 leases takes
		prefix = "/storm/"
		opTime = 5 * time.Second // the server's request timeout
		// attemptTime: a put forwarded to the leader that is then killed is
		// lost, and the server answers it only at its request timeout.
		attemptTime = 1500 * time.Millisecond
	)
	c := start(t, cluster.Options{ExtraArgs: []string{fmt.Sprintf("--lease-expiry-rate=%d", rate)}})
	ctx := testCtx(t, 170*time.Second)

	leader, err := c.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The watcher and the load run against a member that stays up.
	survivor := (leader + 1) % 3
	cli := c.Client(survivor)

	// 1. Grant n leases and put one key on each, from many goroutines over
	// every member.
	ids := make([]clientv3.LeaseID, n)
	grantStart := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for w := 0; w < 64; w++ {
		wg.Add(1)
		go func(cl *clientv3.Client) {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				g, err := cl.Grant(ctx, ttl)
				if err == nil {
					ids[i] = g.ID
					_, err = cl.Put(ctx, fmt.Sprintf("%sk%05d", prefix, i), "v", clientv3.WithLease(g.ID))
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}(c.Client(w % 3))
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("granting: %v", err)
	}
	t.Logf("granted %d leases with a key each in %v", n, time.Since(grantStart).Round(time.Millisecond))

	// 2. Line the deadlines up: renew every lease in one pipelined burst
	// (16 streams), so they all expire within a short window.
	burstStart := time.Now()
	renewBurst(t, ctx, c, ids)
	burst := time.Since(burstStart)
	t.Logf("renewed %d leases in %v (their deadlines span about that much)", n, burst.Round(time.Millisecond))
	if burst > n/rate*time.Second/2 {
		t.Logf("note: the renewal burst took longer than half the rate-limited drain (%v): the span check below is weak this run", n/rate*time.Second)
	}

	// 3. Watch the prefix's deletes from the survivor.
	st, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	if st.Count != n {
		t.Fatalf("%d keys under %s before the storm, want %d", st.Count, prefix, n)
	}
	type del struct {
		rev int64
		at  time.Time
	}
	var (
		delMu   sync.Mutex
		deletes = map[string]del{}
		dupes   int
	)
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	wch := cli.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(st.Header.Revision+1))
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		for wr := range wch {
			now := time.Now()
			delMu.Lock()
			for _, ev := range wr.Events {
				if ev.Type != mvccpb.DELETE {
					continue
				}
				k := string(ev.Kv.Key)
				if _, ok := deletes[k]; ok {
					dupes++
				}
				deletes[k] = del{ev.Kv.ModRevision, now}
			}
			full := len(deletes) >= n
			delMu.Unlock()
			if full {
				return
			}
		}
	}()
	deleted := func() int {
		delMu.Lock()
		defer delMu.Unlock()
		return len(deletes)
	}

	// 4. Put latency before the storm.
	before := putLatencies(t, ctx, cli, "/storm-load/before/", 200, opTime)

	// 5. During the storm: puts and linearizable gets in a loop on the
	// survivor; kill the leader once a fifth of the leases are gone. Each
	// put+get must succeed within opTime; an attempt lost with the killed
	// leader is retried after attemptTime (counted and logged). The last
	// op in flight when the storm ends is finished and checked too.
	var stopLoad atomic.Bool
	var (
		loadMu     sync.Mutex
		during     []time.Duration
		retries    int
		loadErr    error
		loadOps    int
		loadDone   = make(chan struct{})
		stormStart time.Time
	)
	eventually(t, time.Duration(ttl)*time.Second+30*time.Second, "the storm starts", func() error {
		if deleted() == 0 {
			return fmt.Errorf("no lease expired yet")
		}
		return nil
	})
	stormStart = time.Now()
	go func() {
		defer close(loadDone)
		for i := 0; !stopLoad.Load(); i++ {
			key := fmt.Sprintf("/storm-load/during/%06d", i)
			d, r, err := untilOK(ctx, opTime, attemptTime, func(octx context.Context) error {
				if _, err := cli.Put(octx, key, "v"); err != nil {
					return err
				}
				g, err := cli.Get(octx, key) // linearizable
				if err == nil && len(g.Kvs) != 1 {
					err = fmt.Errorf("linearizable get of %s after its put: %d kvs", key, len(g.Kvs))
				}
				return err
			})
			loadMu.Lock()
			retries += r
			if err != nil {
				loadErr = fmt.Errorf("put+get %s: %v (not done within %v)", key, err, opTime)
				loadMu.Unlock()
				return
			}
			during = append(during, d)
			loadOps++
			loadMu.Unlock()
		}
	}()
	eventually(t, 30*time.Second, "a fifth of the leases expire", func() error {
		if k := deleted(); k < n/5 {
			return fmt.Errorf("%d deleted", k)
		}
		return nil
	})
	if l, err := c.Leader(ctx); err == nil && l != survivor {
		leader = l
	}
	t.Logf("killing leader m%d mid-storm (%d of %d leases revoked)", leader, deleted(), n)
	c.Kill(leader)
	if _, err := c.WaitLeader(ctx, leader); err != nil {
		t.Fatalf("no new leader after killing the leader mid-storm: %v", err)
	}
	eventually(t, 60*time.Second, "every lease's key is deleted", func() error {
		if k := deleted(); k < n {
			return fmt.Errorf("%d of %d deleted", k, n)
		}
		return nil
	})
	stopLoad.Store(true)
	<-loadDone
	<-watchDone
	if loadErr != nil {
		t.Fatal(loadErr)
	}

	// 6. Every key deleted exactly once; none left; rate limit held.
	delMu.Lock()
	if dupes != 0 {
		t.Errorf("%d keys deleted more than once", dupes)
	}
	var first, last time.Time
	revs := map[int64]int{}
	for _, d := range deletes {
		if first.IsZero() || d.at.Before(first) {
			first = d.at
		}
		if d.at.After(last) {
			last = d.at
		}
		revs[d.rev]++
	}
	delMu.Unlock()
	for rev, k := range revs {
		if k != 1 {
			t.Errorf("revision %d deleted %d lease keys; each lease's keys get their own revision", rev, k)
		}
	}
	left, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	if left.Count != 0 {
		t.Errorf("%d keys under %s after the storm, want 0", left.Count, prefix)
	}
	span := last.Sub(first)
	minSpan := time.Duration(n)*time.Second/rate - time.Second
	t.Logf("revocations: %d keys, first to last %v (rate %d/s allows no less than %v)", len(revs), span.Round(time.Millisecond), rate, minSpan+time.Second)
	if span < minSpan {
		t.Errorf("%d revocations took %v, want at least %v at --lease-expiry-rate=%d", n, span, minSpan, rate)
	}

	// 7. The storm was logged (by the leader that first hit the backlog).
	var logged bool
	for _, m := range c.Members {
		b, err := os.ReadFile(m.LogPath)
		if err == nil && strings.Contains(string(b), "lease expiry storm: revocations rate-limited") {
			logged = true
		}
	}
	if !logged {
		t.Error(`no member logged "lease expiry storm: revocations rate-limited"`)
	}

	loadMu.Lock()
	t.Logf("put latency before the storm: %s", latencySummary(before))
	var busy time.Duration
	for _, d := range during {
		busy += d
	}
	t.Logf("put+linearizable get during the storm (%v, leader killed): %d ops (%v waiting on them), %d retried attempts, %s",
		time.Since(stormStart).Round(time.Millisecond), loadOps, busy.Round(time.Millisecond), retries, latencySummary(during))
	loadMu.Unlock()
	if len(during) == 0 {
		t.Error("no put+get completed during the storm")
	}
}

// renewBurst renews every lease once over 16 pipelined keepalive streams
// and fails the test if any lease is already gone.
func renewBurst(t *testing.T, ctx context.Context, c *cluster.Cluster, ids []clientv3.LeaseID) {
	t.Helper()
	const streams = 16
	var wg sync.WaitGroup
	errs := make(chan error, streams)
	for s := 0; s < streams; s++ {
		wg.Add(1)
		go func(s int) {
			defer wg.Done()
			cli := c.Client(s % 3)
			sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			ka, err := pb.NewLeaseClient(cli.ActiveConnection()).LeaseKeepAlive(sctx)
			if err != nil {
				errs <- err
				return
			}
			var mine []clientv3.LeaseID
			for i := s; i < len(ids); i += streams {
				mine = append(mine, ids[i])
			}
			sendErr := make(chan error, 1)
			go func() {
				for _, id := range mine {
					if err := ka.Send(&pb.LeaseKeepAliveRequest{ID: int64(id)}); err != nil {
						sendErr <- err
						return
					}
				}
				sendErr <- ka.CloseSend()
			}()
			for range mine {
				r, err := ka.Recv()
				if err != nil {
					errs <- fmt.Errorf("keepalive burst: %v", err)
					return
				}
				if r.TTL <= 0 {
					errs <- fmt.Errorf("lease %x was already gone before the burst (granting took longer than its TTL)", r.ID)
					return
				}
			}
			if err := <-sendErr; err != nil {
				errs <- err
			}
		}(s)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// untilOK runs op with per-attempt deadlines (attempt, and never past
// budget) until it succeeds or budget passes; it returns the total time, the
// number of failed attempts and the last error.
func untilOK(ctx context.Context, budget, attempt time.Duration, op func(context.Context) error) (time.Duration, int, error) {
	start := time.Now()
	deadline := start.Add(budget)
	retries := 0
	for {
		ad := time.Now().Add(attempt)
		if ad.After(deadline) {
			ad = deadline
		}
		actx, cancel := context.WithDeadline(ctx, ad)
		err := op(actx)
		cancel()
		if err == nil || ctx.Err() != nil || time.Now().After(deadline) {
			return time.Since(start), retries, err
		}
		retries++
		select {
		case <-ctx.Done():
			return time.Since(start), retries, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func putLatencies(t *testing.T, ctx context.Context, cli *clientv3.Client, prefix string, k int, timeout time.Duration) []time.Duration {
	t.Helper()
	out := make([]time.Duration, 0, k)
	for i := 0; i < k; i++ {
		pctx, cancel := context.WithTimeout(ctx, timeout)
		s := time.Now()
		_, err := cli.Put(pctx, fmt.Sprintf("%s%06d", prefix, i), "v")
		cancel()
		if err != nil {
			t.Fatalf("put before the storm: %v", err)
		}
		out = append(out, time.Since(s))
	}
	return out
}

func latencySummary(ds []time.Duration) string {
	if len(ds) == 0 {
		return "no samples"
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	q := func(p float64) time.Duration { return s[int(p*float64(len(s)-1))].Round(10 * time.Microsecond) }
	return fmt.Sprintf("n=%d p50=%v p99=%v max=%v", len(s), q(0.5), q(0.99), s[len(s)-1].Round(10*time.Microsecond))
}
