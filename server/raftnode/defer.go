package raftnode

import (
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3/raftpb"
)

// ProposalDeferrer is optionally implemented by a StateMachine. On the
// leader, a proposal it calls deferrable — made on this member or forwarded
// by a follower — is not handed to raft at once: it waits for the next
// proposal that is not deferrable and goes to raft in the same message, so
// both are appended together (one log write, one fsync and one replication
// round per member for both), or for Config.DeferLinger, whichever comes
// first. Meant for proposals that gain nothing from an early round, such as
// a lock acquire that will queue behind an owner anyway: every round it
// rides along with saves the cluster one. Deferrable runs on proposing
// goroutines and must be cheap and must not block on raft.
type ProposalDeferrer interface {
	Deferrable(data []byte) bool
}

// DefaultDeferLinger bounds how long a deferred proposal waits for company
// (Config.DeferLinger). A lock hand-off on this project's reference machine
// takes 2–3 ms, so an acquire queued behind an owner nearly always finds
// the owner's release to ride with well within it.
const DefaultDeferLinger = 5 * time.Millisecond

// deferQueue holds the leader's deferred entries in arrival order.
type deferQueue struct {
	mu    sync.Mutex
	ents  []*raftpb.Entry
	armed bool          // a linger timer is pending for ents
	flush bool          // the linger passed: step ents even alone
	held  atomic.Uint64 // proposals ever deferred (metrics)
}

// deferrable reports whether data should wait in the deferred queue.
//
// Only while the leader has applied every entry it knows committed
// (smApplied, which its clients' answers never run ahead of): the deferrer
// judges by the applied state, and a committed entry not yet applied may be
// the very release the proposal would wait for. A client
// that released a lock through a follower learns of it once the follower
// applied the release, which can be before the leader did; its next
// acquire then found the lock still held on the leader and, with nobody
// else proposing, waited the whole linger (the 1-client lock benchmark's
// p99 acquire was 6–7 ms against a p50 under 1 ms).
func (n *Node) deferrable(data []byte) bool {
	return n.deferrer != nil && len(data) > 0 && data[0] != internalPrefix && n.isLeader.Load() &&
		n.smApplied.Load() >= n.commitSeen.Load() && n.deferrer.Deferrable(data)
}

// deferEntry queues data and arms the linger timer if needed.
func (n *Node) deferEntry(data []byte) {
	n.deferred.mu.Lock()
	n.deferred.ents = append(n.deferred.ents, &raftpb.Entry{Data: data})
	n.deferred.held.Add(1)
	arm := !n.deferred.armed
	n.deferred.armed = true
	n.deferred.mu.Unlock()
	if arm {
		time.AfterFunc(n.cfg.DeferLinger, n.flushDeferred)
	}
}

// flushDeferred has the Ready loop propose whatever waited a whole linger
// without company. Raft drops the proposal if this member stopped leading
// (or forwards it to a known leader); the proposers then time out as for
// any lost entry.
func (n *Node) flushDeferred() {
	n.deferred.mu.Lock()
	n.deferred.armed = false
	n.deferred.flush = true
	n.deferred.mu.Unlock()
	n.rn.poke()
}

// takeDeferred removes and returns the deferred entries when they should
// be stepped now: with company (more is true) or after their linger. The
// caller steps them ahead of that company: they arrived first, and an
// acquire that found its lock free must not overtake one that was deferred
// while the lock was held.
func (n *Node) takeDeferred(more bool) []*raftpb.Entry {
	if n.deferrer == nil {
		return nil
	}
	n.deferred.mu.Lock()
	defer n.deferred.mu.Unlock()
	if !more && !n.deferred.flush {
		return nil
	}
	n.deferred.flush = false
	ents := n.deferred.ents
	n.deferred.ents = nil
	return ents
}

// deferForwarded moves the deferrable entries of a forwarded proposal to
// the deferred queue and returns the message with the rest (nil when none
// are left).
func (n *Node) deferForwarded(m *raftpb.Message) *raftpb.Message {
	if n.deferrer == nil || !n.isLeader.Load() {
		return m
	}
	m, _ = takeEntries(m, func(d []byte) bool {
		if !n.deferrable(d) {
			return false
		}
		n.deferEntry(d)
		return true
	})
	return m
}

// DeferredProposals counts proposals that waited in the deferred queue.
func (n *Node) DeferredProposals() uint64 { return n.deferred.held.Load() }
