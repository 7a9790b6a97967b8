package mvcc

import (
	"bytes"

	"github.com/cockroachdb/pebble/v2"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/tenure-io/tenure/server/storage"
)

// History returns the events with main revision in [fromRev, toRev] (toRev
// <= 0 or beyond Rev() means Rev()) on keys in [key, end) — end nil: the
// single key; end "\x00": every key >= key — in ascending (main, sub)
// order, with PrevKv filled when the previous version still exists. It
// returns at most about limit events (limit <= 0: no limit) but never splits
// a revision; next is the revision to continue from (toRev+1 when done).
// ErrCompacted if 0 < fromRev < CompactRev(), as etcd's watch (a watch may
// start at the compacted revision itself; PrevKv of events at exactly that
// revision is gone).
func (s *Store) History(fromRev, toRev int64, key, end []byte, limit int) ([]*mvccpb.Event, int64, error) {
	cur := s.rev.Load()
	if toRev <= 0 || toRev > cur {
		toRev = cur
	}
	if fromRev < 1 {
		fromRev = 1
	}
	logIt, err := s.db.NewIter(&pebble.IterOptions{
		LowerBound: revLogKey(fromRev, 0),
		UpperBound: revLogKey(toRev+1, 0),
	})
	if err != nil {
		return nil, 0, err
	}
	defer logIt.Close()
	kvIt, err := s.db.NewIter(&pebble.IterOptions{
		LowerBound: []byte{storage.PrefixKV},
		UpperBound: []byte{storage.PrefixKV + 1},
	})
	if err != nil {
		return nil, 0, err
	}
	defer kvIt.Close()
	compact := s.compactRev.Load() // after the iterators: see Range
	if fromRev < compact {
		return nil, 0, ErrCompacted
	}
	if fromRev > toRev {
		return nil, fromRev, nil
	}

	var evs []*mvccpb.Event
	var seek []byte
	lastMain := int64(-1)
	for ok := logIt.First(); ok; ok = logIt.Next() {
		main, _, valid := decodeRevLogKey(logIt.Key())
		if !valid {
			continue
		}
		if main != lastMain {
			if limit > 0 && len(evs) >= limit {
				return evs, main, nil
			}
			lastMain = main
		}
		v, err := logIt.ValueAndErr()
		if err != nil {
			return nil, 0, err
		}
		if len(v) < 1 {
			continue
		}
		ukey := v[1:]
		if !inRange(ukey, key, end) {
			continue
		}
		ev := &mvccpb.Event{Type: mvccpb.Event_EventType(v[0])}
		ukey = bytes.Clone(ukey)
		// Position at the newest version <= main: the record of this event
		// (if it still exists), followed by the previous version.
		seek = appendVersionKey(seek[:0], ukey, main)
		prefix := seek[:len(seek)-revLen]
		var cur, prev *mvccpb.KeyValue
		for ok := kvIt.SeekGE(seek); ok && bytes.Equal(recordPrefix(kvIt.Key()), prefix); ok = kvIt.Next() {
			rv, err := kvIt.ValueAndErr()
			if err != nil {
				return nil, 0, err
			}
			r := recordRev(kvIt.Key())
			if r == main {
				if ev.Type == mvccpb.Event_PUT && len(rv) > 0 && rv[0] == flagPut {
					if cur, err = decodeKV(rv); err != nil {
						return nil, 0, err
					}
				}
				continue
			}
			if len(rv) > 0 && rv[0] == flagPut {
				if prev, err = decodeKV(rv); err != nil {
					return nil, 0, err
				}
			}
			break
		}
		if ev.Type == mvccpb.Event_DELETE || cur == nil {
			cur = &mvccpb.KeyValue{Key: ukey, ModRevision: main}
		}
		ev.Kv, ev.PrevKv = cur, prev
		evs = append(evs, ev)
	}
	if err := logIt.Error(); err != nil {
		return nil, 0, err
	}
	return evs, toRev + 1, nil
}
