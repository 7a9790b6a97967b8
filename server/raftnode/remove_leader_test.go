package raftnode

import (
	"context"
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
