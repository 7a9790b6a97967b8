package e2e

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tenure-io/tenure/test/cluster"
)

// writers runs n goroutines putting unique keys under prefix through
// clients to the given members, recording every acknowledged write.
type writers struct {
	mu     sync.Mutex
	acked  map[string]string
	errs   atomic.Int64
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func startWriters(t *testing.T, c *cluster.Cluster, prefix string, n int, members []int) *writers {
	ctx, cancel := context.WithCancel(context.Background())
	w := &writers{acked: map[string]string{}, cancel: cancel}
	for g := 0; g < n; g++ {
		var eps []string
		for _, m := range members {
			eps = append(eps, c.Endpoint(m))
		}
		cli := c.NewClient(eps...)
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				k, v := fmt.Sprintf("%s%d/%06d", prefix, g, i), fmt.Sprint(i)
				actx, acancel := context.WithTimeout(ctx, time.Second)
				_, err := cli.Put(actx, k, v)
				acancel()
				if err != nil {
					w.errs.Add(1)
					continue
				}
				w.mu.Lock()
				w.acked[k] = v
				w.mu.Unlock()
			}
		}()
	}
	return w
}

func (w *writers) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.acked)
}

func (w *writers) stop() map[string]string {
	w.cancel()
	w.wg.Wait()
	return w.acked
}

// waitAcked waits until at least n writes have been acknowledged.
func (w *writers) waitAcked(t *testing.T, n int, d time.Duration) {
	t.Helper()
	eventually(t, d, fmt.Sprintf("%d acknowledged writes", n), func() error {
		if got := w.count(); got < n {
			return fmt.Errorf("%d acknowledged, %d errors", got, w.errs.Load())
		}
		return nil
	})
}

// checkConsistent verifies that every member holds every acknowledged write
// under prefix and that all members agree on keys, values and revisions.
func checkConsistent(t *testing.T, c *cluster.Cluster, prefix string, acked map[string]string) {
	t.Helper()
	ctx := testCtx(t, 30*time.Second)
	lin, err := c.ClientAll().Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	want := lin.Header.Revision
	var ref []*mvccpb.KeyValue
	for i := range c.Members {
		var r *clientv3.GetResponse
		// a serializable read shows the member's own state; wait for it to
		// have applied up to the linearizable revision.
		eventually(t, 10*time.Second, fmt.Sprintf("member %d catches up to revision %d", i, want), func() error {
			var err error
			r, err = c.Client(i).Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithSerializable(), clientv3.WithRev(want))
			return err
		})
		got := map[string]string{}
		for _, kv := range r.Kvs {
			got[string(kv.Key)] = string(kv.Value)
		}
		missing := 0
		for k, v := range acked {
			if got[k] != v {
				if missing < 5 {
					t.Errorf("member %d: acknowledged write %s=%s has %q", i, k, v, got[k])
				}
				missing++
			}
		}
		if missing > 0 {
			t.Errorf("member %d: %d of %d acknowledged writes missing", i, missing, len(acked))
		}
		if ref == nil {
			ref = r.Kvs
			continue
		}
		if len(r.Kvs) != len(ref) {
			t.Errorf("member %d has %d keys at revision %d, member 0 has %d", i, len(r.Kvs), want, len(ref))
			continue
		}
		for j, kv := range r.Kvs {
			o := ref[j]
			if string(kv.Key) != string(o.Key) || string(kv.Value) != string(o.Value) ||
				kv.ModRevision != o.ModRevision || kv.CreateRevision != o.CreateRevision || kv.Version != o.Version {
				t.Errorf("member %d disagrees with member 0 at revision %d: %v vs %v", i, want, kv, o)
				break
			}
		}
	}
	t.Logf("%d acknowledged writes present and identical on %d members at revision %d", len(acked), len(c.Members), want)
}

func TestKillLeaderUnderWrites(t *testing.T) {
	c := start(t, clusterOpts())
	ctx := testCtx(t, 90*time.Second)
	leader, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var survivors []int
	for i := range c.Members {
		if i != leader {
			survivors = append(survivors, i)
		}
	}
	w := startWriters(t, c, "/ack/", 4, []int{0, 1, 2})
	w.waitAcked(t, 200, 20*time.Second)

	killedAt := time.Now() // monotonic
	c.Kill(leader)
	// survivors must accept a write within 2 election timeouts (+ allowance
	// for the client's per-attempt timeout and retries).
	probe := c.NewClient(c.Endpoint(survivors[0]), c.Endpoint(survivors[1]))
	var recovered time.Duration
	for {
		actx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		_, err := probe.Put(actx, "/probe", "x")
		cancel()
		if err == nil {
			recovered = time.Since(killedAt)
			break
		}
		if ctx.Err() != nil {
			t.Fatal("survivors never accepted a write")
		}
	}
	limit := 2*electionMs*time.Millisecond + 300*time.Millisecond
	t.Logf("leader %d killed; survivors accepted a write after %v (limit %v)", leader, recovered.Round(time.Millisecond), limit)
	if recovered > limit {
		t.Errorf("survivors accepted writes only %v after the leader was killed; want <= %v", recovered, limit)
	}
	before := w.count()
	w.waitAcked(t, before+200, 20*time.Second)

	c.Restart(leader)
	if err := c.WaitMemberReady(ctx, leader); err != nil {
		t.Fatal(err)
	}
	w.waitAcked(t, w.count()+100, 20*time.Second)
	acked := w.stop()
	t.Logf("%d acknowledged writes, %d failed attempts", len(acked), w.errs.Load())
	checkConsistent(t, c, "/ack/", acked)
}

type event struct {
	Type        mvccpb.Event_EventType
	Key, Value  string
	Mod, Create int64
	Version     int64
}

func watchAll(t *testing.T, cli *clientv3.Client, from, until int64) []event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	var out []event
	for resp := range cli.Watch(ctx, "", clientv3.WithPrefix(), clientv3.WithRev(from)) {
		if err := resp.Err(); err != nil {
			t.Fatalf("watch from %d: %v", from, err)
		}
		for _, e := range resp.Events {
			out = append(out, event{e.Type, string(e.Kv.Key), string(e.Kv.Value), e.Kv.ModRevision, e.Kv.CreateRevision, e.Kv.Version})
			if e.Kv.ModRevision >= until {
				return out
			}
		}
	}
	t.Fatalf("watch from %d ended before revision %d (%d events)", from, until, len(out))
	return nil
}

func TestKillAllRestart(t *testing.T) {
	c := start(t, clusterOpts())
	ctx := testCtx(t, 90*time.Second)
	cli := c.ClientAll()
	for i := 0; i < 100; i++ {
		if _, err := cli.Put(ctx, fmt.Sprintf("/d/%03d", i%40), fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
		if i%7 == 0 {
			if _, err := cli.Delete(ctx, fmt.Sprintf("/d/%03d", (i+3)%40)); err != nil {
				t.Fatal(err)
			}
		}
	}
	mid, err := cli.Get(ctx, "/d/000")
	if err != nil {
		t.Fatal(err)
	}
	compactRev := mid.Header.Revision - 30
	if _, err := cli.Compact(ctx, compactRev, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	before, err := cli.Get(ctx, "", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	last := before.Header.Revision
	histBefore := watchAll(t, c.Client(0), compactRev, last)

	for i := range c.Members {
		c.Kill(i)
	}
	for i := range c.Members {
		c.Restart(i)
	}
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range c.Members {
		after, err := c.Client(i).Get(ctx, "", clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		if after.Header.Revision != last {
			t.Errorf("member %d: revision %d after restart, want %d", i, after.Header.Revision, last)
		}
		if fmt.Sprint(after.Kvs) != fmt.Sprint(before.Kvs) {
			t.Errorf("member %d: data differs after restart:\n got %v\nwant %v", i, after.Kvs, before.Kvs)
		}
		hist := watchAll(t, c.Client(i), compactRev, last)
		if fmt.Sprint(hist) != fmt.Sprint(histBefore) {
			t.Errorf("member %d: watch history from revision %d differs after restart:\n got %v\nwant %v", i, compactRev, hist, histBefore)
		}
		if _, err := c.Client(i).Get(ctx, "/d/000", clientv3.WithRev(compactRev-1)); err == nil {
			t.Errorf("member %d: compaction at %d forgotten after restart", i, compactRev)
		}
	}
	t.Logf("%d keys, revision %d, %d watch events from compaction revision %d survived kill -9 of all members",
		len(before.Kvs), last, len(histBefore), compactRev)
	// and it still takes writes with the next revision.
	r, err := cli.Put(ctx, "/after", "x")
	if err != nil || r.Header.Revision != last+1 {
		t.Errorf("first write after restart: %v %v, want revision %d", r, err, last+1)
	}
}

// Failpoint names from server/failpoint (kept literal: the e2e package
// tests the binary, not the server's packages).
var failpoints = []struct {
	name  string
	setup string // "writes", "snapshot" (member must receive a snapshot), "compact"
}{
	{"raft-before-save", "writes"},
	{"raft-after-save", "writes"},
	{"apply-before-commit", "writes"},
	{"apply-after-commit", "writes"},
	{"compact-before-trim", "writes"},
	{"mvcc-compact-midway", "compact"},
	{"snapshot-before-save", "snapshot"},
	{"snapshot-after-save", "snapshot"},
}

const failpointExitCode = 86

// snapshotCatchUpEntries is how many raft entries a member keeps behind a
// log compaction (etcd's and Tenure's default, 5000): a follower further
// behind than this plus --snapshot-count is sent a snapshot.
const snapshotCatchUpEntries = 5000

func TestFailpointCrashes(t *testing.T) {
	if cluster.TargetFromEnv(t) == cluster.Etcd {
		t.Skip("Tenure's failpoints; etcd has its own (gofail) and different names")
	}
	for _, fp := range failpoints {
		t.Run(fp.name, func(t *testing.T) {
			c := start(t, cluster.Options{SnapshotCount: 100})
			ctx := testCtx(t, 150*time.Second)
			const victim = 0
			env := []string{fmt.Sprintf("TENURE_FAILPOINTS=%s=3*exit", fp.name)}
			if fp.setup == "snapshot" {
				env = []string{fmt.Sprintf("TENURE_FAILPOINTS=%s=1*exit", fp.name)}
			}
			w := startWriters(t, c, "/fp/", 6, []int{1, 2})
			if fp.setup == "snapshot" {
				// fall behind by more than the retained log, then come back:
				// the leader must send a snapshot.
				c.Stop(victim)
				w.waitAcked(t, snapshotCatchUpEntries+3*100, 90*time.Second)
				c.RestartWithEnv(victim, env)
			} else {
				c.Stop(victim)
				c.RestartWithEnv(victim, env)
			}
			var compactor sync.WaitGroup
			cctx, ccancel := context.WithCancel(ctx)
			if fp.setup == "compact" {
				compactor.Add(1)
				go func() {
					defer compactor.Done()
					cli := c.NewClient(c.Endpoint(victim))
					for cctx.Err() == nil {
						if r, err := cli.Get(cctx, "/fp/"); err == nil && r.Header.Revision > 10 {
							cli.Compact(cctx, r.Header.Revision-5, clientv3.WithCompactPhysical())
						}
						time.Sleep(50 * time.Millisecond) // pacing, not synchronisation
					}
				}()
			}
			wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
			code, err := c.WaitExit(wctx, victim)
			wcancel()
			ccancel()
			compactor.Wait()
			if err != nil {
				w.stop()
				t.Fatalf("member %d with %s did not exit: %v (%d writes acknowledged)", victim, env, err, w.count())
			}
			if code != failpointExitCode {
				t.Fatalf("member %d exited with code %d, want %d (failpoint exit)", victim, code, failpointExitCode)
			}
			w.waitAcked(t, w.count()+50, 20*time.Second) // the others keep going
			c.RestartWithEnv(victim, nil)
			if err := c.WaitMemberReady(ctx, victim); err != nil {
				t.Fatal(err)
			}
			w.waitAcked(t, w.count()+50, 20*time.Second)
			acked := w.stop()
			checkConsistent(t, c, "/fp/", acked)
		})
	}
}
