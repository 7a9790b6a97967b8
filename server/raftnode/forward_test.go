package raftnode

import (
	"context"
	"fmt"
	"sync/atomic"
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

// A follower's proposal goes to the leader without waiting for the
// follower's raft: here the follower's RawNode is held busy (as a Ready
// loop in the middle of a disk sync holds up raft's own forwarding until
// its next Ready), and the proposal still commits on the other two.
func TestFollowerProposalSkipsItsOwnRaft(t *testing.T) {
	c := newTestCluster(t, 3, testSeed(t).Int63(), false, nil)
	lead := c.leader()
	c.propose(lead, []byte("warm-up"))
	c.converge()
	f := (lead + 1) % 3
	other := (lead + 2) % 3
	waitFor(t, 10*time.Second, "follower knows the leader", func() bool { return c.nodes[f].leadNow.Load() == c.ids[lead] })

	c.nodes[f].rn.mu.Lock()
	held := true
	defer func() {
		if held {
			c.nodes[f].rn.mu.Unlock()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	errc := make(chan error, 1) // a Propose stuck on the held raft must not hang the test
	go func() { errc <- c.nodes[f].Propose(ctx, []byte("from-follower")) }()
	for _, i := range []int{lead, other} {
		waitFor(t, 10*time.Second, fmt.Sprintf("m%d to apply the follower's proposal", i), func() bool { return c.sms[i].hasSeen("from-follower") })
	}
	if err := <-errc; err != nil {
		t.Fatalf("Propose on a follower: %v", err)
	}
	c.nodes[f].rn.mu.Unlock()
	held = false
	waitFor(t, 10*time.Second, "the follower to apply its proposal", func() bool { return c.sms[f].hasSeen("from-follower") })
}

// A follower's ReadIndex request goes to the leader without waiting for
// the follower's raft: with the follower's RawNode held busy, the leader
// still receives the follower's MsgReadIndex, and the read completes once
// the follower's raft is free to take the answer.
func TestFollowerReadIndexSkipsItsOwnRaft(t *testing.T) {
	c := newTestCluster(t, 3, testSeed(t).Int63(), false, nil)
	lead := c.leader()
	c.propose(lead, []byte("warm-up"))
	c.converge()
	f := (lead + 1) % 3
	waitFor(t, 10*time.Second, "follower knows the leader", func() bool { return c.nodes[f].leadNow.Load() == c.ids[lead] })

	var reached atomic.Bool
	c.net.Tap(func(m *raftpb.Message) {
		if m.GetType() == raftpb.MsgReadIndex && m.GetFrom() == c.ids[f] && m.GetTo() == c.ids[lead] {
			reached.Store(true)
		}
	})
	defer c.net.Tap(nil)

	c.nodes[f].rn.mu.Lock()
	held := true
	defer func() {
		if held {
			c.nodes[f].rn.mu.Unlock()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- c.nodes[f].ReadIndex(ctx) }()
	waitFor(t, 10*time.Second, "the follower's MsgReadIndex to reach the leader", reached.Load)
	c.nodes[f].rn.mu.Unlock()
	held = false
	if err := <-errc; err != nil {
		t.Fatalf("ReadIndex on a follower: %v", err)
	}
}
