package mvcc

import (
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// The write path reads no previous value unless asked: events carry the
// previous version's metadata with a nil Value, LoadPrevValue fills it, and
// prev_kv / ignore_value / VALUE compares still see the real value.
func TestLatestIndexDefersPreviousValues(t *testing.T) {
	e := newEnv(t)
	e.put("k", "old")
	var putResp *pb.PutResponse
	b := e.db.NewIndexedBatch()
	tx := e.s.Begin(b, nil)
	if _, err := tx.Put(&pb.PutRequest{Key: []byte("k"), Value: []byte("new")}); err != nil {
		t.Fatal(err)
	}
	rev, evs := tx.End()
	if err := b.Commit(nil); err != nil {
		t.Fatal(err)
	}
	b.Close()
	e.s.Publish(rev)
	if len(evs) != 1 || evs[0].PrevKv == nil || evs[0].PrevKv.Value != nil || evs[0].PrevKv.Version != 1 {
		t.Fatalf("want a PrevKv with metadata and no value, got %v", evs)
	}
	if got := e.s.LoadPrevValue(evs[0].PrevKv); string(got.Value) != "old" || got.ModRevision != evs[0].PrevKv.ModRevision {
		t.Fatalf("LoadPrevValue = %v", got)
	}
	// prev_kv on a put loads the value through the batch.
	_, _, err := e.apply(func(tx *Txn) error {
		var err error
		putResp, err = tx.Put(&pb.PutRequest{Key: []byte("k"), Value: []byte("newer"), PrevKv: true})
		return err
	})
	if err != nil || string(putResp.PrevKv.Value) != "new" {
		t.Fatalf("prev_kv: %v %v", putResp, err)
	}
	// ignore_value keeps the current value.
	e.apply(func(tx *Txn) error {
		_, err := tx.Put(&pb.PutRequest{Key: []byte("k"), IgnoreValue: true})
		return err
	})
	if kvs := e.get(&pb.RangeRequest{Key: []byte("k")}).Kvs; string(kvs[0].Value) != "newer" || kvs[0].Version != 4 {
		t.Fatalf("ignore_value: %v", kvs)
	}
	// A VALUE compare sees the value, not the unloaded nil.
	var tr *pb.TxnResponse
	e.apply(func(tx *Txn) error {
		var err error
		tr, err = tx.Txn(&pb.TxnRequest{Compare: []*pb.Compare{{Key: []byte("k"), Target: pb.Compare_VALUE,
			Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_Value{Value: []byte("newer")}}}})
		return err
	})
	if !tr.Succeeded {
		t.Fatal("VALUE compare against the current value failed")
	}
	// The index survives a reopen (rebuilt from the store).
	if err := e.s.Reload(); err != nil {
		t.Fatal(err)
	}
	if m, ok := e.s.index["k"]; !ok || m.version != 4 || m.create != 2 {
		t.Fatalf("index after reload: %+v %v", m, ok)
	}
	e.del("k", "")
	if _, ok := e.s.index["k"]; ok {
		t.Fatal("deleted key still indexed")
	}
}
