package raftnode

import (
	"sync"

	"go.etcd.io/raft/v3/raftpb"
)

// msgNotice carries a notice from the state machine on one member to the
// state machine on another (Node.SendNotice, Config.OnNotice) on the raft
// stream, next to raft's own messages. It borrows a raft message type that
// raft uses only between a node and its local storage threads (asynchronous
// storage writes, which raftnode does not enable), so no raft message from a
// peer has it: Process takes notices out before raft sees them, and a raft
// that did see one would refuse it as a local message from a peer.
const msgNotice = raftpb.MsgStorageApplyResp

// msgEager, from a follower to its leader, says the follower serves clients
// that need every entry applied there promptly (Config.WantsEager: it has
// watchers), so thrifty replication must not hold its appends. Another type
// raft keeps local, taken out in Process like msgNotice.
const msgEager = raftpb.MsgStorageAppendResp

// msgConfChangeDropped, from a leader to the follower that forwarded a
// conf change, says the leader's raft dropped it (an earlier change may
// still be unapplied); Context holds the change's Id. Only the leader can
// see the refusal: raft swaps the entry for an empty one, and the
// follower's caller would otherwise wait out its deadline
// (Node.stepForwardedConfChanges). A third type raft keeps local.
const msgConfChangeDropped = raftpb.MsgStorageApply

// eagerEvery is how often, in ticks, a follower that wants to be eager
// says so: a quarter of the time the leader remembers it (an election
// timeout), so a lost message or two change nothing.
func (n *Node) eagerEvery() int { return max(1, n.cfg.ElectionTicks/4) }

// SayEager tells the leader now, not at the next periodic reminder, that
// this member wants to be eager, if Config.WantsEager says so. Call it when
// that may have turned true (the first watcher): until the leader hears it,
// this member may be the follower thrifty replication holds back. It sends
// one message and never blocks; it must not be called where WantsEager
// cannot run.
func (n *Node) SayEager() {
	if n.started.Load() && n.sayEager() {
		n.eagerAtOnce.Add(1)
	}
}

// EagerRequestsSent counts the messages this member sent its leader to
// ask that its appends not be held (Config.WantsEager): all of them, and
// those SayEager sent at once rather than at the periodic reminder
// (metrics; tests prove the first watcher's call by it).
func (n *Node) EagerRequestsSent() (all, atOnce uint64) {
	return n.eagerSent.Load(), n.eagerAtOnce.Load()
}

// sayEager tells the leader this member wants to be eager, when it does;
// it reports whether it did.
func (n *Node) sayEager() bool {
	if n.cfg.WantsEager == nil || n.isLeader.Load() || !n.cfg.WantsEager() {
		return false
	}
	lead := n.leadNow.Load()
	if lead == 0 || lead == n.id {
		return false
	}
	n.eagerSent.Add(1)
	n.tr.Send([]*raftpb.Message{{Type: msgEager.Enum(), To: new(lead), From: new(n.id)}})
	return true
}

// SendNotice sends payload to member to's Config.OnNotice. A notice is a
// hint: it may be lost (the peer is down or its stream backlog is full),
// arrives after or before raft messages sent around it, and must never be
// needed for correctness. It skips thrifty replication's hold: a notice
// does not depend on the appends held for that peer. Notices sent while
// the state machine's Committed runs are sent together when it returns
// (noticeBatch).
func (n *Node) SendNotice(to uint64, payload []byte) {
	if to == n.id || to == 0 || !n.started.Load() {
		return
	}
	n.notices.Add(1)
	m := &raftpb.Message{Type: msgNotice.Enum(), To: new(to), From: new(n.id), Context: payload}
	if n.noticeBatch.add(m) {
		return
	}
	n.tr.Send([]*raftpb.Message{m})
}

// noticeBatch collects the notices sent during one apply batch's
// Committed, where the lock service pushes a grant and a result for
// every lock op the batch applied, so that they reach each peer in one
// Transport.Send: one socket write per peer and batch instead of one per
// notice (50 clients on 50 locks, alternating 8 s runs: 3,410–4,177
// cycles/s sending each at once, 3,680–4,380 batched). Holding them for
// the length of Committed delays none: nothing is written to any peer
// meanwhile. A notice sent from another goroutine in that window simply
// joins the batch.
type noticeBatch struct {
	mu      sync.Mutex
	holding bool
	msgs    []*raftpb.Message
}

// hold starts collecting.
func (b *noticeBatch) hold() {
	b.mu.Lock()
	b.holding = true
	b.mu.Unlock()
}

// add collects m and reports true while holding.
func (b *noticeBatch) add(m *raftpb.Message) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.holding {
		return false
	}
	b.msgs = append(b.msgs, m)
	return true
}

// release stops collecting and returns what was collected.
func (b *noticeBatch) release() []*raftpb.Message {
	b.mu.Lock()
	defer b.mu.Unlock()
	msgs := b.msgs
	b.msgs, b.holding = nil, false
	return msgs
}

// committed runs the state machine's Committed with its notices batched.
func (n *Node) committed() {
	n.noticeBatch.hold()
	defer func() {
		if msgs := n.noticeBatch.release(); len(msgs) > 0 {
			n.tr.Send(msgs)
		}
	}()
	n.sm.Committed()
}

// processNotice hands a received notice to the state machine.
func (n *Node) processNotice(m *raftpb.Message) {
	if f := n.cfg.OnNotice; f != nil {
		f(m.GetFrom(), m.GetContext())
	}
}

// NoticesSent counts the notices this member sent (metrics).
func (n *Node) NoticesSent() uint64 { return n.notices.Load() }
