package mvcc

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"
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
	if err := e.s.Seal(b); err != nil {
		t.Fatal(err)
	}
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
	if m, ok := e.s.indexGet([]byte("k")); !ok || m.version != 4 || m.create != 2 {
		t.Fatalf("index after reload: %+v %v", m, ok)
	}
	e.del("k", "")
	if _, ok := e.s.indexGet([]byte("k")); ok {
		t.Fatal("deleted key still indexed")
	}
}

// TestIndexedRangeMatchesScan drives random writes, compactions and reopens
// (which rebuild the index from storage) and
// checks that every range answered from the ordered index (the published
// snapshot readers use, and the write side's index inside a txn) equals the
// same range answered by scanning version records.
func TestIndexedRangeMatchesScan(t *testing.T) {
	e := newEnv(t)
	rng := rand.New(rand.NewPCG(20261130, 1))
	keys := []string{"a", "a\x00", "a\x00b", "ab", "b", "b\x00", "lock/1", "lock/2", "lock/3", "lock0", "z", "\xff"}
	key := func() []byte { return []byte(keys[rng.IntN(len(keys))]) }
	end := func() []byte {
		switch rng.IntN(4) {
		case 0:
			return nil
		case 1:
			return []byte{0}
		default:
			return key()
		}
	}
	randReq := func() *pb.RangeRequest {
		r := &pb.RangeRequest{Key: key(), RangeEnd: end(), Limit: int64(rng.IntN(4))}
		if rng.IntN(3) == 0 {
			r.SortOrder = pb.RangeRequest_SortOrder(rng.IntN(3))
			r.SortTarget = pb.RangeRequest_SortTarget(rng.IntN(5))
		}
		r.KeysOnly = rng.IntN(5) == 0
		r.CountOnly = rng.IntN(6) == 0
		if rng.IntN(4) == 0 {
			r.MinModRevision = int64(rng.IntN(int(e.s.Rev()) + 1))
			r.MaxCreateRevision = int64(rng.IntN(int(e.s.Rev()) + 1))
		}
		if rng.IntN(5) == 0 {
			r.Revision = e.s.Rev()
		}
		return r
	}
	checked := 0
	for step := 0; step < 400; step++ {
		e.s.snapDemand.Store(1) // the next Publish clones the index
		_, _, err := e.apply(func(tx *Txn) error {
			for n := 1 + rng.IntN(3); n > 0; n-- {
				var err error
				switch rng.IntN(3) {
				case 0, 1:
					_, err = tx.Put(&pb.PutRequest{Key: key(), Value: []byte(fmt.Sprintf("v%d", rng.IntN(5)))})
				default:
					_, err = tx.DeleteRange(&pb.DeleteRangeRequest{Key: key(), RangeEnd: end()})
				}
				if err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if step%200 == 149 {
			if err := e.compact(e.s.Rev()-3, true); err != nil {
				t.Fatal(err)
			}
			e.s.snapDemand.Store(1)
			e.put("z", "after-compaction")
		}
		if step%100 == 99 {
			e.reopen() // the index is rebuilt from the version records
			e.s.snapDemand.Store(1)
			e.put("z", "after-reopen")
		}
		if sn := e.s.snap.Load(); sn == nil || sn.rev != e.s.Rev() {
			t.Fatalf("step %d: no index snapshot at revision %d after a reader asked", step, e.s.Rev())
		}
		for i := 0; i < 20; i++ {
			req := randReq()
			want, err := e.s.rangeScan(req)
			if err != nil {
				t.Fatal(err)
			}
			got, err := e.s.Range(req)
			if err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(got, want) {
				t.Fatalf("step %d: Range(%v)\n index: %v\n  scan: %v", step, req, got, want)
			}
			_, _, err = e.apply(func(tx *Txn) error {
				inTxn, err := tx.Range(req)
				if err != nil {
					return err
				}
				inTxn.Header = want.Header
				if !proto.Equal(inTxn, want) {
					t.Fatalf("step %d: Txn.Range(%v)\n index: %v\n  scan: %v", step, req, inTxn, want)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			checked++
		}
	}
	t.Logf("%d ranges compared at %d revisions", checked, e.s.Rev())
}

// TestIndexSnapshotReadersRace runs readers on published index snapshots
// while the writer keeps changing (and copy-on-write copying) the index; the
// race detector (make test runs unit tests with -race) checks that they
// share nothing mutable. No read may see a version newer than the revision
// it reports (as one reading the writer's own index would).
func TestIndexSnapshotReadersRace(t *testing.T) {
	e := newEnv(t)
	e.put("n", "0")
	stop := make(chan struct{})
	errs := make(chan error, 4)
	for r := 0; r < 4; r++ {
		go func() {
			for {
				select {
				case <-stop:
					errs <- nil
					return
				default:
				}
				resp, err := e.s.Range(&pb.RangeRequest{Key: []byte("m/"), RangeEnd: []byte("m0")})
				if err != nil {
					errs <- err
					return
				}
				for _, kv := range resp.Kvs {
					if kv.ModRevision > resp.Header.GetRevision() {
						errs <- fmt.Errorf("read at revision %d saw %q modified at %d", resp.Header.GetRevision(), kv.Key, kv.ModRevision)
						return
					}
				}
			}
		}()
	}
	for i := 0; i < 2000; i++ {
		_, _, err := e.apply(func(tx *Txn) error {
			if _, err := tx.Put(&pb.PutRequest{Key: []byte(fmt.Sprintf("m/%04d", i%300)), Value: []byte("v")}); err != nil {
				return err
			}
			if i%3 == 0 {
				_, err := tx.DeleteRange(&pb.DeleteRangeRequest{Key: []byte(fmt.Sprintf("m/%04d", (i*7)%300))})
				return err
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	for r := 0; r < 4; r++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// decodeMeta and decodeValue read single fields of a version record; they
// must agree with decoding the whole record.
func TestPartialDecodersMatchDecodeKV(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for i := 0; i < 500; i++ {
		kv := &mvccpb.KeyValue{Key: []byte(fmt.Sprintf("k%d", i)), CreateRevision: rng.Int64N(1 << 40), ModRevision: rng.Int64N(1 << 40),
			Version: rng.Int64N(1000), Lease: rng.Int64N(1 << 62)}
		if i%3 != 0 {
			kv.Value = []byte(fmt.Sprintf("value-%d", rng.Int64()))
		}
		rec, err := proto.Marshal(kv)
		if err != nil {
			t.Fatal(err)
		}
		rec = append([]byte{flagPut}, rec...)
		want, err := decodeKV(rec)
		if err != nil {
			t.Fatal(err)
		}
		m, err := decodeMeta(rec)
		if err != nil || m != (keyMeta{want.CreateRevision, want.ModRevision, want.Version, want.Lease, len(want.Value) == 0}) {
			t.Fatalf("decodeMeta(%v) = %+v, %v", kv, m, err)
		}
		v, err := decodeValue(rec)
		if err != nil || !bytes.Equal(v, want.Value) || v == nil {
			t.Fatalf("decodeValue(%v) = %q, %v; want %q (never nil)", kv, v, err, want.Value)
		}
	}
	if _, err := decodeMeta([]byte{flagPut, 0x12, 0x05, 'a'}); err == nil {
		t.Fatal("decodeMeta accepted a truncated record")
	}
	if _, err := decodeMeta([]byte{flagTombstone}); err == nil {
		t.Fatal("decodeMeta accepted a tombstone")
	}
}
