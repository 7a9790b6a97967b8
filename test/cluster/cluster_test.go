package cluster

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// These tests validate the harness itself against real etcd; they run only
// with TENURE_TEST_ETCD=1 (see RequireEtcd).

func TestHarnessLifecycle(t *testing.T) {
	RequireEtcd(t)
	c := Start(t, Options{Size: 3, Binary: Etcd})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	if _, err := c.ClientAll().Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	l, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c.Kill(l)
	if code := c.ExitCode(l); code != 137 {
		t.Errorf("exit code after SIGKILL = %d, want 137", code)
	}
	nl, err := c.WaitLeader(ctx, l)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("leader %d killed, new leader %d", l, nl)
	c.Restart(l)
	if err := c.WaitMemberReady(ctx, l); err != nil {
		t.Fatal(err)
	}
	r, err := c.Client(l).Get(ctx, "k")
	if err != nil || len(r.Kvs) != 1 || string(r.Kvs[0].Value) != "v" {
		t.Fatalf("after restart: %v %v", r, err)
	}

	// Pause/Resume: a paused member does not answer; resumed, it does.
	p := (nl + 1) % 3
	c.Pause(p)
	sctx, scancel := context.WithTimeout(ctx, 300*time.Millisecond)
	if r, err := c.Client(p).Get(sctx, "k"); err == nil {
		st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", c.Members[p].cmd.Process.Pid))
		t.Errorf("paused member %d answered: %v; stat %s", p, r.Header, st)
	}
	scancel()
	c.Resume(p)
	if err := c.WaitMemberReady(ctx, p); err != nil {
		t.Fatal(err)
	}

	if code := c.Stop(p); code != 0 && code != 128+15 {
		t.Errorf("exit code after SIGTERM = %d, want 0 or 143", code)
	}
	c.Restart(p)
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}

	out, err := c.Etcdctl(ctx, "endpoint", "health")
	if err != nil || strings.Count(out, "is healthy") != 3 {
		t.Fatalf("etcdctl endpoint health: %v\n%s", err, out)
	}
}

func TestHarnessPartition(t *testing.T) {
	RequireEtcd(t)
	c := Start(t, Options{Size: 3, Binary: Etcd, Proxied: true})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	l, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Every peer link must have been classified to its source member.
	for j := range c.Members {
		for _, link := range c.peerMux[j].Links() {
			_ = link
		}
		if c.PeerLink((j+1)%3, j).Accepted() == 0 && c.PeerLink((j+2)%3, j).Accepted() == 0 {
			t.Errorf("no classified peer connections into member %d", j)
		}
		if n := c.peerMux[j].Link("").Accepted(); n != 0 {
			t.Errorf("%d unclassified peer connections into member %d", n, j)
		}
	}

	// Isolate the leader: the majority elects another leader, the old one
	// cannot serve linearizable reads.
	var rest []int
	for i := range c.Members {
		if i != l {
			rest = append(rest, i)
		}
	}
	c.Partition([]int{l}, rest)
	nl, err := c.WaitLeader(ctx, l)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("isolated leader %d; majority elected %d", l, nl)
	if _, err := c.Client(nl).Put(ctx, "during", "partition"); err != nil {
		t.Fatal(err)
	}
	sctx, scancel := context.WithTimeout(ctx, time.Second)
	if _, err := c.Client(l).Get(sctx, "during"); err == nil {
		t.Error("isolated member served a linearizable read")
	}
	scancel()

	c.Heal()
	if err := c.WaitMemberReady(ctx, l); err != nil {
		t.Fatal(err)
	}
	r, err := c.Client(l).Get(ctx, "during")
	if err != nil || len(r.Kvs) != 1 {
		t.Fatalf("after heal: %v %v", r, err)
	}

	// Client proxy blackhole: requests through it time out.
	c.ClientProxy(l).Blackhole()
	sctx, scancel = context.WithTimeout(ctx, 500*time.Millisecond)
	if _, err := c.NewClient(c.Endpoint(l)).Get(sctx, "during"); err == nil {
		t.Error("request through a blackholed client proxy succeeded")
	}
	scancel()
	c.Heal()
}
