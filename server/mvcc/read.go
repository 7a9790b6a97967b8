package mvcc

import (
	"bytes"
	"cmp"
	"slices"

	"github.com/cockroachdb/pebble/v2"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// scanVisible calls fn for the newest version <= rev of every key in the
// iterator's bounds (starting at lo), skipping keys whose newest such
// version is a tombstone. fn gets the record value (flag byte first) and
// returns false to stop. The iterator must be bounded to PrefixKV records.
func scanVisible(it *pebble.Iterator, lo []byte, rev int64, fn func(v []byte) (bool, error)) error {
	var seek, prefix []byte
	ok := it.SeekGE(lo)
	for ok {
		k := it.Key()
		if recordRev(k) > rev {
			seek = append(append(seek[:0], recordPrefix(k)...), 0, 0, 0, 0, 0, 0, 0, 0)
			putRev(seek[len(seek)-revLen:], rev)
			if ok = it.SeekGE(seek); !ok {
				break
			}
			k = it.Key()
			if !bytes.Equal(recordPrefix(k), seek[:len(seek)-revLen]) {
				continue
			}
		}
		v, err := it.ValueAndErr()
		if err != nil {
			return err
		}
		if len(v) > 0 && v[0] == flagPut {
			more, err := fn(v)
			if err != nil || !more {
				return err
			}
		}
		// Advance to the next key: one Next usually suffices; seek past
		// older versions otherwise.
		prefix = append(prefix[:0], recordPrefix(k)...)
		prefix[len(prefix)-1]++
		ok = it.SeekGE(prefix)
	}
	return it.Error()
}

func putRev(dst []byte, rev int64) {
	u := ^uint64(rev)
	for i := 7; i >= 0; i-- {
		dst[i] = byte(u)
		u >>= 8
	}
}

// checkRev validates a requested revision against the view's current and
// compacted revisions and returns the revision to read at.
func checkRev(req, cur, compact int64) (int64, error) {
	if req <= 0 {
		return cur, nil
	}
	if req > cur {
		return 0, ErrFutureRev
	}
	if req < compact {
		return 0, ErrCompacted
	}
	return req, nil
}

// rangeAt executes a RangeRequest at readRev with etcd's semantics
// (server/etcdserver/txn executeRange over mvcc rangeKeys): count is the
// number of keys in the range before filters and limit; filters and sorting
// apply to the fetched keys; more reports that the limit cut the result.
func rangeAt(it *pebble.Iterator, lo []byte, req *pb.RangeRequest, readRev int64) (*pb.RangeResponse, error) {
	resp := &pb.RangeResponse{}

	filtered := req.MinModRevision != 0 || req.MaxModRevision != 0 ||
		req.MinCreateRevision != 0 || req.MaxCreateRevision != 0
	order := req.SortOrder
	if req.SortTarget != pb.RangeRequest_KEY && order == pb.RangeRequest_NONE {
		order = pb.RangeRequest_ASCEND
	} else if req.SortTarget == pb.RangeRequest_KEY && order == pb.RangeRequest_ASCEND {
		order = pb.RangeRequest_NONE
	}
	// etcd fetches everything when a sort order is given or a filter is set;
	// key-ascending needs no fetch-all (it is the scan order).
	fetch := int64(-1) // -1: all
	if !req.CountOnly && !filtered && (req.SortOrder == pb.RangeRequest_NONE || order == pb.RangeRequest_NONE) && req.Limit > 0 {
		fetch = req.Limit
	}
	if req.CountOnly {
		fetch = 0
	}
	var count int64
	err := scanVisible(it, lo, readRev, func(v []byte) (bool, error) {
		count++
		if fetch >= 0 && count > fetch {
			return true, nil
		}
		kv, err := decodeKV(v)
		if err != nil {
			return false, err
		}
		resp.Kvs = append(resp.Kvs, kv)
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	resp.Count = count
	if req.CountOnly {
		return resp, nil
	}
	if filtered {
		resp.Kvs = slices.DeleteFunc(resp.Kvs, func(kv *mvccpb.KeyValue) bool {
			return (req.MaxModRevision != 0 && kv.ModRevision > req.MaxModRevision) ||
				(req.MinModRevision != 0 && kv.ModRevision < req.MinModRevision) ||
				(req.MaxCreateRevision != 0 && kv.CreateRevision > req.MaxCreateRevision) ||
				(req.MinCreateRevision != 0 && kv.CreateRevision < req.MinCreateRevision)
		})
	}
	if order != pb.RangeRequest_NONE {
		sortKVs(resp.Kvs, req.SortTarget, order == pb.RangeRequest_DESCEND)
	}
	if req.Limit > 0 {
		if fetch >= 0 {
			resp.More = count > req.Limit
		} else if int64(len(resp.Kvs)) > req.Limit {
			resp.Kvs = resp.Kvs[:req.Limit]
			resp.More = true
		}
	}
	if req.KeysOnly {
		for _, kv := range resp.Kvs {
			kv.Value = nil
		}
	}
	return resp, nil
}

func sortKVs(kvs []*mvccpb.KeyValue, target pb.RangeRequest_SortTarget, desc bool) {
	var f func(a, b *mvccpb.KeyValue) int
	switch target {
	case pb.RangeRequest_KEY:
		f = func(a, b *mvccpb.KeyValue) int { return bytes.Compare(a.Key, b.Key) }
	case pb.RangeRequest_VERSION:
		f = func(a, b *mvccpb.KeyValue) int { return cmp.Compare(a.Version, b.Version) }
	case pb.RangeRequest_CREATE:
		f = func(a, b *mvccpb.KeyValue) int { return cmp.Compare(a.CreateRevision, b.CreateRevision) }
	case pb.RangeRequest_MOD:
		f = func(a, b *mvccpb.KeyValue) int { return cmp.Compare(a.ModRevision, b.ModRevision) }
	case pb.RangeRequest_VALUE:
		f = func(a, b *mvccpb.KeyValue) int { return bytes.Compare(a.Value, b.Value) }
	default:
		return
	}
	if desc {
		slices.SortStableFunc(kvs, func(a, b *mvccpb.KeyValue) int { return f(b, a) })
	} else {
		slices.SortStableFunc(kvs, f)
	}
}

// Range reads at req.Revision (0 = Rev()). It is safe for concurrent use and
// never sees unpublished revisions. The response Header is nil.
func (s *Store) Range(req *pb.RangeRequest) (*pb.RangeResponse, error) {
	cur := s.rev.Load()
	lo, hi, ok := kvBounds(req.Key, req.RangeEnd)
	var it *pebble.Iterator
	if ok {
		var err error
		if it, err = s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi}); err != nil {
			return nil, err
		}
		defer it.Close()
	}
	// The iterator is a point-in-time view. Loading the compaction revision
	// after creating it guarantees that physical deletion for any newer
	// compaction had not started when the view was taken.
	readRev, err := checkRev(req.Revision, cur, s.compactRev.Load())
	if err != nil {
		return nil, err
	}
	if !ok {
		return &pb.RangeResponse{}, nil
	}
	return rangeAt(it, lo, req, readRev)
}
