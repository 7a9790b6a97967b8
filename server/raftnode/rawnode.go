package raftnode

import (
	"context"
	"errors"
	"sync"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
)

// rawNode drives a raft.RawNode from the ready loop. raft.Node runs the
// same RawNode in a goroutine of its own and reaches it through channels:
// every proposal, every message from a peer and every Ready then crossed
// one more goroutine hand-off on its way (proposer → raft goroutine →
// ready loop), and on a small machine each hand-off is a wake-up that waits
// for a CPU. Here callers step the RawNode directly under a mutex (stepping
// is in-memory and short) and poke the ready loop, which takes the Ready
// under the same mutex and persists, sends and applies it outside it.
//
// It keeps raft.Node's behaviour where the rest of the package relies on
// it: a proposal waits (up to its context) while no leader is known instead
// of being dropped at once, and everything fails with raft.ErrStopped after
// stop.
type rawNode struct {
	mu      sync.Mutex
	rn      *raft.RawNode
	id      uint64
	stopped bool
	lead    uint64        // leader as of the last Ready that reported one
	leadCh  chan struct{} // closed and replaced when lead changes
	wake    chan struct{} // capacity 1: there may be a Ready to take
	// confGen counts ApplyConfChange calls: with the term, it tells when a
	// configuration taken from Status may have changed (raft changes its
	// configuration only there, or in a follower restoring a snapshot).
	confGen uint64
}

func newRawNode(c *raft.Config, peers []raft.Peer) (*rawNode, error) {
	rn, err := raft.NewRawNode(c)
	if err != nil {
		return nil, err
	}
	if len(peers) > 0 {
		if err := rn.Bootstrap(peers); err != nil {
			return nil, err
		}
	}
	r := &rawNode{rn: rn, id: c.ID, leadCh: make(chan struct{}), wake: make(chan struct{}, 1)}
	r.poke() // a new member's bootstrap entries are its first Ready
	return r, nil
}

// poke tells the ready loop a Ready may be waiting.
func (r *rawNode) poke() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// do runs f on the RawNode unless stopped, then pokes the ready loop.
func (r *rawNode) do(f func(rn *raft.RawNode) error) error {
	r.mu.Lock()
	if r.stopped {
		r.mu.Unlock()
		return raft.ErrStopped
	}
	err := f(r.rn)
	r.mu.Unlock()
	r.poke()
	return err
}

func (r *rawNode) Tick() { _ = r.do(func(rn *raft.RawNode) error { rn.Tick(); return nil }) }

// Step steps a message from a peer or a local one (MsgProp waits for a
// leader, see propose). Unexpected local messages and responses from
// unknown peers are ignored, as raft.Node ignores them.
func (r *rawNode) Step(ctx context.Context, m *raftpb.Message) error {
	if m.GetType() == raftpb.MsgProp {
		return r.propose(ctx, m)
	}
	err := r.do(func(rn *raft.RawNode) error { return rn.Step(m) })
	if err == raft.ErrStepLocalMsg || err == raft.ErrStepPeerNotFound {
		return nil
	}
	return err
}

func (r *rawNode) Propose(ctx context.Context, data []byte) error {
	return r.propose(ctx, &raftpb.Message{Type: raftpb.MsgProp.Enum(), Entries: []*raftpb.Entry{{Data: data}}})
}

// errConfChangeDropped: this member is the leader and raft replaced the
// conf change with an empty entry, because an earlier one may still be
// unapplied (raft allows one pending change at a time). The change will
// never be applied; proposing it again later is safe.
var errConfChangeDropped = errors.New("raftnode: conf change dropped while an earlier one is pending")

// ProposeConfChange proposes cc. On the leader, raft's refusal is seen
// right away: it swaps the entry in the stepped message for an empty one
// (errConfChangeDropped). A follower forwards the message and cannot see
// the leader's refusal.
func (r *rawNode) ProposeConfChange(ctx context.Context, cc raftpb.ConfChangeI) error {
	m, err := confChangeMsg(cc)
	if err != nil {
		return err
	}
	if err := r.propose(ctx, m); err != nil {
		return err
	}
	return swapped(m)
}

// StepConfChangeNow steps m, a proposal holding one conf change a follower
// forwarded, without waiting for a leader (raft.ErrProposalDropped with
// none), and wakes the Ready loop to send it. On the leader raft's refusal
// is errConfChangeDropped, as for ProposeConfChange.
func (r *rawNode) StepConfChangeNow(m *raftpb.Message) error {
	err := r.stepProposal(m)
	r.poke()
	if err != nil {
		return err
	}
	return swapped(m)
}

// swapped is errConfChangeDropped when raft, stepping m, replaced its conf
// change with an empty entry.
func swapped(m *raftpb.Message) error {
	if m.GetEntries()[0].GetType() == raftpb.EntryNormal {
		return errConfChangeDropped
	}
	return nil
}

// confChangeMsg builds the proposal raft.RawNode.ProposeConfChange steps.
func confChangeMsg(cc raftpb.ConfChangeI) (*raftpb.Message, error) {
	typ, data, err := raftpb.MarshalConfChange(cc)
	if err != nil {
		return nil, err
	}
	return &raftpb.Message{Type: raftpb.MsgProp.Enum(), Entries: []*raftpb.Entry{{Type: typ.Enum(), Data: data}}}, nil
}

// propose steps a proposal once a leader is known; until then it waits for
// the next leader change, the context or stop.
func (r *rawNode) propose(ctx context.Context, m *raftpb.Message) error {
	for {
		r.mu.Lock()
		if r.stopped {
			r.mu.Unlock()
			return raft.ErrStopped
		}
		if r.lead != raft.None {
			m.From = new(r.id)
			err := r.rn.Step(m)
			r.mu.Unlock()
			r.poke()
			return err
		}
		ch := r.leadCh
		r.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// stepProposal steps a proposal without waiting for a leader: with none
// known it is dropped (raft.ErrProposalDropped). For the Ready loop, which
// must never wait here.
func (r *rawNode) stepProposal(m *raftpb.Message) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return raft.ErrStopped
	}
	if r.lead == raft.None {
		return raft.ErrProposalDropped
	}
	m.From = new(r.id)
	return r.rn.Step(m)
}

// ApplyConfChange applies even after stop: the apply loop persists the
// ConfState it returns, which must be the real one.
func (r *rawNode) ApplyConfChange(cc raftpb.ConfChangeI) *raftpb.ConfState {
	r.mu.Lock()
	cs := r.rn.ApplyConfChange(cc)
	r.confGen++
	r.mu.Unlock()
	r.poke()
	return cs
}

func (r *rawNode) Status() raft.Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.rn.Status()
}

// progressView is the leader's configuration and every peer's progress,
// kept across Readies by the one goroutine that refreshes it.
type progressView struct {
	prs       map[uint64]tracker.Progress
	cfg       tracker.Config
	gen, term uint64 // the confGen and term cfg was taken at
}

// refreshView brings v up to date. Status clones the configuration and
// every Progress on each call, and thrifty replication asks at every Ready
// of the leader; so the progress is read through WithProgress into v's map,
// and the configuration is taken from Status only when the term or
// confGen changed since v.cfg was.
func (r *rawNode) refreshView(v *progressView) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if t := r.rn.BasicStatus().HardState.GetTerm(); t != v.term || r.confGen != v.gen {
		v.cfg, v.gen, v.term = r.rn.Status().Config, r.confGen, t
	}
	if v.prs == nil {
		v.prs = map[uint64]tracker.Progress{}
	}
	clear(v.prs)
	r.rn.WithProgress(func(id uint64, _ raft.ProgressType, pr tracker.Progress) { v.prs[id] = pr })
}

func (r *rawNode) TransferLeadership(_ context.Context, _, to uint64) {
	_ = r.do(func(rn *raft.RawNode) error { rn.TransferLeader(to); return nil })
}

func (r *rawNode) ReadIndex(_ context.Context, rctx []byte) error {
	return r.do(func(rn *raft.RawNode) error { rn.ReadIndex(rctx); return nil })
}

func (r *rawNode) ReportUnreachable(id uint64) {
	_ = r.do(func(rn *raft.RawNode) error { rn.ReportUnreachable(id); return nil })
}

func (r *rawNode) ReportSnapshot(id uint64, st raft.SnapshotStatus) {
	_ = r.do(func(rn *raft.RawNode) error { rn.ReportSnapshot(id, st); return nil })
}

// Stop makes every later call fail with raft.ErrStopped.
func (r *rawNode) Stop() {
	r.mu.Lock()
	r.stopped = true
	r.mu.Unlock()
}

// ready takes the pending Ready, if any. The caller handles it and passes
// it to advance before it takes the next one.
func (r *rawNode) ready() (raft.Ready, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped || !r.rn.HasReady() {
		return raft.Ready{}, false
	}
	rd := r.rn.Ready()
	if ss := rd.SoftState; ss != nil && ss.Lead != r.lead {
		r.lead = ss.Lead
		close(r.leadCh)
		r.leadCh = make(chan struct{})
	}
	return rd, true
}

func (r *rawNode) advance(rd raft.Ready) {
	r.mu.Lock()
	if !r.stopped {
		r.rn.Advance(rd)
	}
	r.mu.Unlock()
}
