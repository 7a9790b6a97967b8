package mvcc

import (
	"bytes"
	"cmp"
	"errors"
	"slices"

	"github.com/cockroachdb/pebble/v2"
	"github.com/google/btree"
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

// rangePlan is how etcd (server/etcdserver/txn executeRange over mvcc
// rangeKeys) executes a RangeRequest: count is the number of keys in the
// range before filters and limit; filters and sorting apply to the fetched
// keys; more reports that the limit cut the result.
type rangePlan struct {
	req      *pb.RangeRequest
	filtered bool
	order    pb.RangeRequest_SortOrder
	fetch    int64 // keys to fetch in key order; -1: all
}

func planRange(req *pb.RangeRequest) rangePlan {
	p := rangePlan{req: req, order: req.SortOrder, fetch: -1}
	p.filtered = req.MinModRevision != 0 || req.MaxModRevision != 0 ||
		req.MinCreateRevision != 0 || req.MaxCreateRevision != 0
	if req.SortTarget != pb.RangeRequest_KEY && p.order == pb.RangeRequest_NONE {
		p.order = pb.RangeRequest_ASCEND
	} else if req.SortTarget == pb.RangeRequest_KEY && p.order == pb.RangeRequest_ASCEND {
		p.order = pb.RangeRequest_NONE
	}
	// etcd fetches everything when a sort order is given or a filter is set;
	// key-ascending needs no fetch-all (it is the scan order).
	if !req.CountOnly && !p.filtered && (req.SortOrder == pb.RangeRequest_NONE || p.order == pb.RangeRequest_NONE) && req.Limit > 0 {
		p.fetch = req.Limit
	}
	if req.CountOnly {
		p.fetch = 0
	}
	return p
}

// wants reports whether the count-th key (1-based, key order) is fetched.
func (p rangePlan) wants(count int64) bool { return p.fetch < 0 || count <= p.fetch }

// finish filters, sorts and cuts the fetched kvs of a range that counted
// count keys. load fills the values the fetch left out (nil: none are left
// out); it is called for the keys a VALUE sort compares and for the keys
// returned, and never for keys_only or count_only.
func (p rangePlan) finish(kvs []*mvccpb.KeyValue, count int64, load func([]*mvccpb.KeyValue) error) (*pb.RangeResponse, error) {
	req := p.req
	resp := &pb.RangeResponse{Kvs: kvs, Count: count}
	if req.CountOnly {
		resp.Kvs = nil
		return resp, nil
	}
	if p.filtered {
		resp.Kvs = slices.DeleteFunc(resp.Kvs, func(kv *mvccpb.KeyValue) bool {
			return (req.MaxModRevision != 0 && kv.ModRevision > req.MaxModRevision) ||
				(req.MinModRevision != 0 && kv.ModRevision < req.MinModRevision) ||
				(req.MaxCreateRevision != 0 && kv.CreateRevision > req.MaxCreateRevision) ||
				(req.MinCreateRevision != 0 && kv.CreateRevision < req.MinCreateRevision)
		})
	}
	if p.order != pb.RangeRequest_NONE {
		if req.SortTarget == pb.RangeRequest_VALUE && load != nil {
			if err := load(resp.Kvs); err != nil {
				return nil, err
			}
		}
		sortKVs(resp.Kvs, req.SortTarget, p.order == pb.RangeRequest_DESCEND)
	}
	if req.Limit > 0 {
		if p.fetch >= 0 {
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
		return resp, nil
	}
	if load != nil && len(resp.Kvs) > 0 {
		if err := load(resp.Kvs); err != nil {
			return nil, err
		}
	}
	return resp, nil
}

// rangeAt executes a RangeRequest at readRev by scanning version records.
func rangeAt(it *pebble.Iterator, lo []byte, req *pb.RangeRequest, readRev int64) (*pb.RangeResponse, error) {
	p := planRange(req)
	var (
		count int64
		kvs   []*mvccpb.KeyValue
	)
	err := scanVisible(it, lo, readRev, func(v []byte) (bool, error) {
		count++
		if !p.wants(count) {
			return true, nil
		}
		kv, err := decodeKV(v)
		if err != nil {
			return false, err
		}
		kvs = append(kvs, kv)
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	return p.finish(kvs, count, nil)
}

// rangeIndexed executes a RangeRequest at the revision idx describes (see
// index.go): it walks the live keys in memory and loads, with load, only the
// values it returns (or sorts by).
func rangeIndexed(idx *btree.BTreeG[indexItem], req *pb.RangeRequest, load func([]*mvccpb.KeyValue) error) (*pb.RangeResponse, error) {
	p := planRange(req)
	var (
		count int64
		kvs   []*mvccpb.KeyValue
	)
	ascendIndex(idx, req.Key, req.RangeEnd, func(it indexItem) bool {
		count++
		if p.wants(count) {
			kvs = append(kvs, metaKV([]byte(it.key), it.m))
		}
		return true
	})
	return p.finish(kvs, count, load)
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

// snapDemandPublishes is how many Publishes after a read at the newest
// revision clone the index for readers (see Store.snap).
const snapDemandPublishes = 64

// Range reads at req.Revision (0 = Rev()). It is safe for concurrent use and
// never sees unpublished revisions. The response Header carries only the
// store's revision when the read was made (etcd's RangeResult.Rev), never a
// later one: a watch started after it misses nothing.
func (s *Store) Range(req *pb.RangeRequest) (*pb.RangeResponse, error) {
	if req.Revision == 0 || req.Revision == s.rev.Load() {
		// At the newest revision, walk the index snapshot when there is one
		// for it (see index.go) and keep Publish making them. A version
		// compacted away under a slow read sends it to the scan below.
		s.snapDemand.Store(snapDemandPublishes)
		if sn := s.snap.Load(); sn != nil && sn.rev == s.rev.Load() && (req.Revision == 0 || req.Revision == sn.rev) {
			resp, err := rangeIndexed(sn.idx, req, s.loadPublished)
			if err == nil {
				resp.Header = &pb.ResponseHeader{Revision: sn.rev}
			}
			if !errors.Is(err, errVersionGone) {
				return resp, err
			}
		}
	}
	return s.rangeScan(req)
}

// rangeScan is Range over the version records.
func (s *Store) rangeScan(req *pb.RangeRequest) (*pb.RangeResponse, error) {
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
		return &pb.RangeResponse{Header: &pb.ResponseHeader{Revision: cur}}, nil
	}
	resp, err := rangeAt(it, lo, req, readRev)
	if err == nil {
		resp.Header = &pb.ResponseHeader{Revision: cur}
	}
	return resp, err
}
