package raftnode

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/tenure-io/tenure/server/failpoint"
	"github.com/tenure-io/tenure/server/storage"
)

const snapshotChunkBytes = 512 << 10

// sendSnapshot ships a "merged" snapshot: instead of raft's Snapshot.Data it
// streams the whole state-machine key range from one Pebble snapshot and
// rewrites the metadata to that snapshot's applied index, term and ConfState.
func (n *Node) sendSnapshot(m *raftpb.Message) {
	defer n.wg.Done()
	to := m.GetTo()
	ps := n.db.NewSnapshot()
	defer ps.Close()
	status := raft.SnapshotFailure
	defer func() { n.rn.ReportSnapshot(to, status) }()

	idx, err := storage.GetU64(ps, storage.KeyAppliedIndex)
	if err != nil {
		n.log.Error("snapshot: read applied index", "err", err)
		return
	}
	term, err := storage.GetU64(ps, storage.KeyAppliedTerm)
	if err != nil {
		n.log.Error("snapshot: read applied term", "err", err)
		return
	}
	cs := &raftpb.ConfState{}
	if _, err := getProto(ps, storage.KeyConfState, cs); err != nil {
		n.log.Error("snapshot: read conf state", "err", err)
		return
	}
	if idx < m.GetSnapshot().GetMetadata().GetIndex() {
		n.log.Error("snapshot: store is behind raft's snapshot", "applied", idx, "raft", m.GetSnapshot().GetMetadata().GetIndex())
		return
	}
	out := proto.Clone(m).(*raftpb.Message)
	out.Snapshot = &raftpb.Snapshot{Metadata: &raftpb.SnapshotMetadata{Index: new(idx), Term: new(term), ConfState: cs}}

	it, err := ps.NewIter(&pebble.IterOptions{LowerBound: smStart, UpperBound: smEnd})
	if err != nil {
		n.log.Error("snapshot: iterator", "err", err)
		return
	}
	defer it.Close()
	it.First()
	next := func() ([]KV, error) {
		if !it.Valid() {
			if err := it.Error(); err != nil {
				return nil, err
			}
			return nil, io.EOF
		}
		var chunk []KV
		size := 0
		for ; it.Valid() && size < snapshotChunkBytes; it.Next() {
			k, v := append([]byte(nil), it.Key()...), append([]byte(nil), it.Value()...)
			chunk = append(chunk, KV{Key: k, Value: v})
			size += len(k) + len(v)
		}
		return chunk, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-n.stopc:
			cancel()
		case <-ctx.Done():
		}
	}()
	start := time.Now()
	n.log.Info("sending snapshot", "to", fmt.Sprintf("%x", to), "index", idx, "term", term)
	if err := n.tr.SendSnapshot(ctx, out, next); err != nil {
		n.log.Warn("sending snapshot failed", "to", fmt.Sprintf("%x", to), "index", idx, "took", time.Since(start), "err", err)
		n.observeSnapshotSent(start, false)
		return
	}
	n.snapsSent.Add(1)
	status = raft.SnapshotFinish
	n.log.Info("sent snapshot", "to", fmt.Sprintf("%x", to), "index", idx, "took", time.Since(start))
	n.observeSnapshotSent(start, true)
}

// ReceiveSnapshot installs a snapshot streamed by the leader and then steps
// the MsgSnap into raft. The install is sequenced with the apply loop.
func (n *Node) ReceiveSnapshot(ctx context.Context, m *raftpb.Message, next SnapshotReader) error {
	if !n.started.Load() {
		return ErrStopped
	}
	meta := m.GetSnapshot().GetMetadata()
	idx := meta.GetIndex()
	if idx == 0 {
		return errors.New("raftnode: snapshot without index")
	}
	n.applyMu.Lock()
	if idx <= n.appliedIndex() {
		n.applyMu.Unlock()
		// Already have it: drain and let raft answer the leader.
		for {
			if _, err := next(); err != nil {
				break
			}
		}
		return n.rn.Step(ctx, m)
	}
	err := n.installSnapshot(meta, next)
	n.applyMu.Unlock()
	if err != nil {
		n.log.Error("installing snapshot failed", "index", idx, "err", err)
		return err
	}
	n.snapsRecv.Add(1)
	n.log.Info("installed snapshot", "index", idx, "term", meta.GetTerm(), "from", fmt.Sprintf("%x", m.GetFrom()))
	return n.rn.Step(ctx, m)
}

// installSnapshot replaces the state-machine range; the caller holds applyMu.
func (n *Node) installSnapshot(meta *raftpb.SnapshotMetadata, next SnapshotReader) error {
	b := n.db.NewBatch()
	defer b.Close()
	if err := b.DeleteRange(smStart, smEnd, nil); err != nil {
		return err
	}
	var got uint64
	for {
		chunk, err := next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		for _, kv := range chunk {
			if len(kv.Key) == 0 || kv.Key[0] < storage.StateMachineStart || kv.Key[0] >= storage.StateMachineEnd {
				return fmt.Errorf("raftnode: snapshot key %q outside the state-machine range", kv.Key)
			}
			if bytes.Equal(kv.Key, storage.KeyAppliedIndex) && len(kv.Value) == 8 {
				got = binary.BigEndian.Uint64(kv.Value)
			}
			if err := b.Set(kv.Key, kv.Value, nil); err != nil {
				return err
			}
		}
	}
	if got != meta.GetIndex() {
		return fmt.Errorf("raftnode: snapshot applied index %d != metadata index %d", got, meta.GetIndex())
	}
	// Background work of the state machine (mvcc's physical compaction) must
	// not write over the range being replaced; Reload resumes it.
	if p, ok := n.sm.(interface{ PrepareRestore() }); ok {
		p.PrepareRestore()
	}
	failpoint.Hit(failpoint.SnapshotBeforeSave)
	if err := b.Commit(pebble.Sync); err != nil {
		return err
	}
	failpoint.Hit(failpoint.SnapshotAfterSave)
	if err := n.sm.Reload(); err != nil {
		return fmt.Errorf("raftnode: state machine reload: %w", err)
	}
	cs := meta.GetConfState()
	if cs == nil {
		cs = &raftpb.ConfState{}
	}
	n.confState = proto.Clone(cs).(*raftpb.ConfState)
	if err := n.loadMembers(); err != nil {
		return err
	}
	n.syncPeers()
	n.snapIndex = meta.GetIndex()
	n.setApplied(meta.GetIndex(), meta.GetTerm())
	if n.IsRemoved(n.id) {
		n.markRemoved("snapshot", meta.GetIndex())
	}
	return nil
}
