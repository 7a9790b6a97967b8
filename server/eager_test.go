package server

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// A follower's first watcher makes it tell its leader at once that its
// appends must not be held (thrifty replication), rather than at the next
// periodic reminder: the watch hub's OnFirstWatcher reaches the raft node.
func TestFirstWatchOnAFollowerTellsTheLeaderAtOnce(t *testing.T) {
	tr := newTrio(t)
	cli := tr.startAll()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	tr.putOnce(ctx, cli, "k") // a leader was elected
	f := -1
	for i, m := range tr.members {
		if st := m.node.Status(); st.Leader != 0 && st.Leader != m.node.ID() {
			f = i
			break
		}
	}
	if f < 0 {
		t.Fatal("no follower that knows its leader")
	}
	if _, atOnce := tr.members[f].node.EagerRequestsSent(); atOnce != 0 {
		t.Fatalf("%d requests sent at once before any watch", atOnce)
	}
	fcli, err := clientv3.New(clientv3.Config{Endpoints: tr.cfgs[f].AdvertiseClientURLs, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer fcli.Close()
	wch := fcli.Watch(clientv3.WithRequireLeader(ctx), "k", clientv3.WithCreatedNotify())
	if resp := <-wch; !resp.Created {
		t.Fatalf("watch not created: %v", resp.Err())
	}
	for {
		if _, atOnce := tr.members[f].node.EagerRequestsSent(); atOnce == 1 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatal("the follower's first watcher did not make it tell its leader at once")
		case <-time.After(5 * time.Millisecond):
		}
	}
}
