package raftnode

import (
	"cmp"
	"maps"
	"slices"
	"sync"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
)

// LazyApplyTolerant is implemented by a StateMachine that can tell which
// entries a proposing follower need not apply promptly: those whose result
// the leader sends that member itself (Tenure's lock ops), and those whose
// callers can wait a thrifty delay longer (lease renewals). A follower
// forwarding only such entries may still be held. Without it, every
// forwarded proposal makes its follower eager. Runs on the transport's
// reader: it must be cheap.
type LazyApplyTolerant interface {
	ToleratesLazyApply(data []byte) bool
}

// MaxThriftyDelay bounds Config.ThriftyDelay: a lazy follower is at most
// this far behind, and a commit waits at most this long when the eager
// follower stops answering.
const MaxThriftyDelay = 50 * time.Millisecond

// thrifty is the leader's thrifty replication (Config.ThriftyDelay, off by
// default): a commit needs the leader and a majority of acknowledgements,
// so with three voters one follower's append is not on the path of any
// commit while the other answers. The leader sends its appends at once to
// the followers a commit needs (the eager ones: the most advanced) and holds
// those for the others (the lazy ones) for up to the delay, merging
// consecutive appends into one, so a lazy follower receives, syncs,
// acknowledges and applies a batch of entries instead of each one. On a
// small machine where three members share the cores and one disk, that
// third member's per-entry work is a third of the cluster's CPU and one of
// three fsyncs competing for the disk.
//
// It changes when messages travel, never what they say: raft is safe under
// any delay, and a merged append is one the leader could have sent. Any
// other message to a lazy follower (heartbeat, read-index answer, vote,
// leader transfer) first releases what is held, in order, so those keep
// their latency and a read index never points past the entries it needs.
//
// Who is lazy follows from the leader's progress at every Ready: the
// followers with the highest match index are eager; a held follower whose
// match passes an eager one's (the eager one stopped answering) takes its
// place, so a commit waits at most one delay for the switch. A follower
// that forwarded a proposal or a read index within the last election
// timeout serves clients waiting for its own apply and is never lazy
// (unless every entry it forwarded tolerates it: LazyApplyTolerant), and
// neither is one that says it wants to be eager (Config.WantsEager: it has
// watchers, whose events would lag by the delay).
//
// An eager follower that is not busy in that sense (quiet) gets its
// appends at once, but not the empty append raft sends it only to carry a
// new commit index: that one is held like a lazy follower's, up to the
// delay or until the next message to it, which carries it along. Under a
// serial load (one lock handed from waiter to waiter, each hand-off its
// own raft round) the next round's append follows within a hand-off, so
// the follower learns the commit one round later in the same read, Ready
// and apply batch instead of one of each per round. Nobody waits for a
// quiet follower's apply: its clients' lock ops get their results pushed
// by the leader, and a commit needs its acknowledgement of entries, never
// of a commit index.
type thrifty struct {
	delay   time.Duration
	busyFor time.Duration
	tr      Transport
	// budget bounds the entry bytes merged into one append (raft's
	// MaxSizePerMsg), so a held catch-up stream stays within a frame.
	budget int

	mu      sync.Mutex
	held    map[uint64]*heldApps // the lazy followers
	commits map[uint64]*heldApps // the quiet eager followers' commit-only appends
	busy    map[uint64]time.Time // follower → last forwarded request
}

type heldApps struct {
	msgs  []*raftpb.Message
	bytes int
	armed bool // a flush is scheduled
}

func newThrifty(delay, busyFor time.Duration, tr Transport, budget int) *thrifty {
	return &thrifty{delay: delay, busyFor: busyFor, tr: tr, budget: budget,
		held: map[uint64]*heldApps{}, commits: map[uint64]*heldApps{}, busy: map[uint64]time.Time{}}
}

// send is Transport.Send with the lazy followers' appends held back. It
// sends under th.mu so a timer's flush and the ready loop's sends to one
// peer keep their order (Transport.Send never blocks).
func (th *thrifty) send(msgs []*raftpb.Message) {
	th.mu.Lock()
	defer th.mu.Unlock()
	if len(th.held) == 0 { // no lazy follower, so no quiet one (pickLazy)
		th.tr.Send(msgs)
		return
	}
	out := msgs[:0:0]
	for _, m := range msgs {
		// A lazy follower's appends are held, a quiet one's commit-only
		// appends; any other message to either releases what is held.
		h, holds := th.held[m.GetTo()], m.GetType() == raftpb.MsgApp
		if h == nil {
			h, holds = th.commits[m.GetTo()], holds && len(m.Entries) == 0
		}
		switch {
		case h == nil:
			out = append(out, m)
		case holds:
			th.hold(m.GetTo(), h, m)
		default:
			out = append(out, h.msgs...)
			h.msgs, h.bytes = nil, 0
			out = append(out, m)
		}
	}
	if len(out) > 0 {
		th.tr.Send(out)
	}
}

// hold appends m to the peer's held messages, merged into the last one
// when it continues it, and schedules their flush. th.mu is held.
func (th *thrifty) hold(to uint64, h *heldApps, m *raftpb.Message) {
	size := entriesBytes(m.Entries)
	if n := len(h.msgs); n > 0 && h.bytes+size <= th.budget {
		p := h.msgs[n-1]
		if p.GetType() == raftpb.MsgApp && p.GetTerm() == m.GetTerm() &&
			m.GetIndex() == p.GetIndex()+uint64(len(p.Entries)) {
			h.msgs[n-1] = &raftpb.Message{
				Type: p.Type, To: p.To, From: p.From, Term: p.Term,
				LogTerm: p.LogTerm, Index: p.Index,
				// Clip: p.Entries may share its array with raft's log.
				Entries: append(slices.Clip(p.Entries), m.Entries...),
				Commit:  m.Commit, // a later append never carries a lower commit
			}
			h.bytes += size
			th.arm(to, h)
			return
		}
	}
	if h.bytes+size > th.budget && len(h.msgs) > 0 {
		th.tr.Send(h.msgs) // full: release what is held now, keep m
		h.msgs, h.bytes = nil, 0
	}
	h.msgs = append(h.msgs, m)
	h.bytes += size
	th.arm(to, h)
}

func (th *thrifty) arm(to uint64, h *heldApps) {
	if h.armed {
		return
	}
	h.armed = true
	time.AfterFunc(th.delay, func() { th.flush(to, h) })
}

// flush sends what is held for to, if h still holds its messages.
func (th *thrifty) flush(to uint64, h *heldApps) {
	th.mu.Lock()
	defer th.mu.Unlock()
	h.armed = false
	if len(h.msgs) > 0 {
		th.tr.Send(h.msgs)
		h.msgs, h.bytes = nil, 0
	}
}

// markBusy records that follower from forwarded a request: it waits for
// its own apply and must see the commit without delay.
func (th *thrifty) markBusy(from uint64, now time.Time) {
	th.mu.Lock()
	th.busy[from] = now
	th.mu.Unlock()
}

// choose sets the lazy followers from the leader's progress (leader
// false: none, releasing everything held).
func (th *thrifty) choose(leader bool, self uint64, cfg tracker.Config, prs map[uint64]tracker.Progress, now time.Time) {
	th.mu.Lock()
	defer th.mu.Unlock()
	var lazy, quiet []uint64
	if leader {
		maps.DeleteFunc(th.busy, func(_ uint64, at time.Time) bool { return now.Sub(at) >= th.busyFor })
		lazy, quiet = pickLazy(self, cfg, prs, func(id uint64) bool { _, ok := th.busy[id]; return ok })
	}
	release(th.tr, th.held, lazy)
	release(th.tr, th.commits, quiet)
}

// release sends and forgets what set holds for peers not in keep, and adds
// the peers of keep it lacks. th.mu is held.
func release(tr Transport, set map[uint64]*heldApps, keep []uint64) {
	for id, h := range set {
		if !slices.Contains(keep, id) {
			if len(h.msgs) > 0 {
				tr.Send(h.msgs)
			}
			h.msgs, h.bytes = nil, 0
			delete(set, id) // a pending flush finds h empty
		}
	}
	for _, id := range keep {
		if set[id] == nil {
			set[id] = &heldApps{}
		}
	}
}

// pickLazy returns the voting followers no commit needs (lazy) and the
// quiet ones among those it needs: with v voters a commit needs v/2+1 of
// them, the leader and v/2 followers. Those are the busy followers first,
// then the most advanced (by match index, then by ID for a stable choice);
// the others are lazy unless busy, and the needed ones that are not busy
// are quiet. Busy ones sort first, so there is a quiet follower only where
// there is a lazy one. Learners are neither (they catch up to be
// promoted), and a joint configuration (a membership change in progress)
// has none.
func pickLazy(self uint64, cfg tracker.Config, prs map[uint64]tracker.Progress, busy func(uint64) bool) (lazy, quiet []uint64) {
	if len(cfg.Voters[1]) > 0 {
		return nil, nil
	}
	voters := cfg.Voters[0]
	if _, ok := voters[self]; !ok {
		return nil, nil
	}
	var followers []uint64
	for id := range voters {
		if _, ok := prs[id]; ok && id != self {
			followers = append(followers, id)
		}
	}
	need := len(voters) / 2
	if need >= len(followers) {
		return nil, nil
	}
	rank := func(id uint64) int { // busy first
		if busy(id) {
			return 0
		}
		return 1
	}
	slices.SortFunc(followers, func(a, b uint64) int {
		return cmp.Or(cmp.Compare(rank(a), rank(b)), cmp.Compare(prs[b].Match, prs[a].Match), cmp.Compare(a, b))
	})
	for i, id := range followers {
		switch {
		case busy(id):
		case i < need:
			quiet = append(quiet, id)
		default:
			lazy = append(lazy, id)
		}
	}
	return lazy, quiet
}

func entriesBytes(es []*raftpb.Entry) int {
	n := 0
	for _, e := range es {
		n += len(e.Data) + 16
	}
	return n
}
