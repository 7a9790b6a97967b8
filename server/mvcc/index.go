package mvcc

import (
	"bytes"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/tenure-io/tenure/server/storage"
)

// keyMeta is what the write side needs of a live key's newest version to
// write the next one: everything but the value.
type keyMeta struct {
	create, mod, version, lease int64
}

// The latest-version index (Store.index) maps every live key to its newest
// version's metadata. It belongs to the write side (the apply goroutine) and
// sees staged writes, exactly like reads through the apply batch do. It lets
// a put or delete skip the storage seek for the previous version: the value
// of that version is read only when somebody asks for it (prev_kv,
// ignore_value, a watcher with prev_kv). Without it, that seek through the
// memtable was the largest single cost of a write on every member.

// buildIndex scans the newest version of every key.
func (s *Store) buildIndex() error {
	idx := map[string]keyMeta{}
	it, err := s.db.NewIter(&pebble.IterOptions{
		LowerBound: []byte{storage.PrefixKV},
		UpperBound: []byte{storage.PrefixKV + 1},
	})
	if err != nil {
		return err
	}
	defer it.Close()
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
			kv, err := decodeKV(v)
			if err != nil {
				return err
			}
			idx[string(user)] = keyMeta{kv.CreateRevision, kv.ModRevision, kv.Version, kv.Lease}
		}
		// skip the older versions of this key
		valid = it.SeekGE(keyUpper(user))
	}
	if err := it.Error(); err != nil {
		return err
	}
	s.index = idx
	return nil
}

// indexPut records kv as key's newest version.
func (s *Store) indexPut(kv *mvccpb.KeyValue) {
	s.index[string(kv.Key)] = keyMeta{kv.CreateRevision, kv.ModRevision, kv.Version, kv.Lease}
}

// metaKV turns an index entry into a KeyValue whose Value is nil: "not
// loaded". Loaded values are never nil (decodeKV guarantees it).
func metaKV(key []byte, m keyMeta) *mvccpb.KeyValue {
	return &mvccpb.KeyValue{Key: key, CreateRevision: m.create, ModRevision: m.mod, Version: m.version, Lease: m.lease}
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
	full, err := decodeKV(v)
	if err != nil {
		return err
	}
	kv.Value = full.Value
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
