package raftnode

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/raft/v3/quorum"
	"go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
	"google.golang.org/protobuf/proto"
)

// sendRecorder is a Transport that records what is sent, in order.
type sendRecorder struct {
	Transport
	mu   sync.Mutex
	sent []*raftpb.Message
}

func (r *sendRecorder) Send(msgs []*raftpb.Message) {
	r.mu.Lock()
	r.sent = append(r.sent, msgs...)
	r.mu.Unlock()
}

func (r *sendRecorder) take() []*raftpb.Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.sent
	r.sent = nil
	return out
}

func thriftyApp(to, index, commit uint64, n int) *raftpb.Message {
	m := &raftpb.Message{Type: raftpb.MsgApp.Enum(), To: proto.Uint64(to), From: proto.Uint64(1),
		Term: proto.Uint64(3), LogTerm: proto.Uint64(3), Index: proto.Uint64(index), Commit: proto.Uint64(commit)}
	for i := range n {
		m.Entries = append(m.Entries, &raftpb.Entry{Index: proto.Uint64(index + 1 + uint64(i)), Term: proto.Uint64(3), Data: []byte("x")})
	}
	return m
}

func entryIndexes(m *raftpb.Message) []uint64 {
	var out []uint64
	for _, e := range m.Entries {
		out = append(out, e.GetIndex())
	}
	return out
}

// A lazy follower's appends are held and merged; the eager follower's go
// at once; any other message to the lazy follower releases what is held
// ahead of itself.
func TestThriftyHoldsMergesAndReleasesInOrder(t *testing.T) {
	rec := &sendRecorder{}
	th := newThrifty(time.Hour, time.Second, rec, 1<<20) // no timer flush during the test
	th.held[3] = &heldApps{}

	th.send([]*raftpb.Message{thriftyApp(2, 10, 9, 2), thriftyApp(3, 10, 9, 2)})
	th.send([]*raftpb.Message{thriftyApp(2, 12, 11, 1), thriftyApp(3, 12, 11, 1)})
	got := rec.take()
	if len(got) != 2 || got[0].GetTo() != 2 || got[1].GetTo() != 2 {
		t.Fatalf("sent %v, want only the two appends to the eager follower 2", got)
	}
	hb := &raftpb.Message{Type: raftpb.MsgHeartbeat.Enum(), To: proto.Uint64(3), From: proto.Uint64(1), Term: proto.Uint64(3)}
	th.send([]*raftpb.Message{hb})
	got = rec.take()
	if len(got) != 2 {
		t.Fatalf("heartbeat released %d messages, want the merged append and the heartbeat", len(got))
	}
	m := got[0]
	if m.GetType() != raftpb.MsgApp || m.GetIndex() != 10 || m.GetLogTerm() != 3 || m.GetCommit() != 11 ||
		!slices.Equal(entryIndexes(m), []uint64{11, 12, 13}) {
		t.Fatalf("merged append = index %d logterm %d commit %d entries %v, want index 10 logterm 3 commit 11 entries [11 12 13]",
			m.GetIndex(), m.GetLogTerm(), m.GetCommit(), entryIndexes(m))
	}
	if got[1] != hb {
		t.Fatalf("second message %v, want the heartbeat after the append", got[1])
	}
}

// Appends that do not continue each other (a probe after a rejection) or
// that would pass the size budget are not merged.
func TestThriftyMergesOnlyContiguousWithinBudget(t *testing.T) {
	rec := &sendRecorder{}
	th := newThrifty(time.Hour, time.Second, rec, 3*(1+16))
	th.held[3] = &heldApps{}
	th.send([]*raftpb.Message{thriftyApp(3, 10, 9, 2), thriftyApp(3, 20, 9, 1)}) // gap: two messages
	if got := rec.take(); len(got) != 0 {
		t.Fatalf("sent %d messages to a lazy follower, want them held", len(got))
	}
	th.send([]*raftpb.Message{thriftyApp(3, 21, 9, 1)}) // budget: 4 entries > 3, releases the held two
	got := rec.take()
	if len(got) != 2 || got[0].GetIndex() != 10 || got[1].GetIndex() != 20 || len(got[1].Entries) != 1 {
		t.Fatalf("over the budget released %d messages, want the two held ones unmerged", len(got))
	}
	th.choose(false, 1, tracker.Config{}, nil, time.Time{}) // leadership lost: release the rest
	got = rec.take()
	if len(got) != 1 || got[0].GetIndex() != 21 {
		t.Fatalf("losing leadership released %d messages, want the append at 21", len(got))
	}
	if len(th.held) != 0 {
		t.Fatalf("lazy followers %v after losing leadership, want none", th.held)
	}
}

// What is held goes out after the delay without any other message.
func TestThriftyReleasesAfterTheDelay(t *testing.T) {
	rec := &sendRecorder{}
	th := newThrifty(10*time.Millisecond, time.Second, rec, 1<<20)
	th.held[3] = &heldApps{}
	th.send([]*raftpb.Message{thriftyApp(3, 10, 9, 1)})
	var got []*raftpb.Message
	waitFor(t, 5*time.Second, "the held append", func() bool { got = append(got, rec.take()...); return len(got) > 0 })
	if len(got) != 1 || got[0].GetIndex() != 10 {
		t.Fatalf("released %d messages, want the append at 10", len(got))
	}
}

// The quiet eager follower (not busy, not lazy) gets appends with entries
// at once, but an append that only carries a commit index waits for the
// next message to it, which it precedes, or for the delay; successive ones
// merge into the latest commit. A busy eager follower gets every append at
// once, and so does everyone once leadership is lost.
func TestThriftyHoldsCommitOnlyAppendsToAQuietFollower(t *testing.T) {
	rec := &sendRecorder{}
	th := newThrifty(time.Hour, time.Minute, rec, 1<<20)
	prs := map[uint64]tracker.Progress{1: {Match: 20}, 2: {Match: 20}, 3: {Match: 10}}
	now := time.Now()
	th.choose(true, 1, voters(1, 2, 3), prs, now)
	if th.held[3] == nil || th.commits[2] == nil || len(th.commits) != 1 {
		t.Fatalf("lazy %v, quiet %v: want 3 lazy and 2 quiet", th.held, th.commits)
	}
	th.send([]*raftpb.Message{thriftyApp(2, 20, 19, 0)})
	th.send([]*raftpb.Message{thriftyApp(2, 20, 20, 0)})
	if got := rec.take(); len(got) != 0 {
		t.Fatalf("sent %d commit-only appends to the quiet follower, want them held", len(got))
	}
	next := thriftyApp(2, 20, 20, 1)
	th.send([]*raftpb.Message{next})
	got := rec.take()
	if len(got) != 2 || got[1] != next || got[0].GetCommit() != 20 || len(got[0].Entries) != 0 || got[0].GetIndex() != 20 {
		t.Fatalf("the next append released %v, want one commit-only append with commit 20, then the append", got)
	}

	th.markBusy(2, now)
	th.choose(true, 1, voters(1, 2, 3), prs, now)
	if len(th.commits) != 0 {
		t.Fatalf("quiet followers %v, want none once 2 forwarded a request", th.commits)
	}
	th.send([]*raftpb.Message{thriftyApp(2, 21, 21, 0)})
	if got := rec.take(); len(got) != 1 {
		t.Fatalf("sent %d messages to a busy eager follower, want its commit-only append at once", len(got))
	}

	th = newThrifty(10*time.Millisecond, time.Minute, rec, 1<<20)
	th.choose(true, 1, voters(1, 2, 3), prs, now)
	th.send([]*raftpb.Message{thriftyApp(2, 21, 21, 0)})
	got = nil
	waitFor(t, 5*time.Second, "the held commit-only append", func() bool { got = append(got, rec.take()...); return len(got) > 0 })
	if len(got) != 1 || got[0].GetCommit() != 21 {
		t.Fatalf("released %v after the delay, want the commit-only append", got)
	}
	th.send([]*raftpb.Message{thriftyApp(2, 22, 22, 0)})
	th.choose(false, 1, tracker.Config{}, nil, time.Time{})
	if got := rec.take(); len(got) != 1 || got[0].GetCommit() != 22 || len(th.commits) != 0 {
		t.Fatalf("losing leadership released %v (quiet %v), want the held commit-only append and none quiet", got, th.commits)
	}
}

func voters(ids ...uint64) tracker.Config {
	mc := quorum.MajorityConfig{}
	for _, id := range ids {
		mc[id] = struct{}{}
	}
	return tracker.Config{Voters: quorum.JointConfig{mc, nil}}
}

func TestPickLazy(t *testing.T) {
	prs := map[uint64]tracker.Progress{1: {Match: 50}, 2: {Match: 40}, 3: {Match: 30}, 4: {Match: 45}, 5: {Match: 20}}
	idle := func(uint64) bool { return false }
	busy := func(ids ...uint64) func(uint64) bool { return func(id uint64) bool { return slices.Contains(ids, id) } }
	joint := voters(1, 2, 3)
	joint.Voters[1] = quorum.MajorityConfig{1: {}, 2: {}}
	for _, tc := range []struct {
		name  string
		cfg   tracker.Config
		busy  func(uint64) bool
		want  []uint64
		quiet []uint64
	}{
		{"one member", voters(1), idle, nil, nil},
		{"two members: the follower is needed", voters(1, 2), idle, nil, nil},
		{"three: the less advanced follower", voters(1, 2, 3), idle, []uint64{3}, []uint64{2}},
		{"three: a busy follower stays eager", voters(1, 2, 3), busy(3), []uint64{2}, nil},
		{"three: both busy", voters(1, 2, 3), busy(2, 3), nil, nil},
		{"five: the two least advanced", voters(1, 2, 3, 4, 5), idle, []uint64{3, 5}, []uint64{2, 4}},
		{"five: one busy", voters(1, 2, 3, 4, 5), busy(5), []uint64{2, 3}, []uint64{4}},
		{"a joint configuration", joint, idle, nil, nil},
		{"not a voter itself", voters(2, 3, 4), idle, nil, nil},
	} {
		got, quiet := pickLazy(1, tc.cfg, prs, tc.busy)
		slices.Sort(got)
		slices.Sort(quiet)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: lazy %v, want %v", tc.name, got, tc.want)
		}
		if !slices.Equal(quiet, tc.quiet) {
			t.Errorf("%s: quiet %v, want %v", tc.name, quiet, tc.quiet)
		}
	}
}

func (n *Node) lazyFollowers() []uint64 {
	n.th.mu.Lock()
	defer n.th.mu.Unlock()
	var ids []uint64
	for id := range n.th.held {
		ids = append(ids, id)
	}
	return ids
}

// A three-member cluster with thrifty replication keeps one follower lazy,
// which still receives every entry; when the eager follower stops, the
// lazy one takes its place and writes keep committing.
func TestThriftyClusterSwitchesWhenTheEagerFollowerStops(t *testing.T) {
	c := newTestCluster(t, 3, testSeed(t).Int63(), false, func(cfg *Config) { cfg.ThriftyDelay = 20 * time.Millisecond })
	l := c.leader()
	for i := range 20 {
		c.propose(l, fmt.Appendf(nil, "before/%d", i))
	}
	var lazy []uint64
	waitFor(t, 10*time.Second, "one lazy follower", func() bool { lazy = c.nodes[l].lazyFollowers(); return len(lazy) == 1 })
	lazyIdx, eagerIdx := -1, -1
	for i, nd := range c.nodes {
		switch {
		case i == l:
		case nd.ID() == lazy[0]:
			lazyIdx = i
		default:
			eagerIdx = i
		}
	}
	waitFor(t, 10*time.Second, "the lazy follower to apply every entry", func() bool { return c.sms[lazyIdx].hasSeen("before/19") })

	c.stop(eagerIdx)
	for i := range 20 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := c.nodes[l].Propose(ctx, fmt.Appendf(nil, "after/%d", i))
		cancel()
		if err != nil {
			t.Fatalf("propose after the eager follower stopped: %v", err)
		}
	}
	waitFor(t, 10*time.Second, "the writes to commit on the remaining follower", func() bool { return c.sms[lazyIdx].hasSeen("after/19") })
	// The first write after the stop waited for a release; by then the
	// remaining follower had passed the stopped one and took its place.
	if ids := c.nodes[l].lazyFollowers(); len(ids) != 1 || ids[0] != c.ids[eagerIdx] {
		t.Fatalf("lazy followers %x after the eager one %x stopped, want only the stopped one", ids, c.ids[eagerIdx])
	}
}

// A follower that forwards proposals or read-index requests is busy: it is
// never held back, so its own clients' writes and linearizable reads are
// answered without the delay.
func TestThriftyForwardingFollowerIsEager(t *testing.T) {
	for _, tc := range []struct {
		name    string
		forward func(c *testCluster, i int)
	}{
		{"proposal", func(c *testCluster, i int) { c.propose(i, []byte("from the lazy follower")) }},
		{"read index", func(c *testCluster, i int) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := c.nodes[i].ReadIndex(ctx); err != nil {
				t.Fatalf("read index on the lazy follower: %v", err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newTestCluster(t, 3, testSeed(t).Int63(), false, func(cfg *Config) { cfg.ThriftyDelay = 20 * time.Millisecond })
			l, hi := idleLazyFollower(t, c)
			tc.forward(c, hi)
			waitFor(t, 10*time.Second, "the forwarding follower to be eager", func() bool {
				ids := c.nodes[l].lazyFollowers()
				return len(ids) == 1 && ids[0] != c.ids[hi]
			})
		})
	}
}

// idleLazyFollower returns the leader and the follower it holds once the
// cluster is idle: both followers reach the same match index and the tie
// makes the one with the higher ID lazy; from then on only busyness can
// make it eager (the other acknowledges first).
func idleLazyFollower(t *testing.T, c *testCluster) (leader, lazy int) {
	t.Helper()
	l := c.leader()
	c.propose(l, []byte("warm-up"))
	hi := -1
	for i := range c.nodes {
		if i != l && (hi < 0 || c.ids[i] > c.ids[hi]) {
			hi = i
		}
	}
	waitFor(t, 10*time.Second, "the higher-ID follower to be lazy", func() bool {
		ids := c.nodes[l].lazyFollowers()
		return len(ids) == 1 && ids[0] == c.ids[hi]
	})
	return l, hi
}

// ToleratesLazyApply is the test state machine's LazyApplyTolerant: entries
// marked lazyOK may be applied late by the member that proposed them.
func (s *testSM) ToleratesLazyApply(data []byte) bool { return bytes.HasPrefix(data, lazyOK) }

var lazyOK = []byte("lazy-ok:")

// markedBusy reports whether id forwarded a request within busyFor.
func (n *Node) markedBusy(id uint64) bool {
	n.th.mu.Lock()
	defer n.th.mu.Unlock()
	at, ok := n.th.busy[id]
	return ok && time.Since(at) < n.th.busyFor
}

// A follower forwarding only entries the state machine says it may apply
// late (lock ops, whose results the leader pushes) is not marked busy; one
// forwarding anything else is.
func TestThriftyLazyTolerantProposalsKeepTheFollowerLazy(t *testing.T) {
	c := newTestCluster(t, 3, testSeed(t).Int63(), false, func(cfg *Config) { cfg.ThriftyDelay = 20 * time.Millisecond })
	l := c.leader()
	f := (l + 1) % 3
	// Members publish their attributes through raft at start: ordinary
	// proposals, forwarded by the followers.
	waitFor(t, 10*time.Second, "attributes published", c.attrsPublished)
	waitFor(t, 10*time.Second, "the follower's start-up proposals aged out", func() bool { return !c.nodes[l].markedBusy(c.ids[f]) })
	for i := range 5 {
		v := append(append([]byte(nil), lazyOK...), byte('0'+i))
		c.propose(f, v)
		waitFor(t, 10*time.Second, "the tolerant entry applied on the leader", func() bool { return c.sms[l].hasSeen(string(v)) })
	}
	if c.nodes[l].markedBusy(c.ids[f]) {
		t.Fatal("a follower that forwarded only lazy-tolerant entries was marked busy")
	}
	c.propose(f, []byte("needs its own apply"))
	waitFor(t, 10*time.Second, "the follower marked busy after an ordinary proposal", func() bool { return c.nodes[l].markedBusy(c.ids[f]) })
}

// A follower whose state machine wants every entry promptly (it has
// watchers: Config.WantsEager) tells its leader and is not held, even when
// idle and otherwise the lazy one; when it stops wanting that, it is held
// again.
func TestThriftyFollowerWantingEagerIsNotHeld(t *testing.T) {
	c, wants := wantsEagerCluster(t)
	l, hi := idleLazyFollower(t, c)
	w := wants(hi)
	w.Store(true)
	waitFor(t, 10*time.Second, "the follower with watchers to be eager", func() bool {
		ids := c.nodes[l].lazyFollowers()
		return len(ids) == 1 && ids[0] != c.ids[hi]
	})
	if c.nodes[hi].eagerSent.Load() == 0 {
		t.Fatal("eager without having said so")
	}
	w.Store(false)
	waitFor(t, 10*time.Second, "the follower without watchers to be lazy again", func() bool {
		ids := c.nodes[l].lazyFollowers()
		return len(ids) == 1 && ids[0] == c.ids[hi]
	})
}

// SayEager tells the leader at once, not at the next periodic reminder,
// that a follower now wants to be eager: the first events after a
// follower's first watch must not wait for the thrifty delay. Here the
// follower wants it only while SayEager runs, so no reminder says it.
func TestSayEagerIsHeardAtOnce(t *testing.T) {
	c, wants := wantsEagerCluster(t)
	l, hi := idleLazyFollower(t, c)
	w := wants(hi)
	sent := c.nodes[hi].eagerSent.Load()
	w.Store(true)
	c.nodes[hi].SayEager()
	w.Store(false)
	if got := c.nodes[hi].eagerSent.Load() - sent; got < 1 {
		t.Fatal("SayEager sent nothing")
	}
	waitFor(t, 10*time.Second, "the follower that said it wants to be eager to be eager", func() bool {
		ids := c.nodes[l].lazyFollowers()
		return len(ids) == 1 && ids[0] != c.ids[hi]
	})
}

// wantsEagerCluster starts a 3-member cluster with thrifty replication
// whose members want to be eager (Config.WantsEager) when the test says
// so: wants(i) is member i's switch.
func wantsEagerCluster(t *testing.T) (*testCluster, func(i int) *atomic.Bool) {
	var wants sync.Map // member name → *atomic.Bool
	c := newTestCluster(t, 3, testSeed(t).Int63(), false, func(cfg *Config) {
		cfg.ThriftyDelay = 20 * time.Millisecond
		w := &atomic.Bool{}
		wants.Store(cfg.Name, w)
		cfg.WantsEager = w.Load
	})
	return c, func(i int) *atomic.Bool {
		w, _ := wants.Load(c.names[i])
		return w.(*atomic.Bool)
	}
}
