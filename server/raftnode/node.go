package raftnode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/tenure-io/tenure/server/failpoint"
	"github.com/tenure-io/tenure/server/storage"
)

// Node is one member's raft node. It drives etcd raft's RawNode (through
// rawNode, which serialises all raft state under a mutex; Node adds a Ready
// loop, an apply loop, a ReadIndex batching loop and the transport around
// it).
type Node struct {
	cfg    Config
	log    *slog.Logger
	db     *pebble.DB
	sm     StateMachine
	id     uint64
	ms     *raft.MemoryStorage
	rn     *rawNode
	rcfg   *raft.Config
	boot   []raft.Peer // non-nil: bootstrap a new cluster on Start
	tr     Transport
	th     *thrifty       // nil: thrifty replication off
	peerTr *PeerTransport // non-nil when the default transport is used

	// thView is the leader's configuration and progress for thrifty
	// replication, reused across Readies (the Ready loop's alone).
	thView progressView

	deferrer ProposalDeferrer // the StateMachine, when it implements it
	deferred deferQueue       // the leader's deferred proposals (defer.go)
	// commitSeen is the highest commit index a Ready has carried (set
	// before that Ready's messages leave); while smApplied is below it,
	// the state machine has not yet seen every committed entry.
	commitSeen atomic.Uint64
	// smApplied is the last index whose effects are in the store and in the
	// state machine: set once an apply batch commits, before Committed
	// publishes its results (the applied index, which releases read-index
	// waiters, moves after Committed). A client answered by Committed that
	// proposes again at once must find it there, or the leader would not
	// defer its proposal (defer.go).
	smApplied atomic.Uint64
	props     propBuffer // the leader's proposals, stepped once per Ready (propbuf.go)

	clusterID atomic.Uint64
	lastIndex uint64 // last raft log index on disk; Ready loop only

	// leader tracking
	leadMu sync.Mutex
	// leadTerm caches (leader, term) for the request path: raft's Status
	// copies the progress of every peer and must not run per request.
	leadNow, termNow atomic.Uint64
	lead             uint64
	term             uint64
	leadCh           chan struct{} // closed and replaced on every leader change
	isLeader         atomic.Bool
	leaderEvs        chan LeaderEvent

	// apply state
	applyMu      sync.Mutex // held by the apply loop per batch and by snapshot installs
	applyc       chan applyItem
	appliedMu    sync.Mutex
	applied      uint64
	appliedTerm  uint64
	appliedCh    chan struct{}        // closed and replaced when applied advances
	fwdPropc     chan *raftpb.Message // proposals forwarded by followers (forwardLoop)
	savedHS      *raftpb.HardState    // last hard state written (readyLoop)
	unsavedHS    *raftpb.HardState    // a newer hard state that only moved the commit index, not yet written (readyLoop)
	confState    *raftpb.ConfState
	snapIndex    uint64 // index of the last compaction snapshot (apply loop)
	peersMu      sync.Mutex
	knownPeers   map[uint64]bool
	membersMu    sync.RWMutex
	members      map[uint64]*Member
	removedIDs   map[uint64]bool // members removed from the cluster (membersMu)
	ccMu         sync.Mutex
	ccWaiters    map[uint64]ccWaiter // by the change's Id (ccMu)
	ccApplied    []ccResult          // applied, answered after raft's Advance (ccMu)
	ccSeq        atomic.Uint64
	readc        chan struct{}
	readMu       sync.Mutex
	readWaiters  []readWaiter
	readStatec   chan raft.ReadState
	readSeq      atomic.Uint64
	readRounds   atomic.Uint64 // ReadIndex rounds issued (tests)
	snapsRecv    atomic.Uint64 // snapshots installed from the leader (tests)
	absorbed     atomic.Uint64 // forwarded proposals the state machine absorbed (tests)
	snapsSent    atomic.Uint64
	notices      atomic.Uint64 // notices sent (SendNotice)
	noticeBatch  noticeBatch   // notices sent during Committed (notice.go)
	eagerSent    atomic.Uint64 // msgEager sent
	eagerAtOnce  atomic.Uint64 // of those, sent by SayEager
	startOnce    sync.Once
	stopOnce     sync.Once
	stopc        chan struct{}
	removedc     chan struct{} // closed once this member learns it was removed
	removedOnce  sync.Once
	wg           sync.WaitGroup
	started      atomic.Bool
	attrsApplied atomic.Bool
}

type applyItem struct {
	ents []*raftpb.Entry
	done chan struct{} // closed when applied (nil: nobody waits)
}

// New opens the node's raft state from cfg.DB: it loads hard state, snapshot
// metadata and log into a raft.MemoryStorage, or prepares to bootstrap a new
// cluster (NewCluster and an empty store), or to join an existing one.
func New(cfg Config) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	n := &Node{
		cfg:        cfg,
		log:        cfg.Logger.With("component", "raftnode", "member", cfg.Name),
		db:         cfg.DB,
		sm:         cfg.StateMachine,
		ms:         raft.NewMemoryStorage(),
		leadCh:     make(chan struct{}),
		leaderEvs:  make(chan LeaderEvent, 64),
		applyc:     make(chan applyItem, 128),
		appliedCh:  make(chan struct{}),
		fwdPropc:   make(chan *raftpb.Message, 1024),
		members:    map[uint64]*Member{},
		knownPeers: map[uint64]bool{},
		ccWaiters:  map[uint64]ccWaiter{},
		readc:      make(chan struct{}, 1),
		readStatec: make(chan raft.ReadState, 64),
		stopc:      make(chan struct{}),
		removedc:   make(chan struct{}),
	}
	n.deferrer, _ = cfg.StateMachine.(ProposalDeferrer)
	p, err := loadRaftState(cfg.DB)
	if err != nil {
		return nil, err
	}
	if err := n.loadApplied(); err != nil {
		return nil, err
	}
	if err := n.loadMembers(); err != nil {
		return nil, err
	}
	n.tr = cfg.Transport
	if n.tr == nil {
		n.peerTr = NewPeerTransport(PeerTransportConfig{Logger: n.log, TLS: cfg.PeerTLS, MaxMessageBytes: cfg.MaxRequestBytes + 1<<20})
		n.tr = n.peerTr
	}

	storedID, err := storage.GetU64(cfg.DB, keyLocalID)
	if err != nil {
		return nil, err
	}
	switch {
	case p.hasRaft:
		if storedID == 0 {
			return nil, errors.New("raftnode: store has raft state but no member ID")
		}
		n.id = storedID
		if n.IsRemoved(n.id) {
			// It applied its own removal before it stopped: starting would
			// only campaign at peers that refuse it.
			return nil, fmt.Errorf("%w (member %x)", ErrMemberRemoved, n.id)
		}
		if err := n.adoptInstalledSnapshot(p); err != nil {
			return nil, err
		}
		raiseCommitToApplied(p, n.applied)
		if err := n.ms.ApplySnapshot(p.snap); err != nil {
			return nil, err
		}
		n.savedHS = p.hs
		if err := n.ms.SetHardState(p.hs); err != nil {
			return nil, err
		}
		if err := n.ms.Append(p.ents); err != nil {
			return nil, err
		}
		n.snapIndex = p.snap.GetMetadata().GetIndex()
		n.lastIndex, _ = n.ms.LastIndex()
		n.log.Info("restarting raft node", "id", fmt.Sprintf("%x", n.id), "term", p.hs.GetTerm(),
			"commit", p.hs.GetCommit(), "applied", n.applied, "snapshot", n.snapIndex, "last", n.lastIndex)
	case cfg.NewCluster:
		var ids []uint64
		for _, m := range cfg.InitialCluster {
			id := MemberID(m.Name, m.PeerURLs, cfg.ClusterToken)
			ids = append(ids, id)
			if m.Name == cfg.Name {
				n.id = id
			}
			// Every member must bootstrap the identical log: no local-only
			// fields (client URLs are published later by publishAttrs).
			mm := Member{ID: id, Name: m.Name, PeerURLs: m.PeerURLs}
			ctx, _ := json.Marshal(mm)
			n.boot = append(n.boot, raft.Peer{ID: id, Context: ctx})
		}
		if n.id == 0 {
			return nil, fmt.Errorf("raftnode: Config.Name %q is not in Config.InitialCluster", cfg.Name)
		}
		cid := clusterIDFor(ids, cfg.ClusterToken)
		b := cfg.DB.NewBatch()
		_ = storage.SetU64(b, keyLocalID, n.id)
		_ = storage.SetU64(b, storage.KeyClusterID, cid)
		if err := b.Commit(pebble.Sync); err != nil {
			b.Close()
			return nil, err
		}
		b.Close()
		n.log.Info("bootstrapping new cluster", "id", fmt.Sprintf("%x", n.id), "cluster", fmt.Sprintf("%x", cid), "members", len(ids))
	default:
		if err := n.joinExisting(); err != nil {
			return nil, err
		}
	}
	cid, err := storage.GetU64(cfg.DB, storage.KeyClusterID)
	if err != nil {
		return nil, err
	}
	n.clusterID.Store(cid)

	maxMsg := uint64(1 << 20)
	if uint64(cfg.MaxRequestBytes) > maxMsg {
		maxMsg = uint64(cfg.MaxRequestBytes)
	}
	if cfg.ThriftyDelay > 0 {
		// A follower that forwarded a request within an election timeout
		// still has clients waiting for its apply.
		n.th = newThrifty(cfg.ThriftyDelay, cfg.TickInterval*time.Duration(cfg.ElectionTicks), n.tr, int(maxMsg))
	}
	n.rcfg = &raft.Config{
		ID:                        n.id,
		ElectionTick:              cfg.ElectionTicks,
		HeartbeatTick:             1,
		Storage:                   n.ms,
		MaxSizePerMsg:             maxMsg,
		MaxInflightMsgs:           256,
		MaxUncommittedEntriesSize: 1 << 30,
		MaxCommittedSizePerReady:  64 << 20,
		CheckQuorum:               true,
		PreVote:                   true,
		ReadOnlyOption:            raft.ReadOnlySafe,
		Logger:                    raftLogger{n.log.With("component", "raft")},
	}
	return n, nil
}

// adoptInstalledSnapshot handles a crash between installing a snapshot
// received from the leader (state-machine range written, synced) and raft
// recording it: the store's applied index is then beyond the raft log. The
// installed state is a committed prefix of the log, so it becomes the raft
// snapshot, the older log is dropped and commit moves up to it.
func (n *Node) adoptInstalledSnapshot(p *persisted) error {
	last := p.snap.GetMetadata().GetIndex()
	if k := len(p.ents); k > 0 {
		last = p.ents[k-1].GetIndex()
	}
	if n.applied <= last {
		return nil
	}
	meta := &raftpb.SnapshotMetadata{
		Index:     proto.Uint64(n.applied),
		Term:      proto.Uint64(n.appliedTerm),
		ConfState: proto.Clone(n.confState).(*raftpb.ConfState),
	}
	metaBytes, err := proto.Marshal(meta)
	if err != nil {
		return err
	}
	hs := proto.Clone(p.hs).(*raftpb.HardState)
	if hs.GetCommit() < n.applied {
		hs.Commit = proto.Uint64(n.applied)
	}
	if hs.GetTerm() < n.appliedTerm {
		hs.Term = proto.Uint64(n.appliedTerm)
	}
	hsBytes, err := proto.Marshal(hs)
	if err != nil {
		return err
	}
	b := n.db.NewBatch()
	defer b.Close()
	_ = b.DeleteRange(logKey(0), logEnd, nil)
	_ = b.Set(storage.KeySnapshotMeta, metaBytes, nil)
	_ = b.Set(storage.KeyHardState, hsBytes, nil)
	if err := b.Commit(pebble.Sync); err != nil {
		return err
	}
	n.log.Warn("adopting a snapshot installed before a crash", "applied", n.applied, "raft-last", last)
	p.snap = &raftpb.Snapshot{Metadata: meta}
	p.hs = hs
	p.ents = nil
	return nil
}

// raiseCommitToApplied handles a crash after an apply batch reached the disk
// but before the hard state that moved the commit index did: committed
// entries are applied while a Ready is persisted, and a hard state that only
// moves the commit index is not written until the next synced write. Entries up to the
// applied index were committed (only committed entries are applied) and are
// in the local log, so the commit index moves up to them.
func raiseCommitToApplied(p *persisted, applied uint64) {
	last := p.snap.GetMetadata().GetIndex()
	if k := len(p.ents); k > 0 {
		last = p.ents[k-1].GetIndex()
	}
	if applied <= p.hs.GetCommit() || applied > last {
		return
	}
	hs := &raftpb.HardState{}
	if p.hs != nil {
		hs = proto.Clone(p.hs).(*raftpb.HardState)
	}
	hs.Commit = proto.Uint64(applied)
	p.hs = hs
}

func (n *Node) loadApplied() error {
	var err error
	if n.applied, err = storage.GetU64(n.db, storage.KeyAppliedIndex); err != nil {
		return err
	}
	n.smApplied.Store(n.applied)
	if n.appliedTerm, err = storage.GetU64(n.db, storage.KeyAppliedTerm); err != nil {
		return err
	}
	cs := &raftpb.ConfState{}
	if _, err := getProto(n.db, storage.KeyConfState, cs); err != nil {
		return err
	}
	n.confState = cs
	return nil
}

// RegisterPeerService registers the gRPC side of the peer transport
// (snapshots, Members). It is a no-op when a custom Transport was
// configured.
func (n *Node) RegisterPeerService(s *grpc.Server) {
	if n.peerTr != nil {
		n.peerTr.Register(s)
	}
}

// ServePeer serves a peer listener until it closes (stopping s closes it):
// raft streams go to the peer transport, everything else to s, on which
// RegisterPeerService was called. With a custom Transport, s serves all.
func (n *Node) ServePeer(l net.Listener, s *grpc.Server) error {
	if n.peerTr == nil {
		return s.Serve(l)
	}
	return ServePeerListener(l, s, n.peerTr)
}

// Start starts the raft node, its loops and the transport.
func (n *Node) Start() {
	n.startOnce.Do(func() {
		rn, err := newRawNode(n.rcfg, n.boot)
		if err != nil {
			// The configuration and storage were checked by New.
			panic(fmt.Sprintf("raftnode: starting raft: %v", err))
		}
		n.rn = rn
		if n.boot != nil {
			for _, p := range n.boot {
				var m Member
				_ = json.Unmarshal(p.Context, &m)
				if m.ID != n.id {
					n.tr.AddPeer(m.ID, m.PeerURLs)
				}
			}
		}
		n.membersMu.RLock()
		for id, m := range n.members {
			if id != n.id {
				n.tr.AddPeer(id, m.PeerURLs)
			}
		}
		n.membersMu.RUnlock()
		if err := n.tr.Start(n.id, n); err != nil {
			n.log.Error("transport start failed", "err", err)
		}
		n.started.Store(true)
		n.wg.Add(6)
		go n.forwardLoop()
		go n.tickLoop()
		go n.readyLoop()
		go n.applyLoop()
		go n.readIndexLoop()
		go n.leaderEventLoop()
		n.wg.Add(2)
		go n.publishAttrs()
		go n.advanceElectionClock()
	})
}

// Stop stops the loops and the transport. The DB is closed by the caller.
func (n *Node) Stop() {
	n.stopOnce.Do(func() {
		close(n.stopc)
		if n.started.Load() {
			n.tr.Stop()
			n.rn.Stop()
		}
		n.wg.Wait()
		// A clean stop leaves the latest commit index on disk (a crash
		// leaves it behind; restart raises it to the applied index).
		if hs := n.unsavedHS; hs != nil {
			if _, err := saveReady(n.db, hs, nil, nil, n.lastIndex); err != nil {
				n.log.Warn("saving the last commit index at stop", "err", err)
			}
			n.unsavedHS = nil
		}
		n.ccMu.Lock()
		for id, w := range n.ccWaiters {
			w.done <- ErrStopped
			delete(n.ccWaiters, id)
		}
		n.ccMu.Unlock()
	})
}

// ID returns this member's ID.
func (n *Node) ID() uint64 { return n.id }

// ClusterID returns the cluster ID (0 while a joining member has not learned it).
func (n *Node) ClusterID() uint64 { return n.clusterID.Load() }

func (n *Node) tickLoop() {
	defer n.wg.Done()
	t := time.NewTicker(n.cfg.TickInterval)
	defer t.Stop()
	ticks := 0
	for {
		select {
		case <-t.C:
			n.rn.Tick()
			if ticks++; ticks%n.eagerEvery() == 0 {
				n.sayEager()
			}
		case <-n.stopc:
			return
		}
	}
}

func (n *Node) readyLoop() {
	defer n.wg.Done()
	for {
		select {
		case <-n.rn.wake:
		case <-n.stopc:
			return
		}
		for {
			n.stepProposals()
			rd, ok := n.rn.ready()
			if !ok {
				break
			}
			if !n.handleReady(rd) {
				return
			}
			n.rn.advance(rd)
			if hasConfChange(rd.CommittedEntries) {
				n.deliverConfChanges()
			}
		}
	}
}

// handleReady persists, sends and hands to apply what one Ready holds; it
// returns false when the member stops.
func (n *Node) handleReady(rd raft.Ready) bool {
	if rd.HardState != nil && rd.HardState.GetCommit() > n.commitSeen.Load() {
		n.commitSeen.Store(rd.HardState.GetCommit()) // only this loop writes it
	}
	if rd.SoftState != nil {
		n.setLeader(rd.SoftState.Lead, rd.SoftState.RaftState == raft.StateLeader)
	}
	if rd.HardState != nil && rd.HardState.GetTerm() > 0 {
		n.leadMu.Lock()
		n.term = rd.HardState.GetTerm()
		n.leadMu.Unlock()
		n.termNow.Store(rd.HardState.GetTerm())
	}
	for _, rs := range rd.ReadStates {
		select {
		case n.readStatec <- rs:
		default: // the read loop retries
		}
	}
	leader := n.isLeader.Load()
	if n.th != nil {
		n.chooseLazy(leader)
	}
	// Committed entries already on disk and not rewritten by this Ready
	// are applied while it is persisted (as etcd does): under load the
	// leader's Ready carries both new entries and the commit of earlier
	// ones, and waiting for the new entries' fsync would add one disk
	// sync to every request's latency. Entries this Ready writes (a
	// follower may learn them committed in the same message) are applied
	// only after the write, so the applied index never passes the log.
	committed := rd.CommittedEntries
	early := committed[:n.stableCommitted(rd)]
	committed = committed[len(early):]
	// Raft thesis §10.2.1: the leader may send appends before its own
	// fsync; the entries count toward commit only once it persisted them
	// (raft tracks its own match index through Advance). It hands the
	// stable committed entries to the apply loop before it sends: a commit
	// round's Ready carries the commit to each follower, and those socket
	// writes (~15 µs each here) would otherwise delay the leader's own
	// answers and lock grants (TestLeaderAppliesCommitBeforeSendingIt).
	// Not a conf change: applied first, it would drop the peer it removes
	// before the message telling that peer the removal committed.
	if leader && slices.ContainsFunc(early, isConfChange) {
		n.send(rd.Messages)
		rd.Messages = nil
	}
	if !n.dispatchApply(early) {
		return false
	}
	if leader {
		n.send(rd.Messages)
	}
	// A hard state that only moves the commit index is not written on
	// its own: it rides with the next write of entries, term, vote or
	// snapshot. The commit index can always be recovered from a quorum,
	// and on restart it is raised to the applied index (which the
	// state-machine batch persists), so losing it loses nothing. Writing
	// it alone cost every member a pebble commit, a WAL write and a
	// goroutine wake-up per commit round (each round's commit reaches
	// the followers in a message of its own).
	hs := rd.HardState
	mustSync := len(rd.Entries) > 0 || !raft.IsEmptySnap(rd.Snapshot)
	if hs != nil && (hs.GetTerm() != n.savedHS.GetTerm() || hs.GetVote() != n.savedHS.GetVote()) {
		mustSync = true
	}
	if hs != nil && !mustSync {
		n.unsavedHS, hs = hs, nil
	} else if hs == nil && mustSync {
		hs = n.unsavedHS
	}
	// Only a Ready that persists something is a durability step: the
	// failpoints and the sync timing count exactly those.
	if mustSync {
		syncStart := time.Now() // a stalled disk is simulated at the failpoint
		failpoint.Hit(failpoint.RaftBeforeSave)
		var err error
		n.lastIndex, err = saveReady(n.db, hs, rd.Entries, rd.Snapshot, n.lastIndex)
		if err != nil {
			n.log.Error("persisting raft state failed; stopping", "err", err)
			go n.Stop()
			return false
		}
		if hs != nil {
			n.savedHS, n.unsavedHS = hs, nil
		}
		n.observeSync(syncStart, len(rd.Entries))
		failpoint.Hit(failpoint.RaftAfterSave)
	}
	if !raft.IsEmptySnap(rd.Snapshot) {
		if err := n.ms.ApplySnapshot(rd.Snapshot); err != nil && !errors.Is(err, raft.ErrSnapOutOfDate) {
			n.log.Error("apply snapshot to memory storage", "err", err)
		}
		if idx := rd.Snapshot.GetMetadata().GetIndex(); idx > n.appliedIndex() {
			n.log.Error("raft restored a snapshot whose data was not installed", "index", idx, "applied", n.appliedIndex())
		}
	}
	if rd.HardState != nil {
		_ = n.ms.SetHardState(rd.HardState)
	}
	if err := n.ms.Append(rd.Entries); err != nil {
		n.log.Error("append to memory storage", "err", err)
	}
	if !leader {
		n.send(rd.Messages)
	}
	if !n.dispatchApply(committed) {
		return false
	}
	return true
}

// stableCommitted counts the leading committed entries of rd that are on
// disk before rd is persisted and that rd does not rewrite.
func (n *Node) stableCommitted(rd raft.Ready) int {
	if !raft.IsEmptySnap(rd.Snapshot) {
		return 0
	}
	stable := n.lastIndex
	if len(rd.Entries) > 0 && rd.Entries[0].GetIndex() <= stable {
		stable = rd.Entries[0].GetIndex() - 1
	}
	k := 0
	for k < len(rd.CommittedEntries) && rd.CommittedEntries[k].GetIndex() <= stable {
		k++
	}
	return k
}

// dispatchApply hands committed entries to the apply loop, in order. A group
// holding a conf change is waited for: raft must see the change before it
// produces more messages (votes from removed members must not count). It
// returns false when the node stops.
func (n *Node) dispatchApply(ents []*raftpb.Entry) bool {
	if len(ents) == 0 {
		return true
	}
	item := applyItem{ents: ents}
	if hasConfChange(ents) {
		item.done = make(chan struct{})
	}
	select {
	case n.applyc <- item:
	case <-n.stopc:
		return false
	}
	if item.done != nil {
		select {
		case <-item.done:
		case <-n.stopc:
			return false
		}
	}
	return true
}

func isConfChange(e *raftpb.Entry) bool { return e.GetType() != raftpb.EntryNormal }

func hasConfChange(ents []*raftpb.Entry) bool { return slices.ContainsFunc(ents, isConfChange) }

// send hands messages to the transport; MsgSnap goes through the snapshot path.
func (n *Node) send(msgs []*raftpb.Message) {
	if len(msgs) == 0 {
		return
	}
	out := msgs[:0:0]
	for _, m := range msgs {
		if m.GetType() == raftpb.MsgSnap {
			n.wg.Add(1)
			go n.sendSnapshot(m)
			continue
		}
		out = append(out, m)
	}
	if n.th != nil {
		n.th.send(out)
		return
	}
	n.tr.Send(out)
}

// chooseLazy updates thrifty replication's lazy followers before a Ready's
// messages go out.
func (n *Node) chooseLazy(leader bool) {
	if !leader {
		n.th.choose(false, n.id, tracker.Config{}, nil, time.Time{})
		return
	}
	n.rn.refreshView(&n.thView)
	n.th.choose(true, n.id, n.thView.cfg, n.thView.prs, time.Now())
}

func (n *Node) setLeader(lead uint64, isLeader bool) {
	n.isLeader.Store(isLeader)
	n.leadMu.Lock()
	if lead == n.lead {
		n.leadMu.Unlock()
		return
	}
	n.lead = lead
	close(n.leadCh)
	n.leadCh = make(chan struct{})
	term := n.rn.Status().HardState.GetTerm()
	n.term = term
	n.leadNow.Store(lead)
	n.termNow.Store(term)
	n.leadMu.Unlock()
	n.log.Info("leader changed", "leader", fmt.Sprintf("%x", lead), "term", term, "is_leader", isLeader)
	select {
	case n.leaderEvs <- LeaderEvent{Leader: lead, Term: term, IsLeader: isLeader}:
	default:
		n.log.Warn("leader event queue full; OnLeaderChange is too slow")
	}
}

func (n *Node) leaderEventLoop() {
	defer n.wg.Done()
	for {
		select {
		case ev := <-n.leaderEvs:
			if n.cfg.OnLeaderChange != nil {
				n.cfg.OnLeaderChange(ev)
			}
		case <-n.stopc:
			return
		}
	}
}

// LeaderTerm returns the leader this member knows (0: none) and the current
// term, without a round trip to the raft goroutine (cheap enough for every
// request; Status is not).
func (n *Node) LeaderTerm() (leader, term uint64) { return n.leadNow.Load(), n.termNow.Load() }

// leader returns the known leader (0: none) and a channel closed at the next change.
func (n *Node) leader() (uint64, <-chan struct{}) {
	n.leadMu.Lock()
	defer n.leadMu.Unlock()
	return n.lead, n.leadCh
}

// waitLeader waits until a leader is known.
func (n *Node) waitLeader(ctx context.Context) error {
	for {
		lead, ch := n.leader()
		if lead != 0 {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ErrNoLeader
		case <-n.stopc:
			return ErrStopped
		}
	}
}

// Propose hands data to raft. It waits (up to ctx) for a leader to be known;
// the result arrives through the StateMachine once the entry is applied.
// Errors: ErrNoLeader, ErrProposalDropped, ErrTimeout, ErrStopped.
func (n *Node) Propose(ctx context.Context, data []byte) error {
	if !n.started.Load() {
		return ErrStopped
	}
	select {
	case <-n.stopc:
		return ErrStopped
	default:
	}
	if err := n.waitLeader(ctx); err != nil {
		return err
	}
	if n.forwardToLeader(&raftpb.Message{Type: raftpb.MsgProp.Enum(), Entries: []*raftpb.Entry{{Data: data}}}) {
		return nil
	}
	if n.deferrable(data) {
		n.deferEntry(data)
		return nil
	}
	if n.isLeader.Load() {
		return n.mapErr(ctx, n.bufferProposal(ctx, &raftpb.Entry{Data: data}))
	}
	return n.mapErr(ctx, n.rn.Propose(ctx, data))
}

// forwardToLeader sends m, a proposal or a read-index request, straight to
// the leader when this member follows a known one, and reports whether it
// did. Raft forwards such a message the same way (to its leader, without a
// term), but only in the member's next Ready: on a busy follower that waits
// for the disk sync in progress and then for the next one, so every write
// and linearizable read arriving at a follower paid one or two fsyncs of
// the follower before it even reached the leader.
func (n *Node) forwardToLeader(m *raftpb.Message) bool {
	lead := n.leadNow.Load()
	if lead == 0 || lead == n.id || n.isLeader.Load() {
		return false
	}
	m.From, m.To = proto.Uint64(n.id), proto.Uint64(lead)
	n.tr.Send([]*raftpb.Message{m})
	return true
}

func (n *Node) mapErr(ctx context.Context, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, raft.ErrProposalDropped):
		return ErrProposalDropped
	case errors.Is(err, raft.ErrStopped):
		return ErrStopped
	case ctx.Err() != nil:
		if lead, _ := n.leader(); lead == 0 {
			return ErrNoLeader
		}
		return ErrTimeout
	}
	return err
}

// Status reports this member's raft state.
func (n *Node) Status() Status {
	st := Status{ID: n.id, AppliedIndex: n.appliedIndex()}
	st.LastIndex, _ = n.ms.LastIndex()
	if !n.started.Load() {
		return st
	}
	select {
	case <-n.stopc:
		return st
	default:
	}
	rs := n.rn.Status()
	st.Leader = rs.Lead
	st.Term = rs.HardState.GetTerm()
	st.CommitIndex = rs.HardState.GetCommit()
	n.membersMu.RLock()
	if m := n.members[n.id]; m != nil {
		st.IsLearner = m.IsLearner
	}
	n.membersMu.RUnlock()
	return st
}

// Handler implementation (called by the transport).

// Process steps a message received from a peer.
func (n *Node) Process(ctx context.Context, m *raftpb.Message) error {
	if !n.started.Load() {
		return ErrStopped
	}
	if m.GetType() == msgNotice {
		n.processNotice(m)
		return nil
	}
	if m.GetType() == msgConfChangeDropped {
		n.confChangeDropped(m)
		return nil
	}
	if m.GetType() == msgEager {
		if n.th != nil && n.isLeader.Load() {
			n.th.markBusy(m.GetFrom(), time.Now())
		}
		return nil
	}
	if n.th != nil && n.isLeader.Load() && n.awaitsOwnApply(m) {
		n.th.markBusy(m.GetFrom(), time.Now())
	}
	if m.GetType() == raftpb.MsgProp {
		// On the leader a forwarded proposal joins the proposal buffer
		// (after the absorber and the deferrer had their pick): nothing
		// there waits. Elsewhere it blocks in raft until this member knows
		// a leader, and must never hold up the peer stream it came on (the
		// heartbeats and appends queued behind it are what tell this member
		// who the leader is): hand it to the forwarder, or drop it when the
		// forwarder is full (the proposer's client times out and retries,
		// exactly as when raft itself drops a proposal).
		if n.isLeader.Load() {
			n.bufferForwarded(m)
			return nil
		}
		select {
		case n.fwdPropc <- m:
		default:
		}
		return nil
	}
	return n.rn.Step(ctx, m)
}

// awaitsOwnApply reports whether m, from a follower, is a request whose
// caller that follower answers only once it applied the outcome itself: a
// read index, or a proposal with an entry that does not tolerate a lazy
// apply (LazyApplyTolerant).
func (n *Node) awaitsOwnApply(m *raftpb.Message) bool {
	switch m.GetType() {
	case raftpb.MsgReadIndex:
		return true
	case raftpb.MsgProp:
		lt, ok := n.sm.(LazyApplyTolerant)
		if !ok {
			return true
		}
		for _, e := range m.GetEntries() {
			if !lt.ToleratesLazyApply(e.GetData()) {
				return true
			}
		}
	}
	return false
}

// forwardLoop steps proposals forwarded by followers, each bounded by an
// election timeout, so a leaderless member drops them instead of stalling.
func (n *Node) forwardLoop() {
	defer n.wg.Done()
	timeout := n.cfg.TickInterval * time.Duration(n.cfg.ElectionTicks)
	for {
		select {
		case m := <-n.fwdPropc:
			if n.isLeader.Load() { // became leader while it waited here
				n.bufferForwarded(m)
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			_ = n.rn.Step(ctx, m)
			cancel()
		case <-n.stopc:
			return
		}
	}
}

// bufferForwarded hands a proposal forwarded to the leader to the
// absorber, then the deferrer, and puts what they leave in the proposal
// buffer. Nothing here waits.
func (n *Node) bufferForwarded(m *raftpb.Message) {
	if m = n.stepForwardedConfChanges(m); m == nil {
		return
	}
	if m = n.absorb(m); m == nil {
		return
	}
	if m = n.deferForwarded(m); m == nil {
		return
	}
	n.props.add(m.GetEntries()...)
	n.rn.poke()
}

// absorb offers a forwarded proposal's entries to the state machine when it
// is a ProposalAbsorber and this member leads; it returns the message with
// the entries left to step (nil when none are).
func (n *Node) absorb(m *raftpb.Message) *raftpb.Message {
	ab, ok := n.sm.(ProposalAbsorber)
	if !ok || !n.isLeader.Load() {
		return m
	}
	m, took := takeEntries(m, func(d []byte) bool { return d[0] != internalPrefix && ab.AbsorbProposal(d) })
	if took {
		n.absorbed.Add(1)
	}
	return m
}

// takeEntries passes each non-empty normal entry of m to take and drops the
// ones it took; it returns m with the rest (nil when none are left) and
// whether take took any.
func takeEntries(m *raftpb.Message, take func(data []byte) bool) (*raftpb.Message, bool) {
	var keep []*raftpb.Entry // allocated at the first entry taken
	for i, e := range m.GetEntries() {
		if d := e.GetData(); e.GetType() == raftpb.EntryNormal && len(d) > 0 && take(d) {
			if keep == nil {
				keep = append(make([]*raftpb.Entry, 0, len(m.GetEntries())), m.GetEntries()[:i]...)
			}
			continue
		}
		if keep != nil {
			keep = append(keep, e)
		}
	}
	if keep == nil {
		return m, false
	}
	if len(keep) == 0 {
		return nil, true
	}
	m.Entries = keep
	return m, true
}

// ReportUnreachable tells raft that a peer could not be reached.
func (n *Node) ReportUnreachable(id uint64) {
	if n.started.Load() {
		n.rn.ReportUnreachable(id)
	}
}

// ReportRemoved is the transport telling this member that peer refused it
// as removed: it never applied its own removal (it was cut off or down when
// the cluster removed it), so it learns it from the members that did.
func (n *Node) ReportRemoved(peer uint64) {
	n.markRemoved("peer", fmt.Sprintf("%x", peer))
}

// Removed is closed once this member learns that it was removed from the
// cluster, by applying its own removal or from a peer that refused it. A
// removed member can do nothing useful: its owner stops it (ErrMemberRemoved).
func (n *Node) Removed() <-chan struct{} { return n.removedc }

func (n *Node) markRemoved(how ...any) {
	n.removedOnce.Do(func() {
		n.log.Error("the member has been permanently removed from the cluster",
			append([]any{"id", fmt.Sprintf("%x", n.id)}, how...)...)
		close(n.removedc)
	})
}

// MembersInfo answers the Members peer RPC.
func (n *Node) MembersInfo() (uint64, []Member) { return n.ClusterID(), n.Members() }

type raftLogger struct{ l *slog.Logger }

func (r raftLogger) Debug(v ...any)              { r.l.Debug(fmt.Sprint(v...)) }
func (r raftLogger) Debugf(f string, v ...any)   { r.l.Debug(fmt.Sprintf(f, v...)) }
func (r raftLogger) Error(v ...any)              { r.l.Error(fmt.Sprint(v...)) }
func (r raftLogger) Errorf(f string, v ...any)   { r.l.Error(fmt.Sprintf(f, v...)) }
func (r raftLogger) Info(v ...any)               { r.l.Debug(fmt.Sprint(v...)) }
func (r raftLogger) Infof(f string, v ...any)    { r.l.Debug(fmt.Sprintf(f, v...)) }
func (r raftLogger) Warning(v ...any)            { r.l.Warn(fmt.Sprint(v...)) }
func (r raftLogger) Warningf(f string, v ...any) { r.l.Warn(fmt.Sprintf(f, v...)) }
func (r raftLogger) Fatal(v ...any)              { r.l.Error(fmt.Sprint(v...)); panic(fmt.Sprint(v...)) }
func (r raftLogger) Fatalf(f string, v ...any)   { r.Fatal(fmt.Sprintf(f, v...)) }
func (r raftLogger) Panic(v ...any)              { r.l.Error(fmt.Sprint(v...)); panic(fmt.Sprint(v...)) }
func (r raftLogger) Panicf(f string, v ...any)   { r.Panic(fmt.Sprintf(f, v...)) }
