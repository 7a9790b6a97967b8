package mvcc

import (
	"bytes"
	"cmp"
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// FuzzEscape checks that version record keys round-trip and preserve the
// order of user keys, with any revisions.
func FuzzEscape(f *testing.F) {
	f.Add([]byte("a"), []byte("a\x00"), int64(2), int64(3))
	f.Add([]byte("\x00"), []byte("\x00\xff"), int64(1), int64(1))
	f.Add([]byte("a\x00\x01"), []byte("a\x01"), int64(1<<40), int64(5))
	f.Fuzz(func(t *testing.T, a, b []byte, ra, rb int64) {
		if ra < 0 {
			ra = -ra
		}
		if rb < 0 {
			rb = -rb
		}
		ka := appendVersionKey(nil, a, ra)
		kb := appendVersionKey(nil, b, rb)
		for _, c := range []struct {
			k   []byte
			key []byte
			rev int64
		}{{ka, a, ra}, {kb, b, rb}} {
			got, rev, ok := decodeVersionKey(c.k)
			if !ok || !bytes.Equal(got, c.key) || rev != c.rev {
				t.Fatalf("round trip %q/%d: got %q/%d ok=%v", c.key, c.rev, got, rev, ok)
			}
		}
		want := bytes.Compare(a, b)
		if want == 0 {
			// same key: newer revision sorts first
			want = -cmp.Compare(ra, rb)
		}
		if got := bytes.Compare(ka, kb); got != want {
			t.Fatalf("order of (%q,%d) vs (%q,%d): got %d want %d", a, ra, b, rb, got, want)
		}
		// kvBounds/inRange agree on [a, b).
		lo, hi, ok := kvBounds(a, b)
		if len(b) > 0 && ok {
			if bytes.Compare(ka, lo) < 0 || bytes.Compare(ka, hi) >= 0 {
				t.Fatalf("key %q outside its own bounds [%q,%q)", a, lo, hi)
			}
			if bytes.Compare(kb, hi) < 0 && !(len(b) == 1 && b[0] == 0) {
				t.Fatalf("end key %q inside bounds", b)
			}
		}
	})
}

func benchEnv(b *testing.B) *env {
	e := newEnv(b)
	return e
}

func BenchmarkPut(b *testing.B) {
	e := benchEnv(b)
	keys := make([][]byte, 1000)
	for i := range keys {
		keys[i] = []byte(fmt.Sprintf("bench/key/%06d", i))
	}
	val := bytes.Repeat([]byte("v"), 128)
	b.ReportAllocs()
	b.ResetTimer()
	const perBatch = 100
	for i := 0; i < b.N; {
		batch := e.db.NewIndexedBatch()
		var rev int64
		for j := 0; j < perBatch && i < b.N; j, i = j+1, i+1 {
			tx := e.s.Begin(batch, nil)
			if _, err := tx.Put(&pb.PutRequest{Key: keys[i%len(keys)], Value: val}); err != nil {
				b.Fatal(err)
			}
			rev, _ = tx.End()
		}
		if err := e.s.Seal(batch); err != nil {
			b.Fatal(err)
		}
		if err := batch.Commit(pebble.NoSync); err != nil {
			b.Fatal(err)
		}
		batch.Close()
		e.s.Publish(rev)
	}
}

func BenchmarkRange(b *testing.B) {
	e := benchEnv(b)
	val := bytes.Repeat([]byte("v"), 128)
	batch := e.db.NewIndexedBatch()
	var rev int64
	for i := 0; i < 1000; i++ {
		for v := 0; v < 3; v++ { // three versions each
			tx := e.s.Begin(batch, nil)
			if _, err := tx.Put(&pb.PutRequest{Key: []byte(fmt.Sprintf("bench/key/%06d", i)), Value: val}); err != nil {
				b.Fatal(err)
			}
			rev, _ = tx.End()
		}
	}
	if err := e.s.Seal(batch); err != nil {
		b.Fatal(err)
	}
	if err := batch.Commit(pebble.NoSync); err != nil {
		b.Fatal(err)
	}
	batch.Close()
	e.s.snapDemand.Store(1)
	e.s.Publish(rev) // readers get an index snapshot
	b.Run("single", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			r, err := e.s.Range(&pb.RangeRequest{Key: []byte(fmt.Sprintf("bench/key/%06d", i%1000))})
			if err != nil || len(r.Kvs) != 1 {
				b.Fatal(err)
			}
		}
	})
	b.Run("prefix-limit10", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			r, err := e.s.Range(&pb.RangeRequest{Key: []byte("bench/"), RangeEnd: []byte("bench0"), Limit: 10})
			if err != nil || len(r.Kvs) != 10 || r.Count != 1000 {
				b.Fatal(err)
			}
		}
	})
	b.Run("prefix-all", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			r, err := e.s.Range(&pb.RangeRequest{Key: []byte("bench/"), RangeEnd: []byte("bench0")})
			if err != nil || len(r.Kvs) != 1000 {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkLockQueueRange measures the read a lock recipe repeats on every
// acquire: the keys under a lock prefix, sorted by create revision, limit 1,
// when each of the 50 queue keys has been put and deleted many times (the
// versions stay until compaction) among unrelated keys.
func BenchmarkLockQueueRange(b *testing.B) {
	e := benchEnv(b)
	var rev int64
	write := func(f func(tx *Txn)) {
		batch := e.db.NewIndexedBatch()
		tx := e.s.Begin(batch, nil)
		f(tx)
		rev, _ = tx.End()
		if err := e.s.Seal(batch); err != nil {
			b.Fatal(err)
		}
		if err := batch.Commit(pebble.NoSync); err != nil {
			b.Fatal(err)
		}
		batch.Close()
		e.s.Publish(rev)
	}
	for i := 0; i < 20000; i++ {
		write(func(tx *Txn) {
			if _, err := tx.Put(&pb.PutRequest{Key: []byte(fmt.Sprintf("other/%06d", i)), Value: []byte("v")}); err != nil {
				b.Fatal(err)
			}
		})
	}
	for cycle := 0; cycle < 100; cycle++ {
		for w := 0; w < 50; w++ {
			k := []byte(fmt.Sprintf("lock/%016x", 0x1000+w))
			write(func(tx *Txn) {
				if _, err := tx.Put(&pb.PutRequest{Key: k}); err != nil {
					b.Fatal(err)
				}
			})
			if cycle < 99 {
				write(func(tx *Txn) {
					if _, err := tx.DeleteRange(&pb.DeleteRangeRequest{Key: k}); err != nil {
						b.Fatal(err)
					}
				})
			}
		}
	}
	req := &pb.RangeRequest{Key: []byte("lock/"), RangeEnd: []byte("lock0"), Limit: 1,
		SortOrder: pb.RangeRequest_ASCEND, SortTarget: pb.RangeRequest_CREATE}
	for _, c := range []struct {
		name string
		rng  func(*pb.RangeRequest) (*pb.RangeResponse, error)
	}{{"scan", e.s.rangeScan}, {"index", e.s.Range}} {
		b.Run(c.name, func(b *testing.B) {
			e.s.snapDemand.Store(1)
			e.s.Publish(rev) // readers get an index snapshot
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				r, err := c.rng(req)
				if err != nil || len(r.Kvs) != 1 || r.Count != 50 {
					b.Fatal(err, r)
				}
			}
		})
	}
}
