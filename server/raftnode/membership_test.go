package raftnode

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/tenure-io/tenure/server/storage"
)

func TestMembershipLearnerJoinPromoteRemove(t *testing.T) {
	r := testSeed(t)
	c := newTestCluster(t, 3, r.Int63(), false, nil)
	l := c.leader()
	for k := 0; k < 10; k++ {
		c.propose(l, []byte(fmt.Sprintf("m%d", k)))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	url := "http://mem-new:2380"
	if _, _, err := c.nodes[l].AddMember(ctx, c.urls[0], true); !errors.Is(err, ErrPeerURLExists) {
		t.Fatalf("AddMember with a taken URL: %v", err)
	}
	m, ms, err := c.nodes[l].AddMember(ctx, []string{url}, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 4 || !m.IsLearner {
		t.Fatalf("after add: %+v", ms)
	}
	if _, err := c.nodes[l].PromoteMember(ctx, c.ids[0]); !errors.Is(err, ErrNotLearner) {
		t.Fatalf("promote a voter: %v", err)
	}
	if _, err := c.nodes[l].RemoveMember(ctx, 12345); !errors.Is(err, ErrMemberNotFound) {
		t.Fatalf("remove unknown: %v", err)
	}

	// the new member joins an existing cluster: it learns its ID from a peer
	db, err := storage.Open(t.TempDir(), storage.Options{CacheBytes: 8 << 20, MemTableBytes: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	sm := newTestSM()
	var initial []Member
	for j := 0; j < 3; j++ {
		initial = append(initial, Member{Name: c.names[j], PeerURLs: c.urls[j]})
	}
	initial = append(initial, Member{Name: "new", PeerURLs: []string{url}})
	nd, err := New(Config{Name: "new", DB: db, ClusterToken: "tok", InitialCluster: initial, NewCluster: false,
		ClientURLs: []string{"http://client-new:2379"}, PeerURLs: []string{url},
		TickInterval: 10 * time.Millisecond, ElectionTicks: 10, StateMachine: sm, Logger: testLogger().With("m", "new"),
		Transport: c.net.Transport(0, []string{url})})
	if err != nil {
		t.Fatal(err)
	}
	if nd.ID() != m.ID || nd.ClusterID() != c.nodes[0].ClusterID() {
		t.Fatalf("joined as %x in cluster %x, want %x in %x", nd.ID(), nd.ClusterID(), m.ID, c.nodes[0].ClusterID())
	}
	nd.Start()
	defer func() { nd.Stop(); db.Close() }()
	waitFor(t, 10*time.Second, "learner to catch up", func() bool {
		return nd.Status().AppliedIndex >= c.nodes[l].Status().CommitIndex && nd.Status().IsLearner
	})
	// promotion must run on the leader; retry until the learner is in sync
	waitFor(t, 10*time.Second, "promotion", func() bool {
		l = c.leader()
		_, err := c.nodes[l].PromoteMember(ctx, m.ID)
		return err == nil
	})
	waitFor(t, 10*time.Second, "promotion applied on the new member", func() bool { return !nd.Status().IsLearner })
	if _, err := c.nodes[l].RemoveMember(ctx, m.ID); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		waitFor(t, 10*time.Second, "removal applied", func() bool { return len(c.nodes[i].Members()) == 3 })
	}
	c.propose(c.leader(), []byte("after-remove"))
}
