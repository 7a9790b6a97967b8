package raftnode

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// Proposals that reach the leader while its Ready loop is busy (here: its
// RawNode held, as during a disk sync) are stepped as one message, so raft
// sends each follower one append for all of them instead of one per
// proposal — for proposals made on the leader and forwarded ones alike.
func TestLeaderStepsBufferedProposalsTogether(t *testing.T) {
	c := newTestCluster(t, 3, testSeed(t).Int63(), false, nil)
	lead := c.leader()
	c.propose(lead, []byte("warm-up"))
	c.converge()
	n := c.nodes[lead]
	follower := c.ids[(lead+1)%3]

	var mu sync.Mutex
	appends := 0 // MsgApps to the follower carrying batch entries
	c.net.Tap(func(m *raftpb.Message) {
		if m.GetType() != raftpb.MsgApp || m.GetTo() != follower {
			return
		}
		for _, e := range m.GetEntries() {
			if strings.HasPrefix(string(e.GetData()), "batch-") {
				mu.Lock()
				appends++
				mu.Unlock()
				return
			}
		}
	})
	defer c.net.Tap(nil)

	const local, forwarded = 30, 20
	before := n.props.added.Load()
	n.rn.mu.Lock()
	held := true
	defer func() {
		if held {
			n.rn.mu.Unlock()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errc := make(chan error, local)
	for i := 0; i < local; i++ {
		go func(i int) { errc <- n.Propose(ctx, []byte(fmt.Sprintf("batch-l%d", i))) }(i)
	}
	from, to := follower, n.ID()
	for i := 0; i < forwarded; i++ {
		m := &raftpb.Message{Type: raftpb.MsgProp.Enum(), From: proto.Uint64(from), To: proto.Uint64(to),
			Entries: []*raftpb.Entry{{Data: []byte(fmt.Sprintf("batch-f%d", i))}}}
		if err := n.Process(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	// All of them reach the buffer; the Ready loop, blocked on the held
	// RawNode, may have taken one batch of them before it blocked.
	waitFor(t, 10*time.Second, "the proposals buffered", func() bool {
		return n.props.added.Load() == before+local+forwarded
	})
	n.rn.mu.Unlock()
	held = false
	for i := 0; i < local; i++ {
		if err := <-errc; err != nil {
			t.Fatalf("Propose: %v", err)
		}
	}
	for i := 0; i < 3; i++ {
		waitFor(t, 10*time.Second, fmt.Sprintf("m%d to apply the batch", i), func() bool {
			return c.sms[i].hasSeen(fmt.Sprintf("batch-l%d", local-1)) && c.sms[i].hasSeen(fmt.Sprintf("batch-f%d", forwarded-1))
		})
	}
	mu.Lock()
	got := appends
	mu.Unlock()
	// Stepped one by one they take one append each; together, at most two:
	// the batch the Ready loop took before it blocked, and the rest.
	if got == 0 || got > 2 {
		t.Fatalf("%d proposals reached the follower in %d appends; want them together (at most 2)", local+forwarded, got)
	}
}

// A proposal that waited in the buffer while its member lost leadership
// is handed to the new leader or dropped with an error, never lost silently
// or left waiting.
func TestBufferedProposalAfterLosingLeadership(t *testing.T) {
	c := newTestCluster(t, 3, testSeed(t).Int63(), false, nil)
	lead := c.leader()
	c.propose(lead, []byte("warm-up"))
	c.converge()
	n := c.nodes[lead]
	before := n.props.added.Load()
	n.rn.mu.Lock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- n.Propose(ctx, []byte("orphan")) }()
	// Taken by the Ready loop (blocked on the held RawNode) or still in
	// the buffer: either way not yet stepped.
	waitFor(t, 10*time.Second, "proposal buffered", func() bool { return n.props.added.Load() == before+1 })
	// The member stops leading before its Ready loop steps the proposal: a
	// peer's message of a later term makes it a follower.
	other := c.ids[(lead+1)%3]
	term := n.rn.rn.Status().HardState.GetTerm()
	if err := n.rn.rn.Step(&raftpb.Message{Type: raftpb.MsgHeartbeat.Enum(), From: proto.Uint64(other),
		To: proto.Uint64(n.ID()), Term: proto.Uint64(term + 1)}); err != nil {
		t.Fatal(err)
	}
	if st := n.rn.rn.Status(); st.RaftState.String() == "StateLeader" {
		t.Fatal("still leading after a later term")
	}
	n.rn.mu.Unlock()
	select {
	case err := <-errc:
		if err != nil && err != ErrProposalDropped {
			t.Fatalf("Propose: %v, want nil (forwarded) or ErrProposalDropped", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a buffered proposal of a deposed leader never got an answer")
	}
}
