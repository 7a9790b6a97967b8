package raftnode

import (
	"errors"
	"fmt"
	"math"

	"github.com/cockroachdb/pebble/v2"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/tenure-io/tenure/server/storage"
)

// keyLocalID holds this member's own raft ID (raft-layer, never shipped).
var keyLocalID = []byte{storage.PrefixRaft, 'i'}

func logKey(index uint64) []byte { return storage.Key(storage.PrefixRaftLog, storage.U64(index)) }

var (
	logStart = []byte{storage.PrefixRaftLog}
	logEnd   = []byte{storage.PrefixRaftLog + 1}
	smStart  = []byte{storage.StateMachineStart}
	smEnd    = []byte{storage.StateMachineEnd}
)

func memberKey(id uint64) []byte { return storage.Key(storage.PrefixMembers, storage.U64(id)) }

func getProto(r storage.Reader, key []byte, m proto.Message) (bool, error) {
	v, err := storage.GetCopy(r, key)
	if errors.Is(err, storage.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if err := proto.Unmarshal(v, m); err != nil {
		return false, fmt.Errorf("raftnode: decode %q: %w", key, err)
	}
	return true, nil
}

func setProto(b *pebble.Batch, key []byte, m proto.Message) error {
	v, err := proto.Marshal(m)
	if err != nil {
		return err
	}
	return b.Set(key, v, nil)
}

// persisted is the raft state loaded from disk at startup.
type persisted struct {
	hs      *raftpb.HardState
	snap    *raftpb.Snapshot // metadata only
	ents    []*raftpb.Entry
	hasRaft bool
}

func loadRaftState(db *pebble.DB) (*persisted, error) {
	p := &persisted{hs: &raftpb.HardState{}, snap: &raftpb.Snapshot{Metadata: &raftpb.SnapshotMetadata{}}}
	ok, err := getProto(db, storage.KeyHardState, p.hs)
	if err != nil {
		return nil, err
	}
	p.hasRaft = ok
	meta := &raftpb.SnapshotMetadata{}
	if ok, err := getProto(db, storage.KeySnapshotMeta, meta); err != nil {
		return nil, err
	} else if ok {
		p.snap.Metadata = meta
	}
	p.snap = raftpb.EnsureSnapshot(p.snap)
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: logKey(meta.GetIndex() + 1), UpperBound: logEnd})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	next := meta.GetIndex() + 1
	for it.First(); it.Valid(); it.Next() {
		e := &raftpb.Entry{}
		if err := proto.Unmarshal(it.Value(), e); err != nil {
			return nil, fmt.Errorf("raftnode: decode log entry: %w", err)
		}
		if e.GetIndex() != next {
			return nil, fmt.Errorf("raftnode: raft log gap: want index %d, found %d", next, e.GetIndex())
		}
		next++
		p.ents = append(p.ents, e)
	}
	return p, it.Error()
}

// saveReady writes hard state, entries and snapshot metadata in one synced
// batch. lastIndex is the last log index on disk before this write; entries
// that overwrite a suffix make the stale tail beyond them disappear. The
// ready loop calls it only for what must reach the disk before anything that
// depends on it leaves the member: new entries, a term, a vote or a snapshot
// (raft's MustSync); a hard state that only moves the commit index waits for
// the next such write (see readyLoop).
func saveReady(db *pebble.DB, hs *raftpb.HardState, ents []*raftpb.Entry, snap *raftpb.Snapshot, lastIndex uint64) (uint64, error) {
	b := db.NewBatch()
	defer b.Close()
	if snap != nil && snap.GetMetadata().GetIndex() > 0 {
		// raft discards the whole log when it restores a snapshot.
		if err := b.DeleteRange(logStart, logEnd, nil); err != nil {
			return lastIndex, err
		}
		if err := setProto(b, storage.KeySnapshotMeta, snap.GetMetadata()); err != nil {
			return lastIndex, err
		}
		lastIndex = snap.GetMetadata().GetIndex()
	}
	if len(ents) > 0 {
		first, last := ents[0].GetIndex(), ents[len(ents)-1].GetIndex()
		if first <= lastIndex && last < lastIndex {
			if err := b.DeleteRange(logKey(last+1), logKey(math.MaxUint64), nil); err != nil {
				return lastIndex, err
			}
		}
		for _, e := range ents {
			if err := setProto(b, logKey(e.GetIndex()), e); err != nil {
				return lastIndex, err
			}
		}
		lastIndex = last
	}
	if hs != nil {
		if err := setProto(b, storage.KeyHardState, hs); err != nil {
			return lastIndex, err
		}
	}
	if b.Empty() {
		return lastIndex, nil
	}
	return lastIndex, b.Commit(pebble.Sync)
}
