package mvcc

import (
	"bytes"
	"errors"

	"github.com/cockroachdb/pebble/v2"

	"github.com/tenure-io/tenure/server/failpoint"
	"github.com/tenure-io/tenure/server/storage"
)

// compactBatchSize bounds the number of deletes per physical-compaction batch.
var compactBatchSize = 1000

var errStopped = errors.New("tenure: mvcc: compaction stopped")

// physicalCompact removes, for every key, all versions older than the
// newest version <= rev (and that version too if it is a tombstone), then the
// revision log below rev, then records KeyCompactDone = rev. It is
// idempotent: a crash at any point leaves a state that a rerun finishes.
// Versions of one key are deleted oldest-last with the tombstone after the
// versions below it, so a reader never sees an older version resurface.
func (s *Store) physicalCompact(rev int64, stop <-chan struct{}) error {
	it, err := s.db.NewIter(&pebble.IterOptions{
		LowerBound: []byte{storage.PrefixKV},
		UpperBound: []byte{storage.PrefixKV + 1},
	})
	if err != nil {
		return err
	}
	defer it.Close()

	b := s.db.NewBatch()
	defer func() { b.Close() }()
	hit := false
	flush := func() error {
		select {
		case <-stop:
			return errStopped
		default:
		}
		if err := b.Commit(pebble.NoSync); err != nil {
			return err
		}
		b.Close()
		b = s.db.NewBatch()
		if !hit {
			hit = true
			failpoint.Hit(failpoint.MVCCCompactMidway)
		}
		return nil
	}

	var prefix, seek, tomb []byte
	ok := it.First()
	for ok {
		k := it.Key()
		if recordRev(k) > rev {
			seek = append(append(seek[:0], recordPrefix(k)...), storage.U64(^uint64(rev))...)
			if ok = it.SeekGE(seek); !ok {
				break
			}
			if !bytes.Equal(recordPrefix(it.Key()), seek[:len(seek)-revLen]) {
				continue // no version <= rev: nothing to do for this key
			}
			k = it.Key()
		}
		prefix = append(prefix[:0], recordPrefix(k)...)
		v, err := it.ValueAndErr()
		if err != nil {
			return err
		}
		tomb = tomb[:0]
		if len(v) > 0 && v[0] == flagTombstone {
			tomb = append(tomb, k...)
		}
		for ok = it.Next(); ok && bytes.Equal(recordPrefix(it.Key()), prefix); ok = it.Next() {
			if err := b.Delete(it.Key(), nil); err != nil {
				return err
			}
			if int(b.Count()) >= compactBatchSize {
				if err := flush(); err != nil {
					return err
				}
			}
		}
		if len(tomb) > 0 {
			if err := b.Delete(tomb, nil); err != nil {
				return err
			}
		}
		if int(b.Count()) >= compactBatchSize {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if err := it.Error(); err != nil {
		return err
	}
	if err := flush(); err != nil {
		return err
	}
	if err := b.DeleteRange([]byte{storage.PrefixRevLog}, revLogKey(rev, 0), nil); err != nil {
		return err
	}
	if err := storage.SetU64(b, storage.KeyCompactDone, uint64(rev)); err != nil {
		return err
	}
	return b.Commit(pebble.NoSync)
}
