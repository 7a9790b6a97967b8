package raftnode

import (
	"context"
	"errors"
	"testing"
	"time"
)

// The strict reconfiguration check (etcd's): with all members running
// (their raft streams up for healthInterval) members can be added and
// removed; with one of three down, adding any member (4 members, quorum 3,
// 2 running) and removing a running one (2 left, 1 running) are refused as
// an unhealthy cluster, while removing the member that is down is allowed —
// after which the two running members may grow the cluster again.
func TestStrictReconfigCheck(t *testing.T) {
	saved := healthInterval
	healthInterval = 300 * time.Millisecond
	defer func() { healthInterval = saved }()
	r := testSeed(t)
	c := newTestCluster(t, 3, r.Int63(), true, func(cfg *Config) { cfg.StrictReconfigCheck = true })
	waitFor(t, 10*time.Second, "attributes published", c.attrsPublished)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l := c.leader()
	var added Member
	waitFor(t, 10*time.Second, "a voter added with every member running", func() bool {
		m, _, err := c.nodes[l].AddMember(ctx, []string{"http://127.0.0.1:1"}, false)
		added = m
		return err == nil
	})
	// It never starts: a member that is down may be removed.
	if _, err := c.nodes[c.leader()].RemoveMember(ctx, added.ID); err != nil {
		t.Fatalf("removing the added member that never started: %v", err)
	}

	l = c.leader()
	down, live := (l+1)%3, (l+2)%3
	c.stop(down)
	waitFor(t, 10*time.Second, "the stopped member's stream down", func() bool {
		return c.nodes[l].tr.ActiveSince(c.ids[down]).IsZero()
	})
	for _, learner := range []bool{false, true} {
		if _, _, err := c.nodes[l].AddMember(ctx, []string{"http://127.0.0.1:2"}, learner); !errors.Is(err, ErrUnhealthyCluster) {
			t.Fatalf("AddMember (learner %v) with 1 of 3 down: %v, want %v", learner, err, ErrUnhealthyCluster)
		}
	}
	if _, err := c.nodes[l].RemoveMember(ctx, c.ids[live]); !errors.Is(err, ErrUnhealthyCluster) {
		t.Fatalf("removing a running member with another down: %v, want %v", err, ErrUnhealthyCluster)
	}
	if n := len(c.nodes[l].Members()); n != 3 {
		t.Fatalf("refused changes changed the member list: %d members", n)
	}
	if _, err := c.nodes[l].RemoveMember(ctx, c.ids[down]); err != nil {
		t.Fatalf("removing the member that is down: %v", err)
	}
	// Right after the removal: the change must not be refused by raft as
	// pending behind the removal (TestBackToBackMembershipChanges).
	if _, _, err := c.nodes[c.leader2(down)].AddMember(ctx, []string{"http://127.0.0.1:3"}, false); err != nil {
		t.Fatalf("adding a voter to the 2 running members: %v", err)
	}
}
