package raftnode

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/tenure-io/tenure/server/failpoint"
	"github.com/tenure-io/tenure/server/storage"
)

// internalPrefix marks raftnode-internal entries; they never reach the StateMachine.
const internalPrefix byte = 0xFE

const internalAttrSet byte = 1 // member publishes name + client URLs (etcd's ClusterMemberAttrSet)

type attrSet struct {
	ID         uint64   `json:"id"`
	Name       string   `json:"name"`
	ClientURLs []string `json:"clientURLs"`
}

func (n *Node) applyLoop() {
	defer n.wg.Done()
	for {
		select {
		case it := <-n.applyc:
			n.applyMu.Lock()
			n.applyEntries(it.ents)
			if it.done != nil {
				close(it.done)
			}
			n.maybeCompact()
			n.applyMu.Unlock()
		case <-n.stopc:
			return
		}
	}
}

func (n *Node) appliedIndex() uint64 {
	n.appliedMu.Lock()
	defer n.appliedMu.Unlock()
	return n.applied
}

// appliedWait returns the applied index and a channel closed when it advances.
func (n *Node) appliedWait() (uint64, <-chan struct{}) {
	n.appliedMu.Lock()
	defer n.appliedMu.Unlock()
	return n.applied, n.appliedCh
}

func (n *Node) setApplied(idx, term uint64) {
	n.smApplied.Store(idx) // already there after an apply batch; a snapshot install sets it here
	n.appliedMu.Lock()
	n.applied, n.appliedTerm = idx, term
	close(n.appliedCh)
	n.appliedCh = make(chan struct{})
	n.appliedMu.Unlock()
}

// deliverConfChanges answers the callers of the conf changes applied so
// far. The Ready loop calls it after Advance.
func (n *Node) deliverConfChanges() {
	n.ccMu.Lock()
	defer n.ccMu.Unlock()
	for _, r := range n.ccApplied {
		if w, ok := n.ccWaiters[r.id]; ok {
			w.done <- r.err
			delete(n.ccWaiters, r.id)
		}
	}
	n.ccApplied = n.ccApplied[:0]
}

type ccResult struct {
	id  uint64
	err error
}

// applyEntries applies one group of committed entries in one indexed batch.
// The caller holds applyMu.
func (n *Node) applyEntries(ents []*raftpb.Entry) {
	applied := n.appliedIndex()
	var (
		b          *pebble.Batch
		last, term uint64
		ccDone     []ccResult
		smTouched  bool
		peersDirty bool
		selfGone   bool // this batch removes this member
	)
	for _, e := range ents {
		idx := e.GetIndex()
		if e.GetType() == raftpb.EntryConfChange || e.GetType() == raftpb.EntryConfChangeV2 {
			// raft must see every conf change, even one whose effects are
			// already in the store (replayed after a restart or a snapshot).
			cc, ok := n.decodeCC(e)
			cs := n.rn.ApplyConfChange(cc)
			if idx <= applied || !ok {
				continue
			}
			if b == nil {
				b = n.db.NewIndexedBatch()
			}
			if err := n.applyConfChange(b, cc, cs); err != nil {
				n.log.Error("apply conf change", "index", idx, "err", err)
			}
			peersDirty = true
			for _, c := range cc.AsV2().GetChanges() {
				if c.GetType() == raftpb.ConfChangeRemoveNode && c.GetNodeId() == n.id {
					selfGone = true
				}
			}
			if v1, isV1 := cc.AsV1(); isV1 && v1.GetId() != 0 {
				ccDone = append(ccDone, ccResult{id: v1.GetId()})
			}
			last, term = idx, e.GetTerm()
			continue
		}
		if idx <= applied {
			continue
		}
		last, term = idx, e.GetTerm()
		data := e.GetData()
		if len(data) == 0 {
			continue
		}
		if b == nil {
			b = n.db.NewIndexedBatch()
		}
		if data[0] == internalPrefix {
			if n.applyInternal(b, data) {
				peersDirty = true
			}
			continue
		}
		applyStart := time.Now()
		n.sm.ApplyEntry(b, idx, e.GetTerm(), data)
		n.observeApply(applyStart, idx)
		smTouched = true
	}
	if last == 0 {
		return
	}
	if b == nil {
		b = n.db.NewIndexedBatch()
	}
	defer b.Close()
	if sealer, ok := n.sm.(BatchSealer); ok && smTouched {
		sealer.SealBatch(b)
	}
	_ = storage.SetU64(b, storage.KeyAppliedIndex, last)
	_ = storage.SetU64(b, storage.KeyAppliedTerm, term)
	failpoint.Hit(failpoint.ApplyBeforeCommit)
	// NoSync: the synced raft log makes the entries durable; a crash that
	// loses this batch re-applies them from the log.
	if err := b.Commit(pebble.NoSync); err != nil {
		n.log.Error("commit apply batch failed", "err", err)
		panic(fmt.Sprintf("raftnode: commit apply batch: %v", err))
	}
	failpoint.Hit(failpoint.ApplyAfterCommit)
	n.smApplied.Store(last)
	if peersDirty {
		if err := n.loadMembers(); err != nil {
			n.log.Error("reload members", "err", err)
		}
		n.syncPeers()
	}
	if smTouched {
		n.committed()
	}
	n.setApplied(last, term)
	if len(ccDone) > 0 {
		// Answered by the Ready loop once raft has been told (Advance) that
		// these changes are applied: a caller answered earlier may propose
		// its next change while raft still counts this one as pending, and
		// raft drops that one.
		n.ccMu.Lock()
		n.ccApplied = append(n.ccApplied, ccDone...)
		n.ccMu.Unlock()
	}
	if selfGone {
		n.markRemoved("index", last)
	}
}

func (n *Node) decodeCC(e *raftpb.Entry) (raftpb.ConfChangeI, bool) {
	if e.GetType() == raftpb.EntryConfChange {
		cc := &raftpb.ConfChange{}
		if err := proto.Unmarshal(e.GetData(), cc); err != nil {
			n.log.Error("decode conf change", "index", e.GetIndex(), "err", err)
			return &raftpb.ConfChangeV2{}, false
		}
		return cc, true
	}
	cc := &raftpb.ConfChangeV2{}
	if err := proto.Unmarshal(e.GetData(), cc); err != nil {
		n.log.Error("decode conf change", "index", e.GetIndex(), "err", err)
		return &raftpb.ConfChangeV2{}, false
	}
	return cc, true
}

func (n *Node) applyConfChange(b *pebble.Batch, cci raftpb.ConfChangeI, cs *raftpb.ConfState) error {
	n.confState = proto.Clone(cs).(*raftpb.ConfState)
	if err := setProto(b, storage.KeyConfState, cs); err != nil {
		return err
	}
	cc := cci.AsV2()
	for _, c := range cc.GetChanges() {
		id := c.GetNodeId()
		var m Member
		if len(cc.GetContext()) > 0 {
			_ = json.Unmarshal(cc.GetContext(), &m)
		}
		switch c.GetType() {
		case raftpb.ConfChangeAddNode, raftpb.ConfChangeAddLearnerNode:
			old, err := readMember(b, id)
			if err != nil {
				return err
			}
			if old != nil && m.ID == 0 {
				m = *old
			}
			if old != nil && len(m.ClientURLs) == 0 {
				m.ClientURLs = old.ClientURLs
				if m.Name == "" {
					m.Name = old.Name
				}
			}
			m.ID = id
			m.IsLearner = c.GetType() == raftpb.ConfChangeAddLearnerNode
			if err := writeMember(b, &m); err != nil {
				return err
			}
		case raftpb.ConfChangeRemoveNode:
			if err := b.Delete(memberKey(id), nil); err != nil {
				return err
			}
			if err := b.Set(removedKey(id), nil, nil); err != nil {
				return err
			}
		case raftpb.ConfChangeUpdateNode:
			old, err := readMember(b, id)
			if err != nil {
				return err
			}
			if old == nil {
				continue
			}
			old.PeerURLs = m.PeerURLs
			if err := writeMember(b, old); err != nil {
				return err
			}
		}
	}
	return nil
}

func (n *Node) applyInternal(b *pebble.Batch, data []byte) bool {
	if len(data) < 2 {
		return false
	}
	switch data[1] {
	case internalAttrSet:
		var a attrSet
		if err := json.Unmarshal(data[2:], &a); err != nil {
			n.log.Error("decode attr set", "err", err)
			return false
		}
		m, err := readMember(b, a.ID)
		if err != nil || m == nil {
			return false
		}
		m.Name, m.ClientURLs = a.Name, a.ClientURLs
		_ = writeMember(b, m)
		return true
	}
	return false
}

// removedKey marks a removed member ID (never reusable).
func removedKey(id uint64) []byte { return append(memberKey(id), 'r') }

func readMember(r storage.Reader, id uint64) (*Member, error) {
	v, err := storage.GetCopy(r, memberKey(id))
	if err == storage.ErrNotFound {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	m := &Member{}
	if err := json.Unmarshal(v, m); err != nil {
		return nil, err
	}
	return m, nil
}

func writeMember(b *pebble.Batch, m *Member) error {
	v, err := json.Marshal(m)
	if err != nil {
		return err
	}
	return b.Set(memberKey(m.ID), v, nil)
}

// loadMembers reloads the member map and the removed IDs from the store.
func (n *Node) loadMembers() error {
	lo := []byte{storage.PrefixMembers}
	it, err := n.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: []byte{storage.PrefixMembers + 1}})
	if err != nil {
		return err
	}
	defer it.Close()
	ms := map[uint64]*Member{}
	removed := map[uint64]bool{}
	for it.First(); it.Valid(); it.Next() {
		k := it.Key()
		if len(k) == 10 && k[9] == 'r' { // removedKey: prefix, id, 'r'
			removed[binary.BigEndian.Uint64(k[1:9])] = true
			continue
		}
		if len(k) != 9 {
			continue
		}
		m := &Member{}
		if err := json.Unmarshal(it.Value(), m); err != nil {
			return fmt.Errorf("raftnode: decode member: %w", err)
		}
		ms[m.ID] = m
	}
	if err := it.Error(); err != nil {
		return err
	}
	n.membersMu.Lock()
	n.members, n.removedIDs = ms, removed
	n.membersMu.Unlock()
	return nil
}

// IsRemoved reports whether member id was removed from the cluster, as of
// the last loadMembers. It reads memory only: transports ask it, also while
// the store is closing.
func (n *Node) IsRemoved(id uint64) bool {
	n.membersMu.RLock()
	defer n.membersMu.RUnlock()
	return n.removedIDs[id]
}

// syncPeers makes the transport's peer set match the member map.
func (n *Node) syncPeers() {
	n.membersMu.RLock()
	defer n.membersMu.RUnlock()
	for id, m := range n.members {
		if id != n.id {
			n.tr.AddPeer(id, m.PeerURLs)
		}
	}
	n.peersMu.Lock()
	for id := range n.knownPeers {
		if _, ok := n.members[id]; !ok {
			n.tr.RemovePeer(id)
			delete(n.knownPeers, id)
		}
	}
	for id := range n.members {
		if id != n.id {
			n.knownPeers[id] = true
		}
	}
	n.peersMu.Unlock()
}

// Members returns the current members, sorted by ID.
func (n *Node) Members() []Member {
	n.membersMu.RLock()
	defer n.membersMu.RUnlock()
	out := make([]Member, 0, len(n.members))
	for _, m := range n.members {
		c := *m
		c.PeerURLs = slices.Clone(m.PeerURLs)
		c.ClientURLs = slices.Clone(m.ClientURLs)
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b Member) int {
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	})
	return out
}

// maybeCompact compacts the raft log every SnapshotCount applied entries.
func (n *Node) maybeCompact() {
	applied := n.appliedIndex()
	if applied < n.snapIndex+n.cfg.SnapshotCount {
		return
	}
	snap, err := n.ms.CreateSnapshot(applied, n.currentConfState(), nil)
	if err != nil {
		if err != raft.ErrSnapOutOfDate {
			n.log.Error("create snapshot", "err", err)
		}
		return
	}
	b := n.db.NewBatch()
	defer b.Close()
	_ = setProto(b, storage.KeySnapshotMeta, snap.GetMetadata())
	if err := b.Commit(pebble.Sync); err != nil {
		n.log.Error("save snapshot metadata", "err", err)
		return
	}
	n.snapIndex = applied
	failpoint.Hit(failpoint.CompactBeforeTrim)
	if applied <= n.cfg.SnapshotCatchUpEntries {
		return
	}
	ci := applied - n.cfg.SnapshotCatchUpEntries
	if err := n.ms.Compact(ci); err != nil {
		if err != raft.ErrCompacted {
			n.log.Error("compact raft log", "err", err)
		}
		return
	}
	if err := n.db.DeleteRange(logStart, logKey(ci), pebble.NoSync); err != nil {
		n.log.Error("trim raft log", "err", err)
	}
	n.log.Debug("compacted raft log", "snapshot", applied, "compact", ci)
}

func (n *Node) currentConfState() *raftpb.ConfState {
	return proto.Clone(n.confState).(*raftpb.ConfState)
}
