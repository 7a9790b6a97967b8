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
)

// deferSM is a testSM that calls proposals starting with "defer/"
// deferrable and records the index each entry was applied at.
type deferSM struct {
	*testSM
	mu    sync.Mutex
	index map[string]uint64
}

func (s *deferSM) Deferrable(data []byte) bool { return bytes.HasPrefix(data, []byte("defer/")) }

func (s *deferSM) ApplyEntry(b *pebble.Batch, index, term uint64, data []byte) {
	s.testSM.ApplyEntry(b, index, term, data)
	s.mu.Lock()
	s.index[string(data)] = index
	s.mu.Unlock()
}

func (s *deferSM) indexOf(v string) (uint64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i, ok := s.index[v]
	return i, ok
}

// applied is a waitFor condition: v has been applied on s.
func (s *deferSM) applied(v string) func() bool {
	return func() bool { _, ok := s.indexOf(v); return ok }
}

func newDeferCluster(t *testing.T, linger time.Duration) (*testCluster, []*deferSM) {
	var sms []*deferSM
	c := newTestCluster(t, 3, testSeed(t).Int63(), false, func(cfg *Config) {
		d := &deferSM{testSM: newTestSM(), index: map[string]uint64{}}
		sms = append(sms, d)
		cfg.StateMachine = d
		cfg.DeferLinger = linger
	})
	for i, d := range sms {
		c.sms[i] = d.testSM
	}
	// Every member publishes its client URLs through raft after it starts;
	// wait for those proposals so that only the test's own are in flight.
	waitFor(t, 10*time.Second, "every member's published attributes, on every member", c.attrsPublished)
	l := c.leader()
	c.propose(l, []byte("barrier/0"))
	waitFor(t, 10*time.Second, "the leader to record as applied all it knows committed", leaderCaughtUp(c, l))
	return c, sms
}

// leaderCaughtUp is a waitFor condition: member l counts as applied every
// entry it knows committed, so it defers again (Node.deferrable). A test
// state machine sees an entry in ApplyEntry, before its batch is in the
// store and the node counts it, so a test that proposes as soon as it saw
// the entry before can find the leader not deferring.
func leaderCaughtUp(c *testCluster, l int) func() bool {
	return func() bool { n := c.nodes[l]; return n.smApplied.Load() >= n.commitSeen.Load() }
}

// A caller answered from the state machine's Committed — as the lock
// service answers an Unlock — that proposes again at once finds the leader
// deferring: the leader counts the batch applied before Committed runs, not
// after (when it moves the index that read-index waiters wait for).
func TestDeferrableWhenCommittedAnswers(t *testing.T) {
	c, sms := newDeferCluster(t, time.Hour)
	l := c.leader()
	var verdict atomic.Int32 // 0: not asked yet, 1: would defer, 2: would not
	hook := func() {
		if verdict.Load() == 0 && sms[l].hasSeen("barrier/answered") {
			v := int32(2)
			if c.nodes[l].deferrable([]byte("defer/right-after")) {
				v = 1
			}
			verdict.Store(v)
		}
	}
	sms[l].onCommitted.Store(&hook)
	c.propose(l, []byte("barrier/answered"))
	waitFor(t, 10*time.Second, "Committed of the batch holding the barrier", func() bool { return verdict.Load() != 0 })
	if verdict.Load() != 1 {
		t.Fatal("in Committed of the batch that applied everything it knew committed, the leader would not defer a deferrable proposal")
	}
}

// A deferrable proposal waits on the leader — made there or forwarded by a
// follower — until the next other proposal, and is appended right before
// it (in arrival order), so both share one raft round.
func TestDeferredProposalRidesWithTheNext(t *testing.T) {
	c, sms := newDeferCluster(t, time.Hour) // only company releases it here
	l := c.leader()
	f := (l + 1) % 3
	for i, v := range []string{"defer/from-leader", "defer/from-follower"} {
		at := l
		if i == 1 {
			at = f
		}
		if err := proposeOnce(c, at, v); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 10*time.Second, fmt.Sprintf("the leader to hold %d deferred proposals", i+1), func() bool {
			return c.nodes[l].DeferredProposals() == uint64(i+1)
		})
	}
	c.propose(l, []byte("barrier/1")) // not deferrable: releases both
	for _, v := range []string{"defer/from-leader", "defer/from-follower"} {
		waitFor(t, 10*time.Second, v+" applied everywhere", func() bool {
			for _, s := range sms {
				if _, ok := s.indexOf(v); !ok {
					return false
				}
			}
			return true
		})
	}
	a, _ := sms[l].indexOf("defer/from-leader")
	b, _ := sms[l].indexOf("defer/from-follower")
	n, _ := sms[l].indexOf("barrier/1")
	if !(a+1 == b && b+1 == n) {
		t.Fatalf("indices: deferred %d, %d, releasing proposal %d; want consecutive, deferred first in arrival order", a, b, n)
	}
}

// Without company a deferred proposal goes alone after the linger.
func TestDeferredProposalAloneAfterLinger(t *testing.T) {
	c, sms := newDeferCluster(t, 20*time.Millisecond)
	l := c.leader()
	if err := proposeOnce(c, l, "defer/alone"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the lone deferred proposal to be applied", sms[l].applied("defer/alone"))
	if c.nodes[l].DeferredProposals() != 1 {
		t.Fatalf("the leader deferred %d proposals, want 1", c.nodes[l].DeferredProposals())
	}
	// A follower does not defer: its proposal is forwarded at once, and
	// the leader defers it.
	waitFor(t, 10*time.Second, "the leader to record the lone proposal as applied", leaderCaughtUp(c, l))
	f := (l + 1) % 3
	if err := proposeOnce(c, f, "defer/forwarded"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the forwarded deferred proposal to be applied", sms[f].applied("defer/forwarded"))
	if c.nodes[f].DeferredProposals() != 0 || c.nodes[l].DeferredProposals() != 2 {
		t.Fatalf("deferred: follower %d, leader %d; want 0 and 2", c.nodes[f].DeferredProposals(), c.nodes[l].DeferredProposals())
	}
}

// proposeOnce hands data to member i's Propose without waiting for the apply.
func proposeOnce(c *testCluster, i int, data string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return c.nodes[i].Propose(ctx, []byte(data))
}

// A leader that knows of committed entries it has not applied yet does not
// defer: its state machine cannot tell whether the lock is still held (one
// of those entries may be the release), and waiting for company that never
// comes cost a lone client the whole linger.
func TestNoDeferralWhileCommittedEntriesAwaitApply(t *testing.T) {
	c, sms := newDeferCluster(t, time.Hour) // a deferred proposal would never go
	l := c.leader()
	f := (l + 1) % 3
	c.nodes[l].applyMu.Lock() // the leader commits but applies nothing
	locked := true
	defer func() {
		if locked {
			c.nodes[l].applyMu.Unlock()
		}
	}()
	if err := proposeOnce(c, l, "barrier/pending"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "a follower to apply the barrier the leader has not", sms[f].applied("barrier/pending"))
	if err := proposeOnce(c, l, "defer/behind-pending"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the deferrable proposal applied on a follower without company", sms[f].applied("defer/behind-pending"))
	if got := c.nodes[l].DeferredProposals(); got != 0 {
		t.Fatalf("the leader deferred %d proposals while behind on apply, want 0", got)
	}
	c.nodes[l].applyMu.Unlock()
	locked = false
	// Caught up, the leader defers again.
	waitFor(t, 10*time.Second, "the leader to apply what it committed", sms[l].applied("defer/behind-pending"))
	waitFor(t, 10*time.Second, "the leader to record it as applied", leaderCaughtUp(c, l))
	if err := proposeOnce(c, l, "defer/caught-up"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the caught-up leader to defer", func() bool {
		return c.nodes[l].DeferredProposals() == 1
	})
}
