package raftnode

import (
	"context"
	"sync"
	"sync/atomic"

	"go.etcd.io/raft/v3/raftpb"
)

// The leader's proposals wait in a buffer that the Ready loop steps into
// raft as one message before it takes each Ready (propBuffer).
//
// Stepping each proposal on its own made raft build a MsgApp per follower
// per proposal (every raft message allocates a pointer per field), each
// follower answer each of them, and the leader step every answer and
// broadcast the commit it moved: with 50 clients, several messages per
// entry on every member, although the Ready loop wrote them all in the same
// few frames anyway. One MsgProp per Ready carries every proposal that came
// in while the previous Ready was being persisted, so raft sends one append
// per follower per Ready. A proposal on an idle leader waits for nothing
// more than before: the Ready loop it pokes steps it at once.

// propBatch is the proposals collected for one step.
type propBatch struct {
	ents []*raftpb.Entry
	done chan struct{} // closed once stepped
	err  error         // the step's result, set before done closes
}

type propBuffer struct {
	mu    sync.Mutex
	cur   *propBatch
	added atomic.Uint64 // entries ever buffered (tests)
}

// add queues ents for the next step and returns the batch they joined.
func (b *propBuffer) add(ents ...*raftpb.Entry) *propBatch {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cur == nil {
		b.cur = &propBatch{done: make(chan struct{})}
	}
	b.cur.ents = append(b.cur.ents, ents...)
	b.added.Add(uint64(len(ents)))
	return b.cur
}

// take removes the pending batch (nil when none).
func (b *propBuffer) take() *propBatch {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.cur
	b.cur = nil
	return p
}

// bufferProposal queues ents on the leader and waits until the Ready loop has
// stepped it, returning raft's verdict (ErrProposalDropped, …).
func (n *Node) bufferProposal(ctx context.Context, ents ...*raftpb.Entry) error {
	p := n.props.add(ents...)
	n.rn.poke()
	select {
	case <-p.done:
		return p.err
	case <-ctx.Done():
		return ctx.Err()
	case <-n.stopc:
		return ErrStopped
	}
}

// stepProposals steps the buffered proposals, behind any deferred ones, as
// one message (or the deferred ones alone once their linger passed). Ready
// loop only: it alone steps proposals on the leader, so their order is the
// order in which they reached the buffer and the deferred queue.
func (n *Node) stepProposals() {
	p := n.props.take()
	ents := n.takeDeferred(p != nil)
	if p != nil {
		ents = append(ents, p.ents...)
	}
	if len(ents) > 0 {
		// A member that lost leadership since the proposals came in hands
		// them to its new leader, or drops them while it knows none.
		err := n.rn.stepProposal(&raftpb.Message{Type: raftpb.MsgProp.Enum(), Entries: ents})
		if p != nil {
			p.err = err
		}
	}
	if p != nil {
		close(p.done)
	}
}
