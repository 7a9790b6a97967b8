package raftnode

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/tenure-io/tenure/server/failpoint"
	"github.com/tenure-io/tenure/server/storage"
)

// nodesByName lets what a Config tweak builds reach the Node made from that
// Config, once the test cluster has started them all (nil until then).
type nodesByName struct {
	mu    sync.Mutex
	nodes map[string]*Node
}

func (nb *nodesByName) lookup(name string) func() *Node {
	return func() *Node {
		nb.mu.Lock()
		defer nb.mu.Unlock()
		return nb.nodes[name]
	}
}

func (nb *nodesByName) record(c *testCluster) {
	nb.mu.Lock()
	defer nb.mu.Unlock()
	nb.nodes = map[string]*Node{}
	for i, name := range c.names {
		nb.nodes[name] = c.nodes[i]
	}
}

// absorbingSM absorbs entries starting with "absorb:" and proposes them
// again, merged, as "merged:<data>" through its own node.
type absorbingSM struct {
	*testSM
	node     func() *Node
	mu       sync.Mutex
	absorbed []string
}

func (s *absorbingSM) AbsorbProposal(data []byte) bool {
	if !bytes.HasPrefix(data, []byte("absorb:")) {
		return false
	}
	s.mu.Lock()
	s.absorbed = append(s.absorbed, string(data))
	s.mu.Unlock()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.node().Propose(ctx, append([]byte("merged:"), data...))
	}()
	return true
}

func (s *absorbingSM) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.absorbed)
}

// The leader offers proposals forwarded by followers to a ProposalAbsorber
// state machine; what it absorbs never becomes an entry of its own, what
// it declines is replicated as usual.
func TestLeaderOffersForwardedProposalsToAbsorber(t *testing.T) {
	var (
		nodes     nodesByName
		absorbers = map[string]*absorbingSM{} // written before the nodes start
	)
	c := newTestCluster(t, 3, testSeed(t).Int63(), false, func(cfg *Config) {
		ab := &absorbingSM{testSM: cfg.StateMachine.(*testSM), node: nodes.lookup(cfg.Name)}
		absorbers[cfg.Name] = ab
		cfg.StateMachine = ab
	})
	nodes.record(c)
	lead := c.leader()
	f := (lead + 1) % 3

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.nodes[f].Propose(ctx, []byte("absorb:x")); err != nil {
		t.Fatal(err)
	}
	c.propose(f, []byte("plain:y")) // declined: replicated as is
	for i := range c.nodes {
		waitFor(t, 10*time.Second, "the merged entry on every member", func() bool { return c.sms[i].hasSeen("merged:absorb:x") })
		if c.sms[i].hasSeen("absorb:x") {
			t.Fatalf("m%d applied the absorbed entry itself", i)
		}
		if !c.sms[i].hasSeen("plain:y") {
			t.Fatalf("m%d lacks the declined entry", i)
		}
	}
	if n := absorbers[c.names[lead]].count(); n != 1 {
		t.Fatalf("leader absorbed %d entries, want 1", n)
	}
	if n := c.nodes[lead].absorbed.Load(); n != 1 {
		t.Fatalf("leader counted %d absorbed proposals, want 1", n)
	}
	for i := range c.nodes {
		if i != lead && absorbers[c.names[i]].count() != 0 {
			t.Fatalf("follower m%d was offered a proposal", i)
		}
	}
}

// Committed entries already on disk are applied while the Ready that
// commits them is persisted, not after: the save of the Ready that moves
// the commit index sleeps 3 s and the entry is applied well before.
func TestCommittedEntriesApplyWhileReadyPersists(t *testing.T) {
	c := newTestCluster(t, 1, testSeed(t).Int63(), false, nil)
	c.leader()
	c.propose(0, []byte("settle"))
	// Hit 1: the entry's own save (entries, synced). Hit 2: the Ready that
	// commits it (hard state) — it sleeps.
	if err := failpoint.Enable(failpoint.RaftBeforeSave + "=2*sleep:3s"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(failpoint.Disable)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	if err := c.nodes[0].Propose(ctx, []byte("early")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the entry applied", func() bool { return c.sms[0].hasSeen("early") })
	if d := time.Since(start); d >= 2*time.Second {
		t.Fatalf("entry applied after %v: it waited for the save of the Ready that committed it", d)
	}
}

// A crash may leave an apply batch on disk without the (unsynced) hard
// state that moved the commit index: restart raises the commit index to the
// applied index, never past the log.
func TestRaiseCommitToApplied(t *testing.T) {
	mk := func(commit, last uint64) *persisted {
		p := &persisted{hs: &raftpb.HardState{Term: proto.Uint64(2), Commit: proto.Uint64(commit)},
			snap: &raftpb.Snapshot{Metadata: &raftpb.SnapshotMetadata{Index: proto.Uint64(3)}}, hasRaft: true}
		for i := uint64(4); i <= last; i++ {
			p.ents = append(p.ents, &raftpb.Entry{Index: proto.Uint64(i), Term: proto.Uint64(2)})
		}
		return p
	}
	for _, tc := range []struct {
		commit, last, applied, want uint64
	}{
		{commit: 5, last: 10, applied: 8, want: 8},  // applied ahead of the stored commit
		{commit: 9, last: 10, applied: 8, want: 9},  // commit already ahead
		{commit: 5, last: 10, applied: 12, want: 5}, // beyond the log: the snapshot-adoption path's case
		{commit: 2, last: 3, applied: 3, want: 3},   // log empty past the snapshot
	} {
		p := mk(tc.commit, tc.last)
		raiseCommitToApplied(p, tc.applied)
		if got := p.hs.GetCommit(); got != tc.want {
			t.Errorf("commit %d, last %d, applied %d: commit = %d, want %d", tc.commit, tc.last, tc.applied, got, tc.want)
		}
		if p.hs.GetTerm() != 2 {
			t.Errorf("term changed to %d", p.hs.GetTerm())
		}
	}
}

// The restart path raises the commit index: a member whose stored hard
// state lags its applied index (the crash the early hand-off to apply
// allows) restarts with its commit index at the applied index, even with
// no leader around to tell it.
func TestRestartRaisesCommitToApplied(t *testing.T) {
	c := newTestCluster(t, 3, testSeed(t).Int63(), false, nil)
	lead := c.leader()
	for i := 0; i < 5; i++ {
		c.propose(lead, []byte(fmt.Sprintf("v%d", i)))
	}
	c.converge()
	c.stopAll()

	// Rewrite member 0's stored hard state as a crash could have left it.
	db, err := storage.Open(c.dirs[0], storage.Options{CacheBytes: 8 << 20, MemTableBytes: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	applied, err := storage.GetU64(db, storage.KeyAppliedIndex)
	if err != nil {
		t.Fatal(err)
	}
	hs := &raftpb.HardState{}
	if _, err := getProto(db, storage.KeyHardState, hs); err != nil {
		t.Fatal(err)
	}
	if applied < 3 || hs.GetCommit() < applied {
		t.Fatalf("setup: applied %d, stored commit %d", applied, hs.GetCommit())
	}
	hs.Commit = proto.Uint64(applied - 2)
	b := db.NewBatch()
	if err := setProto(b, storage.KeyHardState, hs); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	b.Close()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	c.start(0) // alone: one of three members, no leader can be elected
	if got := c.nodes[0].Status().CommitIndex; got != applied {
		t.Fatalf("restarted with commit index %d, want the applied index %d", got, applied)
	}
}

// A Ready that only moves the commit index writes nothing: each round of
// sequential proposals costs a follower one synced write (the new entry),
// not a second write for the commit index that the next message brings.
// Before this rule every round cost every member two storage writes.
func TestCommitOnlyReadyWritesNothing(t *testing.T) {
	var syncs [3]atomic.Int64
	c := newTestCluster(t, 3, testSeed(t).Int63(), false, func(cfg *Config) {
		var i int
		fmt.Sscanf(cfg.Name, "m%d", &i)
		cfg.Observer = &Observer{DiskSync: func(time.Duration) { syncs[i].Add(1) }}
	})
	lead := c.leader()
	c.propose(lead, []byte("warm-up"))
	c.converge()
	var before [3]int64
	for i := range syncs {
		before[i] = syncs[i].Load()
	}
	const rounds = 40
	for i := range rounds {
		c.propose(lead, []byte(fmt.Sprintf("v%d", i)))
		for j := range 3 { // every member applies the entry before the next round
			waitFor(t, 10*time.Second, fmt.Sprintf("m%d to apply v%d", j, i), func() bool { return c.sms[j].hasSeen(fmt.Sprintf("v%d", i)) })
		}
	}
	for i := range syncs {
		got := syncs[i].Load() - before[i]
		t.Logf("m%d: %d synced writes for %d rounds", i, got, rounds)
		if got < rounds || got > rounds+rounds/4 {
			t.Errorf("m%d: %d synced writes for %d sequential proposals, want %d to %d (one per new entry)", i, got, rounds, rounds, rounds+rounds/4)
		}
	}
}

// commitOrderTransport checks, as each append leaves the leader, that the
// leader's apply loop already has the entries whose commit the append
// carries: it waits (bounded) for the sender's applied index to reach the
// message's commit. The Ready loop is held meanwhile, so only entries
// handed to the apply loop before the send can get there.
type commitOrderTransport struct {
	Transport
	node   func() *Node
	checks atomic.Int64
	first  atomic.Value // string: the first late append
}

func (tr *commitOrderTransport) Send(msgs []*raftpb.Message) {
	if n := tr.node(); n != nil {
		for _, m := range msgs {
			if m.GetType() != raftpb.MessageType_MsgApp || m.GetCommit() == 0 {
				continue
			}
			tr.checks.Add(1)
			deadline := time.Now().Add(2 * time.Second)
			for n.appliedIndex() < m.GetCommit() && time.Now().Before(deadline) {
				time.Sleep(100 * time.Microsecond)
			}
			if got := n.appliedIndex(); got < m.GetCommit() {
				tr.first.CompareAndSwap(nil, fmt.Sprintf("append to %x carries commit %d, leader applied %d", m.GetTo(), m.GetCommit(), got))
			}
		}
	}
	tr.Transport.Send(msgs)
}

// The leader hands newly committed entries to its apply loop before it
// writes the appends that tell the followers about the commit: those
// writes (one socket write per follower) would otherwise delay every
// answer and lock grant the leader gives.
func TestLeaderAppliesCommitBeforeSendingIt(t *testing.T) {
	var (
		nodes      nodesByName
		transports []*commitOrderTransport // written before the nodes start
	)
	c := newTestCluster(t, 3, testSeed(t).Int63(), false, func(cfg *Config) {
		tr := &commitOrderTransport{Transport: cfg.Transport, node: nodes.lookup(cfg.Name)}
		transports = append(transports, tr)
		cfg.Transport = tr
	})
	nodes.record(c)
	l := c.leader()
	for i := 0; i < 20; i++ {
		c.propose(l, []byte(fmt.Sprintf("ordered-%d", i)))
	}
	var checks int64
	for _, tr := range transports {
		checks += tr.checks.Load()
		if f, ok := tr.first.Load().(string); ok {
			t.Errorf("commit sent before it was handed to apply: %s", f)
		}
	}
	if checks < 20 {
		t.Fatalf("only %d appends carried a commit index, want at least 20", checks)
	}
	t.Logf("%d appends checked", checks)
}
