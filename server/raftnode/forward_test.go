package raftnode

import (
	"context"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
)

// A member that knows no leader must not block in Process on a proposal
// forwarded by a peer: the peer stream that carried it also carries the
// heartbeats that would tell the member who the leader is. (Seen in the
// end-to-end crash tests: a restarted former leader received its old
// followers' queued proposals and never rejoined.)
func TestForwardedProposalDoesNotBlockWithoutLeader(t *testing.T) {
	c := newTestCluster(t, 3, testSeed(t).Int63(), false, nil)
	lead := c.leader()
	// Stop the two others: the remaining member loses its quorum and, with
	// CheckQuorum, its leadership.
	for i := 0; i < 3; i++ {
		if i != lead {
			c.stop(i)
		}
	}
	n := c.nodes[lead]
	waitFor(t, 10*time.Second, "leader steps down without quorum", func() bool { return n.Status().Leader == 0 })

	done := make(chan error, 1)
	go func() {
		from, to := c.ids[(lead+1)%3], n.ID()
		m := &raftpb.Message{Type: raftpb.MsgProp.Enum(), From: &from, To: &to,
			Entries: []*raftpb.Entry{{Data: []byte("forwarded")}}}
		done <- n.Process(context.Background(), m) // a stream's context never ends by itself
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Process blocked on a forwarded proposal while the member had no leader")
	}
	// The stream stays usable: restart the others and the member rejoins.
	for i := 0; i < 3; i++ {
		if i != lead {
			c.start(i)
		}
	}
	waitFor(t, 20*time.Second, "member learns a leader again", func() bool { return n.Status().Leader != 0 })
}
