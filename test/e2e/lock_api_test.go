package e2e

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3election/v3electionpb"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3lock/v3lockpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tenure-io/tenure/api/tenurev1"
	"github.com/tenure-io/tenure/test/cluster"
	"github.com/tenure-io/tenure/test/logbuf"
)

type lockClients struct {
	cli      *clientv3.Client
	lock     v3lockpb.LockClient
	election v3electionpb.ElectionClient
	native   tenurev1.LocksClient
}

func startLocks(t *testing.T, size int) (*cluster.Cluster, lockClients) {
	t.Helper()
	if cluster.TargetFromEnv(t) == cluster.Etcd {
		t.Skip("Tenure lock semantics (etcd has the bugs these tests pin down)")
	}
	c := start(t, cluster.Options{Size: size})
	return c, lockClientsOf(c.ClientAll())
}

// lockClientsOf is the lock services' clients on cli's connection.
func lockClientsOf(cli *clientv3.Client) lockClients {
	conn := cli.ActiveConnection()
	return lockClients{cli: cli, lock: v3lockpb.NewLockClient(conn), election: v3electionpb.NewElectionClient(conn), native: tenurev1.NewLocksClient(conn)}
}

func grantLease(t *testing.T, ctx context.Context, cli *clientv3.Client, ttl int64) clientv3.LeaseID {
	t.Helper()
	l, err := cli.Grant(ctx, ttl)
	if err != nil {
		t.Fatal(err)
	}
	return l.ID
}

func wantCode(t *testing.T, err error, code codes.Code, what string) {
	t.Helper()
	if status.Code(err) != code {
		t.Fatalf("%s: got %v, want code %v", what, err, code)
	}
}

// waitQueueLength waits until Describe reports n keys in name's queue.
func waitQueueLength(t *testing.T, ctx context.Context, lc lockClients, name []byte, n int64, what string) {
	t.Helper()
	eventually(t, 10*time.Second, what, func() error {
		d, err := lc.native.Describe(ctx, &tenurev1.DescribeRequest{Name: name})
		if err != nil {
			return err
		}
		if d.QueueLength != n {
			return fmt.Errorf("queue length %d", d.QueueLength)
		}
		return nil
	})
}

type lockResult struct {
	key   string
	token int64
	err   error
	at    time.Time
}

// TestLockEtcdBugsFixed pins down the three etcd 3.7.3 lock bugs: lease 0
// is refused, and a waiter (lock or campaign) whose lease ends while it waits
// gets an error and leaves the queue instead of being told it won.
func TestLockEtcdBugsFixed(t *testing.T) {
	_, lc := startLocks(t, 1)
	ctx := testCtx(t, 60*time.Second)

	_, err := lc.lock.Lock(ctx, &v3lockpb.LockRequest{Name: []byte("bug/zero"), Lease: 0})
	wantCode(t, err, codes.InvalidArgument, "v3lock Lock with lease 0")
	_, err = lc.election.Campaign(ctx, &v3electionpb.CampaignRequest{Name: []byte("bug/zero"), Lease: 0, Value: []byte("x")})
	wantCode(t, err, codes.InvalidArgument, "Campaign with lease 0")
	_, err = lc.native.Lock(ctx, &tenurev1.LockRequest{Name: []byte("bug/zero")})
	wantCode(t, err, codes.InvalidArgument, "tenure Lock with lease 0")

	for _, kind := range []string{"lock", "campaign"} {
		t.Run(kind+"-waiter-lease-expires", func(t *testing.T) {
			name := []byte("bug/" + kind)
			owner := grantLease(t, ctx, lc.cli, 30)
			waiter := grantLease(t, ctx, lc.cli, 1) // never kept alive: expires while waiting
			var got = make(chan error, 1)
			if kind == "lock" {
				if _, err := lc.lock.Lock(ctx, &v3lockpb.LockRequest{Name: name, Lease: int64(owner)}); err != nil {
					t.Fatal(err)
				}
				go func() {
					_, err := lc.lock.Lock(ctx, &v3lockpb.LockRequest{Name: name, Lease: int64(waiter)})
					got <- err
				}()
			} else {
				if _, err := lc.election.Campaign(ctx, &v3electionpb.CampaignRequest{Name: name, Lease: int64(owner), Value: []byte("a")}); err != nil {
					t.Fatal(err)
				}
				go func() {
					_, err := lc.election.Campaign(ctx, &v3electionpb.CampaignRequest{Name: name, Lease: int64(waiter), Value: []byte("b")})
					got <- err
				}()
			}
			select {
			case err := <-got:
				wantCode(t, err, codes.Aborted, kind+" waiter whose lease expired")
			case <-ctx.Done():
				t.Fatal("waiter with an expired lease never answered")
			}
			// The owner still owns it, and releasing it grants nobody stale.
			d, err := lc.native.Describe(ctx, &tenurev1.DescribeRequest{Name: name})
			if err != nil {
				t.Fatal(err)
			}
			if d.OwnerLease != int64(owner) || d.QueueLength != 1 {
				t.Fatalf("after waiter expiry: %+v", d)
			}
		})
	}
}

// TestLockFIFOFenceAndDescribe: waiters are granted in request order, one
// per release; the released owner's token is stale at once.
func TestLockFIFOFenceAndDescribe(t *testing.T) {
	c, lc := startLocks(t, 1)
	ctx := testCtx(t, 60*time.Second)
	name := []byte("fifo")
	const n = 5
	leases := make([]int64, n)
	for i := range leases {
		leases[i] = int64(grantLease(t, ctx, lc.cli, 30))
	}
	first, err := lc.native.Lock(ctx, &tenurev1.LockRequest{Name: name, Lease: leases[0]})
	if err != nil {
		t.Fatal(err)
	}
	results := make([]chan lockResult, n)
	for i := 1; i < n; i++ {
		results[i] = make(chan lockResult, 1)
		go func(i int) {
			r, err := lc.native.Lock(ctx, &tenurev1.LockRequest{Name: name, Lease: leases[i]})
			if err != nil {
				results[i] <- lockResult{err: err}
				return
			}
			results[i] <- lockResult{key: string(r.Key), token: r.Token}
		}(i)
		// Enqueue in a known order: wait until this waiter is in the queue.
		waitQueueLength(t, ctx, lc, name, int64(i+1), "waiter enqueued")
	}
	// TryLock on a held lock fails fast with the owner.
	tl, err := lc.native.TryLock(ctx, &tenurev1.TryLockRequest{Name: name, Lease: int64(grantLease(t, ctx, lc.cli, 30))})
	if err != nil || tl.Acquired || tl.OwnerToken != first.Token || tl.QueueLength != n {
		t.Fatalf("TryLock on a held lock: %+v %v", tl, err)
	}
	d, err := lc.native.Describe(ctx, &tenurev1.DescribeRequest{Name: name})
	if err != nil || d.Token != first.Token || len(d.Waiters) != n-1 || d.LeaseTtlRemainingMs <= 0 {
		t.Fatalf("Describe: %+v %v", d, err)
	}
	prevToken, prevLease := first.Token, leases[0]
	for i := 1; i < n; i++ {
		un, err := lc.native.Unlock(ctx, &tenurev1.UnlockRequest{Name: name, Lease: prevLease, Token: prevToken})
		if err != nil || !un.Released {
			t.Fatalf("unlock %d: %+v %v", i, un, err)
		}
		r := <-results[i]
		if r.err != nil {
			t.Fatalf("waiter %d: %v", i, r.err)
		}
		if r.token <= prevToken {
			t.Fatalf("token %d after %d", r.token, prevToken)
		}
		for j := i + 1; j < n; j++ {
			select {
			case r := <-results[j]:
				t.Fatalf("waiter %d granted out of order (%+v) after release %d", j, r, i)
			default:
			}
		}
		fc, err := lc.native.CheckFence(ctx, &tenurev1.CheckFenceRequest{Name: name, Token: prevToken})
		if err != nil || fc.Current || fc.CurrentToken != r.token {
			t.Fatalf("CheckFence of the previous owner: %+v %v", fc, err)
		}
		fc, err = lc.native.CheckFence(ctx, &tenurev1.CheckFenceRequest{Name: name, Token: r.token})
		if err != nil || !fc.Current {
			t.Fatalf("CheckFence of the owner: %+v %v", fc, err)
		}
		prevToken, prevLease = r.token, leases[i]
	}
	// A stale unlock does nothing.
	un, err := lc.native.Unlock(ctx, &tenurev1.UnlockRequest{Name: name, Lease: prevLease, Token: prevToken - 1})
	if err != nil || un.Released {
		t.Fatalf("stale unlock: %+v %v", un, err)
	}
	// A waiter whose deadline passes leaves the queue.
	_, err = lc.native.Lock(ctx, &tenurev1.LockRequest{Name: name, Lease: int64(grantLease(t, ctx, lc.cli, 30)), TimeoutMs: 300})
	wantCode(t, err, codes.Aborted, "Lock past its timeout")
	waitQueueLength(t, ctx, lc, name, 1, "timed-out waiter left the queue")
	// Validation errors.
	_, err = lc.native.Lock(ctx, &tenurev1.LockRequest{Name: nil, Lease: prevLease})
	wantCode(t, err, codes.InvalidArgument, "empty name")
	_, err = lc.native.SetLockDelay(ctx, &tenurev1.SetLockDelayRequest{Name: name, DelayMs: 61_000})
	wantCode(t, err, codes.InvalidArgument, "lock-delay over 60s")
	_, err = lc.native.Lock(ctx, &tenurev1.LockRequest{Name: name, Lease: 12345})
	wantCode(t, err, codes.NotFound, "unknown lease")
	// Every waiter's acquire found the lock held, so the leader held it back
	// to share the next proposal's raft round (server/raftnode/defer.go).
	if got := scrape(t, c.DirectEndpoint(0)+"/metrics")["tenure_raft_deferred_proposals_total"]; got < n-1 {
		t.Fatalf("tenure_raft_deferred_proposals_total = %v, want at least the %d queued acquires", got, n-1)
	}
}

// TestLockHandoffOnExpiryRevokeAndDelay: the next waiter is granted when the
// owner's lease is revoked or expires; a lock-delay holds the grant back
// only after an expiry; ownership streams report why a lock was lost.
func TestLockHandoffOnExpiryRevokeAndDelay(t *testing.T) {
	_, lc := startLocks(t, 1)
	ctx := testCtx(t, 90*time.Second)

	for _, how := range []string{"revoke", "expire", "expire-with-delay", "unlock-with-delay"} {
		t.Run(how, func(t *testing.T) {
			name := []byte("handoff/" + how)
			delay := int64(0)
			if how == "expire-with-delay" || how == "unlock-with-delay" {
				delay = 1500
				if _, err := lc.native.SetLockDelay(ctx, &tenurev1.SetLockDelayRequest{Name: name, DelayMs: delay}); err != nil {
					t.Fatal(err)
				}
			}
			ttl := int64(30)
			if how != "revoke" && how != "unlock-with-delay" {
				ttl = 1
			}
			owner := int64(grantLease(t, ctx, lc.cli, ttl))
			waiter := int64(grantLease(t, ctx, lc.cli, 30))
			held, err := lc.native.Lock(ctx, &tenurev1.LockRequest{Name: name, Lease: owner})
			if err != nil {
				t.Fatal(err)
			}
			ws, err := lc.native.WatchOwnership(ctx, &tenurev1.WatchOwnershipRequest{Name: name, Token: held.Token})
			if err != nil {
				t.Fatal(err)
			}
			if ev, err := ws.Recv(); err != nil || ev.Type != tenurev1.OwnershipEvent_GRANTED {
				t.Fatalf("first ownership event: %+v %v", ev, err)
			}
			got := make(chan lockResult, 1)
			go func() {
				r, err := lc.native.Lock(ctx, &tenurev1.LockRequest{Name: name, Lease: waiter})
				if err != nil {
					got <- lockResult{err: err}
					return
				}
				got <- lockResult{token: r.Token, at: time.Now()}
			}()
			eventually(t, 10*time.Second, "waiter enqueued", func() error {
				d, err := lc.native.Describe(ctx, &tenurev1.DescribeRequest{Name: name})
				if err == nil && d.QueueLength != 2 {
					err = fmt.Errorf("queue length %d", d.QueueLength)
				}
				return err
			})
			wantReason := tenurev1.OwnershipEvent_LEASE_EXPIRED
			switch how {
			case "revoke":
				wantReason = tenurev1.OwnershipEvent_LEASE_REVOKED
				if _, err := lc.cli.Revoke(ctx, clientv3.LeaseID(owner)); err != nil {
					t.Fatal(err)
				}
			case "unlock-with-delay":
				wantReason = tenurev1.OwnershipEvent_RELEASED
				if _, err := lc.native.Unlock(ctx, &tenurev1.UnlockRequest{Name: name, Lease: owner, Token: held.Token}); err != nil {
					t.Fatal(err)
				}
			}
			ev, err := ws.Recv()
			if err != nil || ev.Type != tenurev1.OwnershipEvent_LOST || ev.Reason != wantReason || ev.Token != held.Token {
				t.Fatalf("lost event: %+v %v (want reason %v)", ev, err, wantReason)
			}
			if how == "expire-with-delay" {
				// The owner is gone, the waiter is not granted: the delay runs.
				d, err := lc.native.Describe(ctx, &tenurev1.DescribeRequest{Name: name})
				if err != nil {
					t.Fatal(err)
				}
				select {
				case r := <-got:
					t.Fatalf("granted during the lock-delay: %+v (describe %+v)", r, d)
				default:
				}
				if !d.LockDelayRunning || d.Token != 0 || d.LockDelayRemainingMs <= 0 || d.LockDelayRemainingMs > delay {
					t.Fatalf("describe during the lock-delay: %+v", d)
				}
			} else if how == "unlock-with-delay" {
				d, err := lc.native.Describe(ctx, &tenurev1.DescribeRequest{Name: name})
				if err != nil || d.LockDelayRunning {
					t.Fatalf("an explicit unlock started a lock-delay: %+v %v", d, err)
				}
			}
			select {
			case r := <-got:
				if r.err != nil || r.token <= held.Token {
					t.Fatalf("waiter after %s: %+v", how, r)
				}
				fc, err := lc.native.CheckFence(ctx, &tenurev1.CheckFenceRequest{Name: name, Token: held.Token})
				if err != nil || fc.Current || fc.CurrentToken != r.token {
					t.Fatalf("old token after %s: %+v %v", how, fc, err)
				}
			case <-ctx.Done():
				t.Fatalf("waiter never granted after %s", how)
			}
		})
	}
}

// TestLockInteroperability: etcdctl lock, clientv3 Mutex, v3lock and the
// native API queue on one lock name, in request order.
func TestLockInteroperability(t *testing.T) {
	c, lc := startLocks(t, 1)
	ctx := testCtx(t, 90*time.Second)
	name := "interop"

	// 1. clientv3 Mutex (plain KV) takes it.
	s1, err := concurrency.NewSession(lc.cli, concurrency.WithTTL(30))
	if err != nil {
		t.Fatal(err)
	}
	defer s1.Close()
	mu := concurrency.NewMutex(s1, name)
	if err := mu.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	queued := func(n int64) {
		t.Helper()
		eventually(t, 20*time.Second, fmt.Sprintf("%d in the queue", n), func() error {
			d, err := lc.native.Describe(ctx, &tenurev1.DescribeRequest{Name: []byte(name)})
			if err == nil && d.QueueLength != n {
				err = fmt.Errorf("queue length %d", d.QueueLength)
			}
			return err
		})
	}
	order := make(chan string, 4)
	// 2. v3lock waits.
	l2 := int64(grantLease(t, ctx, lc.cli, 30))
	var v3key []byte
	go func() {
		r, err := lc.lock.Lock(ctx, &v3lockpb.LockRequest{Name: []byte(name), Lease: l2})
		if err != nil {
			order <- "v3lock error: " + err.Error()
			return
		}
		v3key = r.Key
		order <- "v3lock"
	}()
	queued(2)
	// 3. the native API waits.
	l3 := int64(grantLease(t, ctx, lc.cli, 30))
	var nativeTok int64
	go func() {
		r, err := lc.native.Lock(ctx, &tenurev1.LockRequest{Name: []byte(name), Lease: l3})
		if err != nil {
			order <- "native error: " + err.Error()
			return
		}
		nativeTok = r.Token
		order <- "native"
	}()
	queued(3)
	// 4. etcdctl lock waits (it runs clientv3's Mutex over plain KV).
	cmd := c.EtcdctlCmd(ctx, "lock", name)
	out := &logbuf.Buffer{}
	cmd.Stdout = out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	queued(4)

	expect := func(want string) {
		t.Helper()
		select {
		case got := <-order:
			if got != want {
				t.Fatalf("granted %q, want %q", got, want)
			}
		case <-ctx.Done():
			t.Fatalf("%s never granted", want)
		}
	}
	// The Mutex owner's token is what the lock service reports.
	d, err := lc.native.Describe(ctx, &tenurev1.DescribeRequest{Name: []byte(name)})
	if err != nil || d.Token != mu.Header().Revision || string(d.OwnerKey) != mu.Key() {
		t.Fatalf("describe of a Mutex-held lock: %+v %v (mutex key %s rev %d)", d, err, mu.Key(), mu.Header().Revision)
	}
	if err := mu.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	expect("v3lock")
	if _, err := lc.lock.Unlock(ctx, &v3lockpb.UnlockRequest{Key: v3key}); err != nil {
		t.Fatal(err)
	}
	expect("native")
	if _, err := lc.native.Unlock(ctx, &tenurev1.UnlockRequest{Name: []byte(name), Lease: l3, Token: nativeTok}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "etcdctl lock acquired", func() error {
		if out.String() == "" {
			return errors.New("no output yet")
		}
		return nil
	})
	d, err = lc.native.Describe(ctx, &tenurev1.DescribeRequest{Name: []byte(name)})
	if err != nil || d.QueueLength != 1 || d.Token <= nativeTok {
		t.Fatalf("etcdctl owner: %+v %v", d, err)
	}
}

// TestElectionServices: Campaign/Leader/Proclaim/Observe/Resign through
// the v3election service.
func TestElectionServices(t *testing.T) {
	_, lc := startLocks(t, 1)
	ctx := testCtx(t, 60*time.Second)
	name := []byte("elect")
	_, err := lc.election.Leader(ctx, &v3electionpb.LeaderRequest{Name: name})
	if status.Code(err) != codes.NotFound {
		t.Fatalf("Leader with no leader: %v", err)
	}
	la := int64(grantLease(t, ctx, lc.cli, 30))
	lb := int64(grantLease(t, ctx, lc.cli, 30))
	a, err := lc.election.Campaign(ctx, &v3electionpb.CampaignRequest{Name: name, Lease: la, Value: []byte("a")})
	if err != nil {
		t.Fatal(err)
	}
	obs, err := lc.election.Observe(ctx, &v3electionpb.LeaderRequest{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	next := func(want string) {
		t.Helper()
		r, err := obs.Recv()
		if err != nil || string(r.Kv.Value) != want {
			t.Fatalf("observe: %v %v, want %q", r, err, want)
		}
	}
	next("a")
	if _, err := lc.election.Proclaim(ctx, &v3electionpb.ProclaimRequest{Leader: a.Leader, Value: []byte("a2")}); err != nil {
		t.Fatal(err)
	}
	next("a2")
	bDone := make(chan *v3electionpb.CampaignResponse, 1)
	go func() {
		r, err := lc.election.Campaign(ctx, &v3electionpb.CampaignRequest{Name: name, Lease: lb, Value: []byte("b")})
		if err == nil {
			bDone <- r
		}
	}()
	eventually(t, 10*time.Second, "b campaigning", func() error {
		d, err := lc.native.Describe(ctx, &tenurev1.DescribeRequest{Name: name})
		if err == nil && d.QueueLength != 2 {
			err = fmt.Errorf("queue length %d", d.QueueLength)
		}
		return err
	})
	if _, err := lc.election.Resign(ctx, &v3electionpb.ResignRequest{Leader: a.Leader}); err != nil {
		t.Fatal(err)
	}
	b := <-bDone
	next("b")
	if b.Leader.Rev <= a.Leader.Rev {
		t.Fatalf("leader revs %d then %d", a.Leader.Rev, b.Leader.Rev)
	}
	_, err = lc.election.Proclaim(ctx, &v3electionpb.ProclaimRequest{Leader: a.Leader, Value: []byte("zombie")})
	wantCode(t, err, codes.FailedPrecondition, "Proclaim by a resigned leader")
	// Resign deletes the leader key only at the revision it names (as
	// etcd's does): another revision of b's key answers and resigns nothing.
	stale := &v3electionpb.LeaderKey{Name: b.Leader.Name, Key: b.Leader.Key, Rev: b.Leader.Rev - 1, Lease: b.Leader.Lease}
	if _, err := lc.election.Resign(ctx, &v3electionpb.ResignRequest{Leader: stale}); err != nil {
		t.Fatalf("Resign at another revision: %v", err)
	}
	l, err := lc.election.Leader(ctx, &v3electionpb.LeaderRequest{Name: name})
	if err != nil || string(l.Kv.Value) != "b" {
		t.Fatalf("Leader: %v %v", l, err)
	}
}

// TestV3LockUnlockDeletesAnyKey: etcd's v3lock Unlock deletes the key it is
// given, whatever it is. A key Lock handed out goes through a lock entry of
// its own (and hands the lock off); any other key through DeleteRange. Both
// answer with the revision of the delete, or the current one when the key
// is already gone.
func TestV3LockUnlockDeletesAnyKey(t *testing.T) {
	c, lc := startLocks(t, 1)
	ctx := testCtx(t, 30*time.Second)
	lease := grantLease(t, ctx, lc.cli, 60)
	rev := func() int64 {
		t.Helper()
		r, err := lc.cli.Get(ctx, "any")
		if err != nil {
			t.Fatal(err)
		}
		return r.Header.Revision
	}
	gone := func(key string) {
		t.Helper()
		if r, err := lc.cli.Get(ctx, key); err != nil || len(r.Kvs) != 0 {
			t.Fatalf("%s after Unlock: %v %v", key, r, err)
		}
	}

	// Lock ops are client proposals like any other: counted in the metrics.
	metrics := c.Endpoint(0) + "/metrics"
	const committed = "tenure_server_proposals_committed_total"
	before := scrape(t, metrics)[committed]
	held, err := lc.lock.Lock(ctx, &v3lockpb.LockRequest{Name: []byte("u"), Lease: int64(lease)})
	if err != nil {
		t.Fatal(err)
	}
	lease2 := grantLease(t, ctx, lc.cli, 60)
	next := make(chan *v3lockpb.LockResponse, 1)
	go func() {
		r, err := lc.lock.Lock(ctx, &v3lockpb.LockRequest{Name: []byte("u"), Lease: int64(lease2)})
		if err != nil {
			t.Error(err)
		}
		next <- r
	}()
	waitQueueLength(t, ctx, lc, []byte("u"), 2, "second v3lock waiter queued")
	un, err := lc.lock.Unlock(ctx, &v3lockpb.UnlockRequest{Key: held.Key})
	if err != nil {
		t.Fatal(err)
	}
	if un.Header.Revision != rev() {
		t.Errorf("Unlock of the owner key answered revision %d, the store is at %d", un.Header.Revision, rev())
	}
	gone(string(held.Key))
	select {
	case r := <-next:
		if r == nil || r.Header.Revision != un.Header.Revision {
			t.Fatalf("next owner %+v, want the grant at the unlock's revision %d", r, un.Header.Revision)
		}
	case <-ctx.Done():
		t.Fatal("the waiter was not granted after Unlock")
	}
	again, err := lc.lock.Unlock(ctx, &v3lockpb.UnlockRequest{Key: held.Key})
	if err != nil || again.Header.Revision != un.Header.Revision {
		t.Fatalf("Unlock of a deleted key: %v %v, want success at revision %d", again, err, un.Header.Revision)
	}
	// two Locks, two Unlocks and the second lease's grant. The waiter's
	// Lock is answered by its grant, which the apply publishes before it
	// hands the acquire's own result to the proposal that counts it
	// (Applier.Committed), so the counter may move just after the call
	// returned: wait for it.
	eventually(t, 5*time.Second, committed+" counting 2 Locks, 2 Unlocks and a lease grant", func() error {
		if got := scrape(t, metrics)[committed] - before; got < 5 {
			return fmt.Errorf("grew by %v, want at least 5", got)
		}
		return nil
	})

	for _, key := range []string{"plain", "u/0001", "u/XYZ"} {
		if _, err := lc.cli.Put(ctx, key, "v"); err != nil {
			t.Fatal(err)
		}
		before := rev()
		r, err := lc.lock.Unlock(ctx, &v3lockpb.UnlockRequest{Key: []byte(key)})
		if err != nil {
			t.Fatalf("Unlock %q: %v", key, err)
		}
		if r.Header.Revision != before+1 {
			t.Errorf("Unlock %q answered revision %d, want %d", key, r.Header.Revision, before+1)
		}
		gone(key)
	}
}
