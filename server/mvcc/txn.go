package mvcc

import (
	"bytes"
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble/v2"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"

	"github.com/tenure-io/tenure/server/storage"
)

// Txn stages one revision's worth of changes into a caller-owned indexed
// batch. All changes made between Begin and End share one main revision;
// sub revisions follow the order of the changes.
//
// Errors: ErrKeyNotFound, ErrLeaseNotFound, ErrCompacted and ErrFutureRev are
// detected before anything is written (for Txn: before any operation of the
// transaction runs), so the batch is untouched. Any other error (storage
// failure, corrupt record) may leave partial writes in the batch: the caller
// must drop the batch and call Store.Abandon.
type Txn struct {
	s      *Store
	b      *pebble.Batch
	leases LeaseIndex
	base   int64 // staged revision at Begin; changes get base+1
	it     *pebble.Iterator
	dirty  bool // batch changed since it was last refreshed
	events []*mvccpb.Event
	buf    []byte
	// unread: the caller throws the results of this txn's ranges away
	// (DiscardRangeValues), so ranges load no values.
	unread bool
}

// Begin starts a write transaction on b (which must come from
// db.NewIndexedBatch). leases may be nil.
func (s *Store) Begin(b *pebble.Batch, leases LeaseIndex) *Txn {
	return &Txn{s: s, b: b, leases: leases, base: s.staged}
}

// DiscardRangeValues tells t that nobody will read the values its ranges
// return (a Txn's ranges included): the apply loop calls it on a member where
// no caller waits for the request's response. Ranges still check their
// revision and walk the index, so they fail, and a Txn with them changes
// the store, exactly as they would otherwise; only the values, which on a
// busy store cost a storage seek each, are left out. Compares, prev_kv and
// events are unchanged.
func (t *Txn) DiscardRangeValues() { t.unread = true }

// viewRev is the revision reads in this txn see: the staged revision, plus
// one once this txn has changed something.
func (t *Txn) viewRev() int64 {
	if len(t.events) > 0 {
		return t.base + 1
	}
	return t.base
}

// iter returns the txn's iterator over the batch, bounded to [lo, hi) and
// refreshed to see every write made so far.
func (t *Txn) iter(lo, hi []byte) (*pebble.Iterator, error) {
	if t.it == nil {
		it, err := t.b.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
		if err != nil {
			return nil, err
		}
		t.it, t.dirty = it, false
		return it, nil
	}
	if t.dirty {
		t.it.SetOptions(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
		t.dirty = false
	} else {
		t.it.SetBounds(lo, hi)
	}
	return t.it, nil
}

// scan runs scanVisible on the txn's iterator.
func (t *Txn) scan(lo, hi []byte, rev int64, fn func(v []byte) (bool, error)) error {
	it, err := t.iter(lo, hi)
	if err != nil {
		return err
	}
	return scanVisible(it, lo, rev, fn)
}

// latest returns the newest live version of key as seen through the batch,
// or nil.
func (t *Txn) latest(key []byte) (*mvccpb.KeyValue, error) {
	m, ok := t.s.indexGet(key)
	if !ok {
		return nil, nil
	}
	return metaKV(key, m), nil
}

// collect returns the live keys in [key, end) at the txn's view, without
// their values (loadValue reads one when asked: a VALUE compare, prev_kv).
func (t *Txn) collect(key, end []byte) ([]*mvccpb.KeyValue, error) {
	var kvs []*mvccpb.KeyValue
	ascendIndex(t.s.index, key, end, func(it indexItem) bool {
		kvs = append(kvs, metaKV([]byte(it.key), it.m))
		return true
	})
	return kvs, nil
}

// Range reads through the batch: it sees this txn's writes and earlier
// staged, unpublished ones. Header.Revision is the txn's view revision.
func (t *Txn) Range(req *pb.RangeRequest) (*pb.RangeResponse, error) {
	view := t.viewRev()
	readRev, err := checkRev(req.Revision, view, t.s.stagedCompact)
	if err != nil {
		return nil, err
	}
	resp := &pb.RangeResponse{}
	if readRev == view {
		// the index is exactly the txn's view
		load := t.loadValues
		if t.unread {
			load = func([]*mvccpb.KeyValue) error { return nil }
		}
		if resp, err = rangeIndexed(t.s.index, req, load); err != nil {
			return nil, err
		}
	} else if lo, hi, ok := kvBounds(req.Key, req.RangeEnd); ok {
		it, err := t.iter(lo, hi)
		if err != nil {
			return nil, err
		}
		if resp, err = rangeAt(it, lo, req, readRev); err != nil {
			return nil, err
		}
	}
	resp.Header = &pb.ResponseHeader{Revision: view}
	return resp, nil
}

func clip(kv *mvccpb.KeyValue) *mvccpb.KeyValue {
	if kv == nil {
		return nil
	}
	return &mvccpb.KeyValue{Key: kv.Key, CreateRevision: kv.CreateRevision, ModRevision: kv.ModRevision,
		Version: kv.Version, Value: kv.Value, Lease: kv.Lease}
}

// checkPut is etcd's checkPut: ErrKeyNotFound, then ErrLeaseNotFound.
func (t *Txn) checkPut(req *pb.PutRequest) (*mvccpb.KeyValue, error) {
	prev, err := t.latest(req.Key)
	if err != nil {
		return nil, err
	}
	if (req.IgnoreValue || req.IgnoreLease) && prev == nil {
		return nil, ErrKeyNotFound
	}
	if req.Lease != 0 && !req.IgnoreLease && t.leases != nil && !t.leases.Exists(req.Lease) {
		return nil, ErrLeaseNotFound
	}
	return prev, nil
}

// Put writes a new version of req.Key.
func (t *Txn) Put(req *pb.PutRequest) (*pb.PutResponse, error) {
	prev, err := t.checkPut(req)
	if err != nil {
		return nil, err
	}
	return t.put(req, prev)
}

func (t *Txn) put(req *pb.PutRequest, prev *mvccpb.KeyValue) (*pb.PutResponse, error) {
	rev := t.base + 1
	val, lease := req.Value, req.Lease
	if req.IgnoreValue || req.PrevKv {
		if err := t.loadValue(prev); err != nil {
			return nil, err
		}
	}
	if req.IgnoreValue {
		val = prev.Value
	}
	if req.IgnoreLease {
		lease = prev.Lease
	}
	kv := &mvccpb.KeyValue{Key: req.Key, CreateRevision: rev, ModRevision: rev, Version: 1, Value: val, Lease: lease}
	if prev != nil {
		kv.CreateRevision = prev.CreateRevision
		kv.Version = prev.Version + 1
	}
	if err := t.write(kv, mvccpb.Event_PUT); err != nil {
		return nil, err
	}
	var oldLease int64
	if prev != nil {
		oldLease = prev.Lease
	}
	if t.leases != nil && oldLease != lease {
		if oldLease != 0 {
			t.leases.Detach(oldLease, req.Key)
		}
		if lease != 0 {
			t.leases.Attach(lease, req.Key)
		}
	}
	t.events = append(t.events, &mvccpb.Event{Type: mvccpb.Event_PUT, Kv: kv, PrevKv: prev})
	resp := &pb.PutResponse{Header: &pb.ResponseHeader{Revision: rev}}
	if req.PrevKv {
		resp.PrevKv = clip(prev)
	}
	return resp, nil
}

// write stages the version record and the revision-log entry of one change.
func (t *Txn) write(kv *mvccpb.KeyValue, typ mvccpb.Event_EventType) error {
	rev := t.base + 1
	sub := int64(len(t.events))
	k := appendVersionKey(t.buf[:0], kv.Key, rev)
	t.buf = k
	var v []byte
	if typ == mvccpb.Event_PUT {
		var err error
		v, err = proto.MarshalOptions{}.MarshalAppend([]byte{flagPut}, kv)
		if err != nil {
			return fmt.Errorf("tenure: mvcc: marshal: %w", err)
		}
	} else {
		v = []byte{flagTombstone}
	}
	if err := t.b.Set(k, v, nil); err != nil {
		return err
	}
	if typ == mvccpb.Event_PUT {
		t.s.indexPut(kv)
	} else {
		t.s.indexDelete(kv.Key)
	}
	lv := make([]byte, 0, 1+len(kv.Key))
	lv = append(append(lv, byte(typ)), kv.Key...)
	if err := t.b.Set(revLogKey(rev, sub), lv, nil); err != nil {
		return err
	}
	t.dirty = true
	return nil
}

func (t *Txn) deleteKV(prev *mvccpb.KeyValue) error {
	rev := t.base + 1
	kv := &mvccpb.KeyValue{Key: prev.Key, ModRevision: rev}
	if err := t.write(kv, mvccpb.Event_DELETE); err != nil {
		return err
	}
	if t.leases != nil && prev.Lease != 0 {
		t.leases.Detach(prev.Lease, prev.Key)
	}
	t.events = append(t.events, &mvccpb.Event{Type: mvccpb.Event_DELETE, Kv: kv, PrevKv: prev})
	return nil
}

// DeleteRange deletes the live keys in [key, range_end). Deleting nothing
// does not create a revision.
func (t *Txn) DeleteRange(req *pb.DeleteRangeRequest) (*pb.DeleteRangeResponse, error) {
	kvs, err := t.collect(req.Key, req.RangeEnd)
	if err != nil {
		return nil, err
	}
	resp := &pb.DeleteRangeResponse{Deleted: int64(len(kvs))}
	for _, kv := range kvs {
		if req.PrevKv {
			if err := t.loadValue(kv); err != nil {
				return nil, err
			}
		}
		if err := t.deleteKV(kv); err != nil {
			return nil, err
		}
		if req.PrevKv {
			resp.PrevKvs = append(resp.PrevKvs, clip(kv))
		}
	}
	resp.Header = &pb.ResponseHeader{Revision: t.viewRev()}
	return resp, nil
}

// DeleteAt deletes key if its live version was created at createRev (a
// lock release at its fencing token) and reports whether it did: one index
// lookup, where Range then DeleteRange would each scan the index.
func (t *Txn) DeleteAt(key []byte, createRev int64) (bool, error) {
	return t.deleteLatest(key, createRev)
}

// DeleteKey deletes key if it exists, in this txn's revision; it reports
// whether it did.
func (t *Txn) DeleteKey(key []byte) (bool, error) { return t.deleteLatest(key, 0) }

// deleteLatest deletes key's live version if there is one and, unless
// createRev is 0 (no live key has create revision 0), it was created at
// createRev.
func (t *Txn) deleteLatest(key []byte, createRev int64) (bool, error) {
	prev, err := t.latest(key)
	if err != nil || prev == nil || (createRev != 0 && prev.CreateRevision != createRev) {
		return false, err
	}
	return true, t.deleteKV(prev)
}

// DeleteKeys deletes those of keys that exist (lease revoke), in sorted
// order, in this txn's revision. A storage failure here panics: the apply
// loop cannot continue deterministically after it.
func (t *Txn) DeleteKeys(keys [][]byte) {
	if err := t.deleteKeys(keys); err != nil {
		panic(fmt.Sprintf("tenure: mvcc: delete keys: %v", err))
	}
}

func (t *Txn) deleteKeys(keys [][]byte) error {
	keys = slices.Clone(keys)
	slices.SortFunc(keys, bytes.Compare)
	keys = slices.CompactFunc(keys, bytes.Equal)
	for _, k := range keys {
		prev, err := t.latest(k)
		if err != nil {
			return err
		}
		if prev != nil {
			if err := t.deleteKV(prev); err != nil {
				return err
			}
		}
	}
	return nil
}

// Compact schedules a compaction at rev: it records KeyCompactRev in the
// batch; physical deletion starts after Publish.
func (t *Txn) Compact(rev int64) error {
	if rev <= t.s.stagedCompact {
		return ErrCompacted
	}
	if rev > t.viewRev() {
		return ErrFutureRev
	}
	if err := storage.SetU64(t.b, storage.KeyCompactRev, uint64(rev)); err != nil {
		return err
	}
	t.s.stagedCompact = rev
	return nil
}

// End finishes the txn. If anything changed it assigns the next revision
// and returns it with the events (Kv and PrevKv filled); Store.Seal records
// it in the batch. Otherwise it returns the latest staged revision and nil.
func (t *Txn) End() (int64, []*mvccpb.Event) {
	if t.it != nil {
		t.it.Close()
		t.it = nil
	}
	if len(t.events) == 0 {
		return t.s.staged, nil
	}
	rev := t.base + 1
	t.s.staged = rev
	evs := t.events
	t.events = nil
	return rev, evs
}
