package mvcc

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"unsafe"

	"github.com/cockroachdb/pebble/v2"
	"github.com/google/btree"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/tenure-io/tenure/server/storage"
)

// keyMeta is what the write side needs of a live key's newest version to
// write the next one: everything but the value, and whether that is empty.
type keyMeta struct {
	create, mod, version, lease int64
	// empty: the value is empty, so there is nothing to load. Lock and
	// election queue keys (clientv3's Mutex, v3lock, the lock service) are
	// all empty, and clientv3's Mutex reads its lock's owner in every
	// acquire: without this each such read was a storage seek.
	empty bool
}

// The latest-version index (Store.index) maps every live key to its newest
// version's metadata. It belongs to the write side (the apply goroutine) and
// sees staged writes, exactly like reads through the apply batch do. It lets
// a put or delete skip the storage seek for the previous version: the value
// of that version is read only when somebody asks for it (prev_kv,
// ignore_value, a watcher with prev_kv). Without it, that seek through the
// memtable was the largest single cost of a write on every member.
//
// It is ordered (a B-tree), so a range at the newest revision walks the live
// keys in memory instead of seeking past every older version of every key in
// storage, and reads only the values it returns. A lock queue's keys are put
// and deleted on every cycle; until compaction each keeps all its versions,
// and the per-key seeks made clientv3's Mutex recipe (which ranges over the
// queue on every acquire) spend 40% of its CPU in them.

// indexItem keys are strings: half the memory of []byte items (at a million
// 8-byte keys, 54 MB against 105 MB; the map the index used to be took
// 119 MB).
type indexItem struct {
	key string
	m   keyMeta
}

func indexLess(a, b indexItem) bool { return a.key < b.key }

// probe is an index item to look key up with: the string shares key's
// bytes, which is safe because the tree never keeps a probe.
func probe(key []byte) indexItem {
	return indexItem{key: unsafe.String(unsafe.SliceData(key), len(key))}
}

// Degree 16: a node holds at most 31 items (~1.7 KiB), what a write copies
// per level after Publish cloned the tree for readers.
func newIndex() *btree.BTreeG[indexItem] { return btree.NewG(16, indexLess) }

// buildIndex scans the newest version of every key.
func (s *Store) buildIndex() error {
	idx := newIndex()
	it, err := s.db.NewIter(&pebble.IterOptions{
		LowerBound: []byte{storage.PrefixKV},
		UpperBound: []byte{storage.PrefixKV + 1},
	})
	if err != nil {
		return err
	}
	defer it.Close()
	var prefix []byte
	for valid := it.First(); valid; {
		k := it.Key()
		user, _, ok := decodeVersionKey(k)
		if !ok {
			return fmt.Errorf("tenure: mvcc: corrupt version key %x", k)
		}
		v, err := it.ValueAndErr()
		if err != nil {
			return err
		}
		if len(v) > 0 && v[0] == flagPut {
			m, err := decodeMeta(v)
			if err != nil {
				return err
			}
			idx.ReplaceOrInsert(indexItem{string(user), m})
		}
		// Skip the older versions of this key: step while there are few
		// (most keys have one version; a seek per key, through every level,
		// was most of a restart's index build), seek past many.
		prefix = append(prefix[:0], recordPrefix(k)...)
		valid = it.Next()
		for n := 0; valid && bytes.Equal(recordPrefix(it.Key()), prefix); n++ {
			if n == 8 {
				prefix[len(prefix)-1]++ // keyUpper
				valid = it.SeekGE(prefix)
				break
			}
			valid = it.Next()
		}
	}
	if err := it.Error(); err != nil {
		return err
	}
	s.index = idx
	s.snap.Store(nil)
	return nil
}

// indexSnap is the index as of a published revision, for readers.
type indexSnap struct {
	rev int64
	idx *btree.BTreeG[indexItem]
}

// errVersionGone: a value load found its version compacted away.
var errVersionGone = errors.New("tenure: mvcc: version compacted during the read")

// loadPublished fills the values of kvs (listed in any order) from
// committed version records.
func (s *Store) loadPublished(kvs []*mvccpb.KeyValue) error {
	if len(kvs) == 1 {
		kv := kvs[0]
		if kv.Value != nil {
			return nil
		}
		v, closer, err := s.db.Get(appendVersionKey(nil, kv.Key, kv.ModRevision))
		if errors.Is(err, pebble.ErrNotFound) {
			return errVersionGone
		}
		if err != nil {
			return err
		}
		defer closer.Close()
		if kv.Value, err = decodeValue(v); err != nil {
			return err
		}
		return nil
	}
	return loadValues(kvs, func(lo, hi []byte) (*pebble.Iterator, func(), error) {
		it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
		if err != nil {
			return nil, nil, err
		}
		return it, func() { it.Close() }, nil
	})
}

// loadValues fills the values of kvs through one iterator that open bounds
// to their version records: it visits them in key order, so each seek is a
// short step forward (Pebble's TrySeekUsingNext) rather than a fresh
// descent, as cheap as the scan a range over the records would have made.
func loadValues(kvs []*mvccpb.KeyValue, open func(lo, hi []byte) (*pebble.Iterator, func(), error)) error {
	todo := make([]*mvccpb.KeyValue, 0, len(kvs))
	for _, kv := range kvs {
		if kv.Value == nil {
			todo = append(todo, kv)
		}
	}
	if len(todo) == 0 {
		return nil
	}
	slices.SortFunc(todo, func(a, b *mvccpb.KeyValue) int { return bytes.Compare(a.Key, b.Key) })
	lo := appendVersionKey(nil, todo[0].Key, todo[0].ModRevision)
	hi := append(appendVersionKey(nil, todo[len(todo)-1].Key, todo[len(todo)-1].ModRevision), 0)
	it, done, err := open(lo, hi)
	if err != nil {
		return err
	}
	defer done()
	var vk []byte
	for _, kv := range todo {
		vk = appendVersionKey(vk[:0], kv.Key, kv.ModRevision)
		if !it.SeekGE(vk) || !bytes.Equal(it.Key(), vk) {
			if err := it.Error(); err != nil {
				return err
			}
			return errVersionGone
		}
		v, err := it.ValueAndErr()
		if err != nil {
			return err
		}
		if kv.Value, err = decodeValue(v); err != nil {
			return err
		}
	}
	return nil
}

// ForEachLeased calls fn(lease, key) for every live key attached to a lease. It reads
// the write side's index: call it from the writer (at start, after Reload).
func (s *Store) ForEachLeased(fn func(lease int64, key []byte)) {
	s.index.Ascend(func(it indexItem) bool {
		if it.m.lease != 0 {
			fn(it.m.lease, []byte(it.key))
		}
		return true
	})
}

// indexGet returns key's newest live version.
func (s *Store) indexGet(key []byte) (keyMeta, bool) {
	it, ok := s.index.Get(probe(key))
	return it.m, ok
}

// indexPut records kv as key's newest version.
func (s *Store) indexPut(kv *mvccpb.KeyValue) {
	s.index.ReplaceOrInsert(indexItem{string(kv.Key), keyMeta{kv.CreateRevision, kv.ModRevision, kv.Version, kv.Lease, len(kv.Value) == 0}})
}

// indexDelete forgets key (its newest version is a tombstone).
func (s *Store) indexDelete(key []byte) { s.index.Delete(probe(key)) }

// ascendIndex calls fn for the live keys of idx in [key, end), in key order,
// with kvBounds' conventions for end (empty: key alone; "\x00": every key
// from key on), until fn returns false.
func ascendIndex(idx *btree.BTreeG[indexItem], key, end []byte, fn func(indexItem) bool) {
	switch {
	case len(end) == 0:
		if it, ok := idx.Get(probe(key)); ok {
			fn(it)
		}
	case len(end) == 1 && end[0] == 0:
		idx.AscendGreaterOrEqual(probe(key), fn)
	case bytes.Compare(key, end) < 0:
		idx.AscendRange(probe(key), probe(end), fn)
	}
}

// metaKV turns an index entry into a KeyValue whose Value is nil: "not
// loaded" (loaded values are never nil: decodeKV guarantees it), or, when
// the value is empty, an empty one: nothing is left to load.
func metaKV(key []byte, m keyMeta) *mvccpb.KeyValue {
	kv := &mvccpb.KeyValue{Key: key, CreateRevision: m.create, ModRevision: m.mod, Version: m.version, Lease: m.lease}
	if m.empty {
		kv.Value = []byte{}
	}
	return kv
}

// loadValues fills the values of kvs (versions seen through the txn's
// batch, listed in any order) in place.
func (t *Txn) loadValues(kvs []*mvccpb.KeyValue) error {
	if len(kvs) == 1 {
		return t.loadValue(kvs[0])
	}
	return loadValues(kvs, func(lo, hi []byte) (*pebble.Iterator, func(), error) {
		it, err := t.iter(lo, hi)
		return it, func() {}, err
	})
}

// loadValue fills kv.Value (a version seen through the txn's batch) in place.
func (t *Txn) loadValue(kv *mvccpb.KeyValue) error {
	if kv == nil || kv.Value != nil {
		return nil
	}
	vk := appendVersionKey(nil, kv.Key, kv.ModRevision)
	it, err := t.iter(vk, append(vk, 0))
	if err != nil {
		return err
	}
	if !it.SeekGE(vk) || !bytes.Equal(it.Key(), vk) {
		if err := it.Error(); err != nil {
			return err
		}
		return fmt.Errorf("tenure: mvcc: version %d of %q missing", kv.ModRevision, kv.Key)
	}
	v, err := it.ValueAndErr()
	if err != nil {
		return err
	}
	val, err := decodeValue(v)
	if err != nil {
		return err
	}
	kv.Value = val
	return nil
}

// LoadPrevValue returns kv with its value read from the store when an event
// carried it without one (see the latest-version index). It reads published
// data; when the version has been compacted away it returns kv unchanged.
func (s *Store) LoadPrevValue(kv *mvccpb.KeyValue) *mvccpb.KeyValue {
	if kv == nil || kv.Value != nil {
		return kv
	}
	v, closer, err := s.db.Get(appendVersionKey(nil, kv.Key, kv.ModRevision))
	if err != nil {
		return kv
	}
	defer closer.Close()
	full, err := decodeKV(v)
	if err != nil {
		return kv
	}
	return &mvccpb.KeyValue{Key: kv.Key, CreateRevision: kv.CreateRevision, ModRevision: kv.ModRevision,
		Version: kv.Version, Lease: kv.Lease, Value: full.Value}
}
