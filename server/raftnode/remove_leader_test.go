package raftnode

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"
)

// Removing the leader hands leadership away, and the removal must then be
// applied even though the new leader drops conf changes until it has applied
// its predecessor's entries (RemoveNode is re-proposed until applied). Twice
// in a row on a 5-member cluster; the remaining members keep committing.
func TestRemoveLeaderTwice(t *testing.T) {
	c := newTestCluster(t, 5, testSeed(t).Int63(), false, nil)
	for round := 0; round < 2; round++ {
		lead := c.leader()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		members, err := c.nodes[lead].RemoveMember(ctx, c.ids[lead])
		cancel()
		if err != nil {
			t.Fatalf("round %d: removing the leader: %v", round, err)
		}
		if len(members) != 4-round {
			t.Fatalf("round %d: %d members after removal, want %d", round, len(members), 4-round)
		}
		c.stop(lead)
		next := c.leader()
		c.propose(next, []byte("after-removal"))
	}
}

// Removing the leader through a follower: leadership has to leave the
// leader, but it need not go to the member the follower picked. Here that
// member is cut off and another member takes over; the removal must still
// complete. It used to wait for the picked member to lead — the new leader
// was asked to hand over to it in turn — and timed out (found by the
// 5-member chaos run, where a third member won the transfer's election).
func TestRemoveLeaderWhenAnotherMemberTakesOver(t *testing.T) {
	c := newTestCluster(t, 5, testSeed(t).Int63(), false, nil)
	lead := c.leader()
	// via is the follower that gets the request, to the member it picks
	// (a follower knows no progress: the lowest id but the leader's). via
	// must not pick itself, or cutting off to would cut off the request.
	via := (lead + 1) % 5
	to := c.nodes[via].transferTarget(c.ids[lead])
	if to == c.ids[via] {
		via = (lead + 2) % 5
		to = c.nodes[via].transferTarget(c.ids[lead])
	}
	other := -1 // the member that takes over instead
	for i := range c.ids {
		if i != lead && i != via && c.ids[i] != to {
			other = i
			break
		}
	}
	c.net.Isolate(to, c.ids...)
	errc := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := c.nodes[via].RemoveMember(ctx, c.ids[lead])
		errc <- err
	}()
	waitFor(t, 5*time.Second, "the leader to start handing over to the cut-off member", func() bool {
		return c.nodes[lead].rn.Status().LeadTransferee == to
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	err := c.nodes[lead].TransferLeadership(ctx, c.ids[other])
	cancel()
	if err != nil {
		t.Fatalf("handing leadership to member %d instead: %v", other, err)
	}
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("removing the former leader after member %d took over: %v", other, err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("RemoveMember did not return within 20s")
	}
	// RemoveMember returned once the member that took the request applied
	// the removal; the one that took over applies it in its own time.
	waitFor(t, 5*time.Second, fmt.Sprintf("member %x to leave member %d's configuration", c.ids[lead], other), func() bool {
		return !slices.ContainsFunc(c.nodes[other].Members(), func(m Member) bool { return m.ID == c.ids[lead] })
	})
	c.net.Heal()
	c.propose(other, []byte("after-removal"))
}
