package e2e

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/tenure-io/tenure/test/cluster"
)

func TestClientKV(t *testing.T) {
	c := start(t, clusterOpts())
	ctx := testCtx(t, 60*time.Second)
	cli := c.ClientAll()

	// put/get/delete and revisions.
	p1, err := cli.Put(ctx, "/kv/a", "1")
	if err != nil {
		t.Fatal(err)
	}
	p2, err := cli.Put(ctx, "/kv/b", "2")
	if err != nil {
		t.Fatal(err)
	}
	if p2.Header.Revision != p1.Header.Revision+1 {
		t.Errorf("revisions %d then %d, want consecutive", p1.Header.Revision, p2.Header.Revision)
	}
	p3, err := cli.Put(ctx, "/kv/a", "1b", clientv3.WithPrevKV())
	if err != nil {
		t.Fatal(err)
	}
	if p3.PrevKv == nil || string(p3.PrevKv.Value) != "1" {
		t.Errorf("prev kv = %v, want 1", p3.PrevKv)
	}
	g, err := cli.Get(ctx, "/kv/a")
	if err != nil {
		t.Fatal(err)
	}
	kv := g.Kvs[0]
	if string(kv.Value) != "1b" || kv.CreateRevision != p1.Header.Revision || kv.ModRevision != p3.Header.Revision || kv.Version != 2 {
		t.Errorf("get /kv/a = %+v; want value 1b create %d mod %d version 2", kv, p1.Header.Revision, p3.Header.Revision)
	}
	old, err := cli.Get(ctx, "/kv/a", clientv3.WithRev(p1.Header.Revision))
	if err != nil || string(old.Kvs[0].Value) != "1" {
		t.Errorf("get at revision %d = %v %v, want 1", p1.Header.Revision, old, err)
	}
	cli.Put(ctx, "/kv/c", "3")
	cli.Put(ctx, "/kvx", "outside")
	pre, err := cli.Get(ctx, "/kv/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if pre.Count != 3 || string(pre.Kvs[0].Key) != "/kv/a" || string(pre.Kvs[2].Key) != "/kv/c" {
		t.Errorf("prefix get: count %d kvs %v", pre.Count, pre.Kvs)
	}
	cnt, err := cli.Get(ctx, "/kv/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || cnt.Count != 3 || len(cnt.Kvs) != 0 {
		t.Errorf("count only: %v %v", cnt, err)
	}
	lim, err := cli.Get(ctx, "/kv/", clientv3.WithPrefix(), clientv3.WithLimit(2))
	if err != nil || len(lim.Kvs) != 2 || !lim.More {
		t.Errorf("limit 2: %v %v", lim, err)
	}
	d, err := cli.Delete(ctx, "/kv/b")
	if err != nil || d.Deleted != 1 {
		t.Fatalf("delete: %v %v", d, err)
	}
	if g, _ := cli.Get(ctx, "/kv/b"); len(g.Kvs) != 0 {
		t.Errorf("deleted key still present: %v", g.Kvs)
	}
	dp, err := cli.Delete(ctx, "/kv/", clientv3.WithPrefix())
	if err != nil || dp.Deleted != 2 {
		t.Errorf("prefix delete: %v %v", dp, err)
	}

	// txn CAS on value.
	cli.Put(ctx, "/cas", "v1")
	tr, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.Value("/cas"), "=", "v1")).
		Then(clientv3.OpPut("/cas", "v2")).Else(clientv3.OpGet("/cas")).Commit()
	if err != nil || !tr.Succeeded {
		t.Fatalf("cas v1->v2: %v %v", tr, err)
	}
	tr, err = cli.Txn(ctx).If(clientv3.Compare(clientv3.Value("/cas"), "=", "v1")).
		Then(clientv3.OpPut("/cas", "v3")).Else(clientv3.OpGet("/cas")).Commit()
	if err != nil || tr.Succeeded {
		t.Fatalf("stale cas succeeded: %v %v", tr, err)
	}
	if got := string(tr.Responses[0].GetResponseRange().Kvs[0].Value); got != "v2" {
		t.Errorf("else branch read %q, want v2", got)
	}
	tr, err = cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision("/new"), "=", 0)).
		Then(clientv3.OpPut("/new", "x")).Commit()
	if err != nil || !tr.Succeeded {
		t.Errorf("create-if-absent: %v %v", tr, err)
	}

	// compaction and ErrCompacted.
	w1, _ := cli.Put(ctx, "/cmp", "a")
	w2, _ := cli.Put(ctx, "/cmp", "b")
	if _, err := cli.Compact(ctx, w2.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	_, err = cli.Get(ctx, "/cmp", clientv3.WithRev(w1.Header.Revision))
	if !errors.Is(err, rpctypes.ErrCompacted) {
		t.Errorf("get at compacted revision: %v, want ErrCompacted", err)
	}
	if g, err := cli.Get(ctx, "/cmp", clientv3.WithRev(w2.Header.Revision)); err != nil || string(g.Kvs[0].Value) != "b" {
		t.Errorf("get at compaction revision: %v %v", g, err)
	}
	// every member has the same view.
	for i := range c.Members {
		g, err := c.Client(i).Get(ctx, "/cmp")
		if err != nil || string(g.Kvs[0].Value) != "b" || g.Kvs[0].ModRevision != w2.Header.Revision {
			t.Errorf("member %d: %v %v", i, g, err)
		}
	}
}

func clusterOpts() cluster.Options { return cluster.Options{} }

func TestClientWatch(t *testing.T) {
	c := start(t, clusterOpts())
	ctx := testCtx(t, 60*time.Second)
	cli := c.ClientAll()
	first, _ := cli.Put(ctx, "/before", "x")

	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	wch := c.Client(1).Watch(wctx, "/w/", clientv3.WithPrefix())
	// the watch is registered once its creation is acknowledged; make sure by
	// waiting for a progress notify round trip.
	if err := c.Client(1).RequestProgress(wctx); err != nil {
		t.Fatal(err)
	}
	type ev struct {
		typ mvccpb.Event_EventType
		key string
		val string
		rev int64
	}
	var want []ev
	for i := 0; i < 5; i++ {
		r, err := cli.Put(ctx, fmt.Sprintf("/w/%d", i), fmt.Sprint(i))
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, ev{mvccpb.PUT, fmt.Sprintf("/w/%d", i), fmt.Sprint(i), r.Header.Revision})
	}
	cli.Put(ctx, "/other", "not watched")
	r, err := cli.Delete(ctx, "/w/1")
	if err != nil {
		t.Fatal(err)
	}
	want = append(want, ev{mvccpb.DELETE, "/w/1", "", r.Header.Revision})
	collect := func(ch clientv3.WatchChan, n int) []ev {
		var got []ev
		timeout := time.After(10 * time.Second)
		for len(got) < n {
			select {
			case resp, ok := <-ch:
				if !ok {
					t.Fatalf("watch closed after %d events", len(got))
				}
				if err := resp.Err(); err != nil {
					t.Fatalf("watch error: %v", err)
				}
				for _, e := range resp.Events {
					got = append(got, ev{e.Type, string(e.Kv.Key), string(e.Kv.Value), e.Kv.ModRevision})
				}
			case <-timeout:
				t.Fatalf("got %d of %d events: %v", len(got), n, got)
			}
		}
		return got
	}
	got := collect(wch, len(want))
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("live watch events:\n got %v\nwant %v", got, want)
	}

	// from a past revision: replays the same events.
	rctx, rcancel := context.WithCancel(ctx)
	replay := collect(c.Client(2).Watch(rctx, "/w/", clientv3.WithPrefix(), clientv3.WithRev(first.Header.Revision)), len(want))
	rcancel()
	if fmt.Sprint(replay) != fmt.Sprint(want) {
		t.Errorf("replayed watch events:\n got %v\nwant %v", replay, want)
	}

	// from a compacted revision: canceled with CompactRevision. The compaction
	// goes through the member the watch will use: Compact returns once the
	// handling member has applied it, and a watch is not linearizable, so a
	// watch on a member still behind would (as on etcd) replay history.
	if _, err := c.Client(0).Compact(ctx, want[3].rev); err != nil {
		t.Fatal(err)
	}
	cctx, ccancel := context.WithCancel(ctx)
	defer ccancel()
	cw := c.Client(0).Watch(cctx, "/w/", clientv3.WithPrefix(), clientv3.WithRev(first.Header.Revision))
	select {
	case resp := <-cw:
		if !resp.Canceled || resp.CompactRevision != want[3].rev || !errors.Is(resp.Err(), rpctypes.ErrCompacted) {
			t.Errorf("watch from compacted revision: canceled=%v compactRevision=%d (want %d) err=%v",
				resp.Canceled, resp.CompactRevision, want[3].rev, resp.Err())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("watch from a compacted revision was not canceled")
	}
}

func TestClientMutexAndElection(t *testing.T) {
	c := start(t, clusterOpts())
	ctx := testCtx(t, 60*time.Second)
	s1, err := concurrency.NewSession(c.Client(0), concurrency.WithTTL(5))
	if err != nil {
		t.Fatal(err)
	}
	defer s1.Close()
	s2, err := concurrency.NewSession(c.Client(1), concurrency.WithTTL(5))
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()

	m1 := concurrency.NewMutex(s1, "/lock/a")
	m2 := concurrency.NewMutex(s2, "/lock/a")
	if err := m1.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m2.TryLock(ctx); !errors.Is(err, concurrency.ErrLocked) {
		t.Fatalf("TryLock while held: %v, want ErrLocked", err)
	}
	acquired := make(chan error, 1)
	go func() { acquired <- m2.Lock(ctx) }()
	select {
	case err := <-acquired:
		t.Fatalf("second session acquired a held lock: %v", err)
	case <-time.After(300 * time.Millisecond): // it must still be waiting
	}
	own, err := c.Client(2).Txn(ctx).If(m1.IsOwner()).Commit()
	if err != nil || !own.Succeeded {
		t.Fatalf("IsOwner of holder: %v %v", own, err)
	}
	if err := m1.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-acquired:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("waiter did not acquire the lock after unlock")
	}
	own, err = c.Client(2).Txn(ctx).If(m1.IsOwner()).Commit()
	if err != nil || own.Succeeded {
		t.Errorf("IsOwner of released holder: %v %v", own, err)
	}
	own, err = c.Client(2).Txn(ctx).If(m2.IsOwner()).Commit()
	if err != nil || !own.Succeeded {
		t.Errorf("IsOwner of new holder: %v %v", own, err)
	}
	if m2.Header().Revision <= 0 {
		t.Errorf("lock acquisition header revision %d", m2.Header().Revision)
	}
	m2.Unlock(ctx)

	// Election.
	e1 := concurrency.NewElection(s1, "/elect/x")
	e2 := concurrency.NewElection(s2, "/elect/x")
	octx, ocancel := context.WithCancel(ctx)
	defer ocancel()
	obs := concurrency.NewElection(s2, "/elect/x").Observe(octx)
	if err := e1.Campaign(ctx, "one"); err != nil {
		t.Fatal(err)
	}
	lr, err := e2.Leader(ctx)
	if err != nil || string(lr.Kvs[0].Value) != "one" {
		t.Fatalf("leader: %v %v", lr, err)
	}
	waitObserved := func(want string) {
		t.Helper()
		timeout := time.After(10 * time.Second)
		for {
			select {
			case r := <-obs:
				if len(r.Kvs) > 0 && string(r.Kvs[0].Value) == want {
					return
				}
			case <-timeout:
				t.Fatalf("observer never saw leader %q", want)
			}
		}
	}
	waitObserved("one")
	won := make(chan error, 1)
	go func() { won <- e2.Campaign(ctx, "two") }()
	select {
	case err := <-won:
		t.Fatalf("second candidate won while the first leads: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	if err := e1.Proclaim(ctx, "one-again"); err != nil {
		t.Fatal(err)
	}
	waitObserved("one-again")
	if err := e1.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-won:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("second candidate not elected after resign")
	}
	waitObserved("two")
	lr, err = e1.Leader(ctx)
	if err != nil || string(lr.Kvs[0].Value) != "two" {
		t.Errorf("leader after resign: %v %v", lr, err)
	}
}
