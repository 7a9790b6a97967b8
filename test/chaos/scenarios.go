package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3lock/v3lockpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tenure-io/tenure/api/tenurev1"
	"github.com/tenure-io/tenure/server/failpoint"
)

// Regression scenarios for etcd bugs a new system could repeat. Each runs
// on the healed cluster after the fault phase, with its own keys.
func runScenarios(r *run) {
	for _, s := range []struct {
		name string
		f    func(*run)
	}{
		{"9395-lease-ttl-reset-on-leader-change", scenario9395},
		{"11496-watch-from-revision-0", scenario11496},
		{"13766-applied-index-atomic", scenario13766},
		{"17780-revision-after-compaction-crash", scenario17780},
		{"11456-lock-granted-to-expired-waiter", scenario11456},
	} {
		r.logf("scenario %s", s.name)
		before := len(r.anomalies)
		s.f(r)
		r.scenarioRan(s.name, len(r.anomalies) == before)
	}
}

func (r *run) scenarioRan(name string, ok bool) {
	r.logf("scenario %s: %s", name, map[bool]string{true: "ok", false: "FAILED"}[ok])
}

func (r *run) ready(d time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if err := r.c.WaitReady(ctx); err != nil {
		r.anomaly("cluster not ready: %v", err)
	}
}

// scenario9395: a lease with no keepalives while the leader is killed three
// times must expire no earlier than TTL after its grant was sent and no
// later than TTL + checkpoint interval (1s) + the leaderless time + 1s
// (etcd 9395: a new leader resets leases to their full TTL).
func scenario9395(r *run) {
	const ttl = 6
	r.ready(60 * time.Second)
	cli := r.c.NewClient(r.c.Endpoints()...)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	send := r.mono()
	lr, err := cli.Grant(ctx, ttl)
	if err != nil {
		r.anomaly("9395: grant: %v", err)
		return
	}
	key := "/s9395/key"
	if _, err := cli.Put(ctx, key, "x", clientv3.WithLease(lr.ID)); err != nil {
		r.anomaly("9395: put: %v", err)
		return
	}
	var leaderless time.Duration
	for k := 0; k < 3; k++ {
		l, err := r.c.WaitLeader(ctx)
		if err != nil {
			r.anomaly("9395: no leader: %v", err)
			return
		}
		t0 := time.Now()
		r.c.Kill(l)
		r.fault("kill")
		if _, err := r.c.WaitLeader(ctx, l); err != nil {
			r.anomaly("9395: no new leader after killing %d: %v", l, err)
			return
		}
		leaderless += time.Since(t0)
		r.c.RestartWithEnv(l, nil)
		r.fault("restart")
	}
	var gone time.Duration
	for {
		gctx, gcancel := context.WithTimeout(ctx, time.Second)
		resp, err := cli.Get(gctx, key)
		gcancel()
		ret := r.mono()
		if err == nil && len(resp.Kvs) == 0 {
			gone = ret
			break
		}
		if ctx.Err() != nil {
			r.anomaly("9395: lease %x (TTL %ds) not revoked within 90s", lr.ID, ttl)
			return
		}
		sleep(50 * time.Millisecond)
	}
	after := gone - send
	bound := ttl*time.Second + time.Second + leaderless + time.Second
	r.logf("9395: lease TTL %ds gone %v after grant was sent; leaderless %v over 3 leader kills; bound %v", ttl, after.Round(time.Millisecond), leaderless.Round(time.Millisecond), bound.Round(time.Millisecond))
	if after < ttl*time.Second {
		// the grant was committed after it was sent, so this is early for sure
		r.anomaly("9395: lease revoked early: gone %v after its grant was sent, TTL %ds", after, ttl)
	}
	if after > bound {
		r.anomaly("9395: lease expired %v after grant, later than TTL + checkpoint + leaderless + 1s = %v (lease TTL reset on leader change?)", after.Round(time.Millisecond), bound.Round(time.Millisecond))
	}
	r.ready(60 * time.Second)
}

// scenario11496: a watch with start_revision 0 means "from now": with writes
// racing the watch's creation, no event at or before the created response's
// revision may be delivered, and every write after it must be.
func scenario11496(r *run) {
	r.ready(60 * time.Second)
	cli := r.c.NewClient(r.c.Endpoint(0))
	wcli := r.c.NewClient(r.c.Endpoints()...)
	for round := 0; round < 10; round++ {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		prefix := fmt.Sprintf("/s11496/%d/", round)
		type put struct {
			key string
			rev int64
		}
		var mu sync.Mutex
		var puts []put
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				k := fmt.Sprintf("%s%04d", prefix, n)
				resp, err := wcli.Put(ctx, k, "v")
				r.op()
				if err == nil {
					mu.Lock()
					puts = append(puts, put{k, resp.Header.Revision})
					mu.Unlock()
				}
				if n > 400 {
					return
				}
			}
		}()
		// let some writes land before the watch
		for {
			mu.Lock()
			n := len(puts)
			mu.Unlock()
			if n >= 3 || ctx.Err() != nil {
				break
			}
			sleep(5 * time.Millisecond)
		}
		wch := cli.Watch(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCreatedNotify())
		created := <-wch
		if created.Err() != nil || !created.Created {
			r.anomaly("11496: watch not created: %v", created.Err())
			close(stop)
			wg.Wait()
			cancel()
			return
		}
		h := created.Header.Revision
		// more writes after the creation
		for {
			mu.Lock()
			n := 0
			if len(puts) > 0 && puts[len(puts)-1].rev > h {
				n = len(puts)
			}
			mu.Unlock()
			if n > 0 || ctx.Err() != nil {
				break
			}
			sleep(5 * time.Millisecond)
		}
		sleep(20 * time.Millisecond)
		close(stop)
		wg.Wait()
		mu.Lock()
		want := map[string]int64{}
		var last int64
		for _, p := range puts {
			if p.rev > h {
				want[p.key] = p.rev
			}
			last = max(last, p.rev)
		}
		mu.Unlock()
		got := map[string]int64{}
		for last > 0 && len(got) < len(want) {
			var resp clientv3.WatchResponse
			var ok bool
			select {
			case resp, ok = <-wch:
			case <-ctx.Done():
			}
			if !ok || resp.Err() != nil {
				break
			}
			for _, e := range resp.Events {
				if e.Kv.ModRevision <= h {
					r.anomaly("11496: watch from revision 0 created at %d delivered an older event %s at %d", h, e.Kv.Key, e.Kv.ModRevision)
				}
				got[string(e.Kv.Key)] = e.Kv.ModRevision
			}
		}
		for k, rev := range want {
			if got[k] != rev {
				r.anomaly("11496: watch from revision 0 created at %d missed %s at %d", h, k, rev)
				break
			}
		}
		cancel()
	}
	r.logf("11496: 10 rounds of watch-from-now under concurrent writes")
}

// scenario13766: members crash right before and right after the apply
// batch commits while clients increment a counter by CAS; no entry may be
// applied twice or lost (bounds checked on every member).
func scenario13766(r *run) {
	r.ready(60 * time.Second)
	w := &counter{r: r, key: "/s13766/counter", nclients: 2}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { w.run(ctx); close(done) }()
	for k, name := range []string{failpoint.ApplyBeforeCommit, failpoint.ApplyAfterCommit, failpoint.ApplyBeforeCommit, failpoint.ApplyAfterCommit} {
		lctx, lcancel := context.WithTimeout(context.Background(), 30*time.Second)
		i, err := r.c.WaitLeader(lctx)
		lcancel()
		if err != nil {
			r.anomaly("13766: no leader: %v", err)
			break
		}
		if k%2 == 1 {
			i = (i + 1) % len(r.c.Members) // a follower
		}
		r.c.Kill(i)
		r.fault("failpoint")
		r.c.RestartWithEnv(i, []string{fmt.Sprintf("TENURE_FAILPOINTS=%s=%d*exit", name, 5+k*3)})
		r.fault("restart")
		ectx, ecancel := context.WithTimeout(context.Background(), 15*time.Second)
		code, err := r.c.WaitExit(ectx, i)
		ecancel()
		if err != nil {
			r.logf("13766: %s not reached on member %d within 15s", name, i)
			r.c.Kill(i)
		} else if code != failpoint.ExitCode {
			r.anomaly("13766: member %d armed with %s exited with code %d", i, name, code)
		} else {
			r.logf("13766: member %d crashed at %s", i, name)
		}
		r.c.RestartWithEnv(i, nil)
		r.fault("restart")
		r.ready(60 * time.Second)
	}
	sleep(time.Second)
	cancel()
	<-done
	cctx, ccancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer ccancel()
	checkCounter(cctx, r, "13766", w.key, w.acked, w.unknown)
}

// scenario17780: a member crashes halfway through a physical mvcc
// compaction; after restart its revision is not below what it served
// before, the compaction is not undone, and its data matches the others'.
func scenario17780(r *run) {
	r.ready(60 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	l, err := r.c.WaitLeader(ctx)
	if err != nil {
		r.anomaly("17780: no leader: %v", err)
		return
	}
	for _, i := range []int{(l + 1) % len(r.c.Members), l} {
		r.c.Kill(i)
		r.fault("failpoint")
		r.c.RestartWithEnv(i, []string{failpointEnv(failpoint.MVCCCompactMidway, 1)})
		r.fault("restart")
		if err := r.c.WaitMemberReady(ctx, i); err != nil {
			if r.c.Running(i) || r.c.ExitCode(i) != failpoint.ExitCode {
				r.anomaly("17780: member %d with the failpoint armed did not serve: %v", i, err)
				return
			}
			// it resumed an unfinished compaction at startup and crashed
			// there: that is the scenario too; restart it clean
			r.logf("17780: member %d crashed at %s while resuming a compaction at startup", i, failpoint.MVCCCompactMidway)
			r.c.RestartWithEnv(i, nil)
			r.fault("restart")
			if err := r.c.WaitMemberReady(ctx, i); err != nil {
				r.anomaly("17780: member %d did not serve after crashing in a resumed compaction: %v", i, err)
				return
			}
			continue
		}
		cli := r.c.ClientAll()
		for n := 0; n < 300; n++ {
			if _, err := cli.Put(ctx, fmt.Sprintf("/s17780/k%02d", n%30), fmt.Sprint(n)); err != nil {
				r.anomaly("17780: put: %v", err)
				return
			}
			r.op()
		}
		gr, err := cli.Get(ctx, "/s17780/", clientv3.WithPrefix())
		if err != nil {
			r.anomaly("17780: get: %v", err)
			return
		}
		rev := gr.Header.Revision
		// member i has served rev before it crashes
		before, err := waitSerializable(ctx, r, i, "/s17780/", rev, clientv3.WithPrefix())
		if err != nil {
			r.anomaly("17780: member %d did not reach revision %d: %v", i, rev, err)
			return
		}
		beforeRev := before.Header.Revision
		if _, err := cli.Compact(ctx, rev); err != nil {
			// the member that served it may be the one crashing halfway
			r.logf("17780: compact at %d: %v (outcome unknown)", rev, err)
		}
		ectx, ecancel := context.WithTimeout(ctx, 15*time.Second)
		code, err := r.c.WaitExit(ectx, i)
		ecancel()
		switch {
		case err != nil:
			r.logf("17780: member %d did not reach %s within 15s", i, failpoint.MVCCCompactMidway)
			r.c.Kill(i)
		case code != failpoint.ExitCode:
			r.anomaly("17780: member %d exited with code %d", i, code)
		default:
			r.logf("17780: member %d crashed halfway through compacting at %d", i, rev)
		}
		r.c.RestartWithEnv(i, nil)
		r.fault("restart")
		if err := r.c.WaitMemberReady(ctx, i); err != nil {
			r.anomaly("17780: member %d did not serve after the crash: %v", i, err)
			return
		}
		sctx, scancel := context.WithTimeout(ctx, 2*time.Second)
		after, err := r.c.Client(i).Get(sctx, "/s17780/", clientv3.WithPrefix(), clientv3.WithSerializable())
		scancel()
		if err != nil {
			r.anomaly("17780: serializable read on member %d after restart: %v", i, err)
			return
		}
		if after.Header.Revision < beforeRev {
			r.anomaly("17780: member %d's revision went backwards across a crash during compaction: %d before, %d after", i, beforeRev, after.Header.Revision)
		}
		// the compaction is not undone: an older revision is compacted
		oc, occancel := context.WithTimeout(ctx, 2*time.Second)
		_, err = r.c.Client(i).Get(oc, "/s17780/k00", clientv3.WithRev(rev-1), clientv3.WithSerializable())
		occancel()
		if !errors.Is(err, rpctypes.ErrCompacted) {
			r.anomaly("17780: member %d after restart serves revision %d below the compaction at %d (err %v)", i, rev-1, rev, err)
		}
		// and its data at rev matches the cluster's
		got, err := waitSerializable(ctx, r, i, "/s17780/", rev, clientv3.WithPrefix())
		if err != nil {
			r.anomaly("17780: member %d at revision %d: %v", i, rev, err)
			return
		}
		if !sameKVs(got, gr) {
			r.anomaly("17780: member %d's data at revision %d differs from the cluster's after the crash", i, rev)
		}
		r.logf("17780: member %d: revision %d before, %d after restart", i, beforeRev, after.Header.Revision)
		r.ready(60 * time.Second)
	}
}

func failpointEnv(name string, n int) string {
	return fmt.Sprintf("TENURE_FAILPOINTS=%s=%d*exit", name, n)
}

func sameKVs(a, b *clientv3.GetResponse) bool {
	if len(a.Kvs) != len(b.Kvs) {
		return false
	}
	for i := range a.Kvs {
		x, y := a.Kvs[i], b.Kvs[i]
		if string(x.Key) != string(y.Key) || string(x.Value) != string(y.Value) || x.ModRevision != y.ModRevision || x.CreateRevision != y.CreateRevision || x.Version != y.Version {
			return false
		}
	}
	return true
}

// scenario11456: a waiter whose lease expires while it waits must never be
// told it holds the lock (etcd 11456: etcd's v3lock granted it anyway). For
// each lock service (etcd v3lock, tenure.v1 Locks), once on a quiet cluster
// and once with the leader killed while the waiter waits (the expiry is
// then decided by the new leader): a holder takes the lock with a long
// lease; a waiter, connected to a member that is not killed, waits with a
// short lease nobody keeps alive; once the lease is gone the holder
// unlocks. The waiter must get an error (Aborted is the documented one),
// its key must be gone, no grant to its lease may ever show in Describe,
// and the lock must be free for a newcomer.
func scenario11456(r *run) {
	for round, c := range []struct {
		api  string
		kill bool
	}{{"v3lock", false}, {"native", false}, {"v3lock", true}, {"native", true}} {
		r.ready(60 * time.Second)
		if !s11456Round(r, round, c.api, c.kill) {
			return
		}
	}
	r.logf("11456: 4 rounds (v3lock, native; quiet and with a leader kill): no expired waiter granted")
}

// s11456Round runs one round; false when the round could not be set up.
func s11456Round(r *run, round int, api string, kill bool) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	l, err := r.c.WaitLeader(ctx)
	if err != nil {
		r.anomaly("11456: no leader: %v", err)
		return false
	}
	wm := (l + 1) % len(r.c.Members) // the waiter's member: never killed
	cli := r.c.NewClient(r.c.Endpoints()...)
	wcli := r.c.NewClient(r.c.Endpoint(wm))
	name := fmt.Sprintf("/s11456/%d", round)
	hl, err := cli.Grant(ctx, 60)
	if err != nil {
		r.anomaly("11456: grant: %v", err)
		return false
	}
	wl, err := cli.Grant(ctx, 2) // never kept alive
	if err != nil {
		r.anomaly("11456: grant: %v", err)
		return false
	}
	r.op()
	native := tenurev1.NewLocksClient(cli.ActiveConnection())
	wnative := tenurev1.NewLocksClient(wcli.ActiveConnection())
	v3 := v3lockpb.NewLockClient(cli.ActiveConnection())
	wv3 := v3lockpb.NewLockClient(wcli.ActiveConnection())
	lock := func(ctx context.Context, native tenurev1.LocksClient, v3 v3lockpb.LockClient, lease clientv3.LeaseID) (string, error) {
		if api == "native" {
			resp, err := native.Lock(ctx, &tenurev1.LockRequest{Name: []byte(name), Lease: int64(lease)})
			if err != nil {
				return "", err
			}
			return string(resp.Key), nil
		}
		resp, err := v3.Lock(ctx, &v3lockpb.LockRequest{Name: []byte(name), Lease: int64(lease)})
		if err != nil {
			return "", err
		}
		return string(resp.Key), nil
	}
	hkey, err := lock(ctx, native, v3, hl.ID)
	if err != nil {
		r.anomaly("11456 (%s): holder's lock on a free lock: %v", api, err)
		return false
	}
	type result struct {
		key string
		err error
		at  time.Duration
	}
	got := make(chan result, 1)
	go func() {
		k, err := lock(ctx, wnative, wv3, wl.ID)
		got <- result{k, err, r.mono()}
	}()
	wkey := fmt.Sprintf("%s/%x", name, int64(wl.ID))
	// the waiter is queued once its key exists
	for {
		gr, err := cli.Get(ctx, wkey)
		if err == nil && len(gr.Kvs) > 0 {
			break
		}
		if ctx.Err() != nil {
			r.anomaly("11456 (%s): the waiter's key %s never appeared", api, wkey)
			return false
		}
		select {
		case res := <-got:
			r.anomaly("11456 (%s): the waiter's Lock returned (key %q, err %v) before it was queued", api, res.key, res.err)
			return false
		default:
		}
		sleep(20 * time.Millisecond)
	}
	if kill {
		r.c.Kill(l)
		r.fault("kill")
		if _, err := r.c.WaitLeader(ctx, l); err != nil {
			r.anomaly("11456: no new leader after killing %d: %v", l, err)
			return false
		}
		r.c.RestartWithEnv(l, nil)
		r.fault("restart")
	}
	// the waiter's lease expires
	var early *result
	for {
		ttl, err := cli.TimeToLive(ctx, wl.ID)
		if err == nil && ttl.TTL == -1 {
			break
		}
		if ctx.Err() != nil {
			r.anomaly("11456 (%s): waiter lease %x (TTL 2s) never expired", api, wl.ID)
			return false
		}
		select {
		case res := <-got:
			early = &res
		default:
		}
		sleep(100 * time.Millisecond)
	}
	// the holder releases: a stale grant, if any, would happen now
	uctx, ucancel := context.WithTimeout(ctx, 10*time.Second)
	if api == "native" {
		d, err := native.Describe(uctx, &tenurev1.DescribeRequest{Name: []byte(name)})
		if err == nil {
			_, err = native.Unlock(uctx, &tenurev1.UnlockRequest{Name: []byte(name), Lease: int64(hl.ID), Token: d.Token})
		}
		if err != nil {
			_, err = cli.Delete(uctx, hkey)
		}
	} else {
		_, err = v3.Unlock(uctx, &v3lockpb.UnlockRequest{Key: []byte(hkey)})
	}
	ucancel()
	if err != nil {
		r.anomaly("11456 (%s): holder's unlock: %v", api, err)
	}
	res := early
	if res == nil {
		select {
		case x := <-got:
			res = &x
		case <-time.After(30 * time.Second):
			r.anomaly("11456 (%s): the waiter whose lease expired got no answer within 30s of the holder's unlock", api)
		}
	}
	if res != nil {
		switch {
		case res.err == nil:
			r.anomaly("11456 (%s, leader kill %v): a waiter whose lease %x expired while it waited was told it holds the lock (key %s)", api, kill, wl.ID, res.key)
		case status.Code(res.err) != codes.Aborted:
			r.logf("11456 (%s): the expired waiter got %v (not Aborted)", api, res.err)
		}
	}
	// no grant: the waiter's key is gone, and the lock is free for a newcomer
	if gr, err := cli.Get(ctx, wkey); err != nil || len(gr.Kvs) > 0 {
		r.anomaly("11456 (%s): the expired waiter's key %s still exists (err %v)", api, wkey, err)
	}
	nl, err := cli.Grant(ctx, 10)
	if err == nil {
		nctx, ncancel := context.WithTimeout(ctx, 10*time.Second)
		_, err = lock(nctx, native, v3, nl.ID)
		ncancel()
		if err != nil {
			r.anomaly("11456 (%s): a newcomer could not take the lock after the holder released it and the waiter expired: %v", api, err)
		}
		d, derr := native.Describe(ctx, &tenurev1.DescribeRequest{Name: []byte(name)})
		if derr == nil && d.OwnerLease == int64(wl.ID) {
			r.anomaly("11456 (%s): Describe shows the expired waiter's lease %x as the owner", api, wl.ID)
		}
		cli.Revoke(ctx, nl.ID)
	}
	cli.Revoke(ctx, hl.ID)
	r.op()
	r.logf("11456 (%s, leader kill %v): expired waiter answered %v", api, kill, func() any {
		if res == nil {
			return "nothing"
		}
		return res.err
	}())
	return true
}

// checkMembersAgree compares every member's whole keyspace at one revision
// (serializable reads): a double-applied or lost entry shows as a difference.
func checkMembersAgree(ctx context.Context, r *run) {
	lin, err := r.c.ClientAll().Get(ctx, "/", clientv3.WithPrefix())
	if err != nil {
		r.anomaly("members: linearizable read on a healed cluster: %v", err)
		return
	}
	for i := range r.c.Members {
		got, err := waitSerializable(ctx, r, i, "/", lin.Header.Revision, clientv3.WithPrefix())
		if err != nil {
			r.anomaly("members: member %d did not reach revision %d: %v", i, lin.Header.Revision, err)
			continue
		}
		if !sameKVs(got, lin) {
			r.anomaly("members: member %d's keyspace at revision %d differs from the cluster's", i, lin.Header.Revision)
		}
	}
	r.logf("members: all %d members agree on %d keys at revision %d", len(r.c.Members), len(lin.Kvs), lin.Header.Revision)
}
