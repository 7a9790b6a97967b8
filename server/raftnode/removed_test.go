package raftnode

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/tenure-io/tenure/server/storage"
)

// waitRemoved waits until nd reports that it was removed from the cluster.
func waitRemoved(t *testing.T, nd *Node, within time.Duration, how string) {
	t.Helper()
	select {
	case <-nd.Removed():
	case <-time.After(within):
		t.Fatalf("member %x did not learn within %v that it was removed (%s)", nd.ID(), within, how)
	}
}

// A member that applies its own removal says so (Removed), and its data
// directory cannot start a member again: the ID is never reused, and the
// peers would refuse it anyway.
func TestRemovedMemberLearnsFromItsOwnApply(t *testing.T) {
	c := newTestCluster(t, 3, testSeed(t).Int63(), false, nil)
	l := c.leader()
	f := (l + 1) % 3
	c.propose(l, []byte("before"))
	select {
	case <-c.nodes[f].Removed():
		t.Fatal("a member of the cluster reports that it was removed")
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.nodes[l].RemoveMember(ctx, c.ids[f]); err != nil {
		t.Fatal(err)
	}
	waitRemoved(t, c.nodes[f], 10*time.Second, "it applies its own removal")
	// It may have been told by a peer first (its answer to the commit
	// reached a leader that had applied the removal); the commit itself
	// reached it before the leader dropped it, so its own apply follows.
	waitFor(t, 10*time.Second, "the removed member to apply its own removal", func() bool { return c.nodes[f].IsRemoved(c.ids[f]) })
	for i := range c.nodes {
		if i != f {
			select {
			case <-c.nodes[i].Removed():
				t.Fatalf("member %d reports removal; only member %d was removed", i, f)
			default:
			}
		}
	}
	c.stop(f)

	db, err := storage.Open(c.dirs[f], storage.Options{CacheBytes: 8 << 20, MemTableBytes: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var initial []Member
	for j := 0; j < 3; j++ {
		initial = append(initial, Member{Name: c.names[j], PeerURLs: c.urls[j]})
	}
	_, err = New(Config{Name: c.names[f], DB: db, ClusterToken: "tok", InitialCluster: initial, NewCluster: true,
		PeerURLs: c.urls[f], TickInterval: 10 * time.Millisecond, ElectionTicks: 10,
		StateMachine: newTestSM(), Logger: testLogger(), Transport: c.net.Transport(c.ids[f], c.urls[f])})
	if !errors.Is(err, ErrMemberRemoved) {
		t.Fatalf("restarting a removed member: err = %v, want ErrMemberRemoved", err)
	}
	c.propose(c.leader(), []byte("after"))
}

// A member cut off while the cluster removes it never sees the removal
// committed. Once the network heals, the members that applied it refuse its
// messages and tell it why, and it learns it was removed instead of
// campaigning forever while its clients time out.
func TestRemovedMemberLearnsFromItsPeers(t *testing.T) {
	c := newTestCluster(t, 3, testSeed(t).Int63(), false, nil)
	l := c.leader()
	f := (l + 1) % 3
	c.propose(l, []byte("before"))
	c.net.Isolate(c.ids[f], c.ids...)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.nodes[l].RemoveMember(ctx, c.ids[f]); err != nil {
		t.Fatal(err)
	}
	for i := range c.nodes {
		if i != f {
			waitFor(t, 10*time.Second, "the removal applied on the members that stay", func() bool { return len(c.nodes[i].Members()) == 2 })
		}
	}
	select {
	case <-c.nodes[f].Removed():
		t.Fatal("the cut-off member learnt of its removal while nothing reached it")
	default:
	}
	if got := len(c.nodes[f].Members()); got != 3 {
		t.Fatalf("the cut-off member lists %d members; it cannot have applied its removal", got)
	}
	c.net.Heal()
	waitRemoved(t, c.nodes[f], 10*time.Second, "its peers refuse it")
	c.stop(f) // its owner stops it (the server does, on Removed)
	c.propose(c.leader(), []byte("after"))
}

// The raft stream's acceptor refuses a member it knows was removed with a
// reason the dialer recognises, and closes that member's established
// stream when the removal reaches the transport (RemovePeer), so the
// removed member redials, is refused and is told.
func TestPeerTransportTellsARemovedMember(t *testing.T) {
	h := newRecorder()
	recv := serveTransport(t, 2, h, "", PeerTransportConfig{})
	defer recv.stop(t)
	send, sh := sender(t, recv.addr, PeerTransportConfig{})
	defer send.Stop()
	send.Send([]*raftpb.Message{appMsg(2, 1, 10)})
	h.waitReceived(t, 1, 10*time.Second)
	if sh.removedBy.Load() != 0 {
		t.Fatal("a member was told it was removed before anyone removed it")
	}

	h.removedIDs.Store(uint64(1), true)
	recv.tr.RemovePeer(1)
	waitFor(t, 10*time.Second, "the removed sender to be told by member 2", func() bool { return sh.removedBy.Load() == 2 })
	send.Send([]*raftpb.Message{appMsg(2, 2, 10)})
	time.Sleep(50 * time.Millisecond) // give a wrongly accepted stream time to deliver
	if n := len(h.received()); n != 1 {
		t.Fatalf("member 2 received %d messages; nothing after the removal may be accepted", n)
	}
}
