package mvcc

import (
	"errors"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

func TestRevisions(t *testing.T) {
	e := newEnv(t)
	if got := e.s.Rev(); got != 1 {
		t.Fatalf("empty store Rev = %d, want 1", got)
	}
	if r := e.put("a", "1"); r != 2 {
		t.Fatalf("first put rev = %d, want 2", r)
	}
	if r := e.put("a", "2"); r != 3 {
		t.Fatalf("second put rev = %d, want 3", r)
	}
	// Deleting nothing and read-only txns do not create a revision.
	if r, resp := e.del("zz", ""); r != 3 || resp.Deleted != 0 || resp.Header.Revision != 3 {
		t.Fatalf("delete of nothing: rev %d deleted %d header %d", r, resp.Deleted, resp.Header.Revision)
	}
	resp, r, err := e.txn(&pb.TxnRequest{Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte("a")}}}}})
	if err != nil || r != 3 || resp.Header.Revision != 3 {
		t.Fatalf("read-only txn: rev %d header %v err %v", r, resp.GetHeader(), err)
	}

	// Several Begin/End pairs on one batch chain revisions; nothing is
	// visible before Publish.
	b := e.db.NewIndexedBatch()
	defer b.Close()
	var revs []int64
	for _, k := range []string{"x", "y"} {
		tx := e.s.Begin(b, nil)
		if _, err := tx.Put(&pb.PutRequest{Key: []byte(k), Value: []byte(k)}); err != nil {
			t.Fatal(err)
		}
		// the second txn sees the first's unpublished write
		rr, err := tx.Range(&pb.RangeRequest{Key: []byte("x")})
		if err != nil || len(rr.Kvs) != 1 {
			t.Fatalf("txn range through batch: %v %v", rr, err)
		}
		rev, evs := tx.End()
		if len(evs) != 1 {
			t.Fatalf("events %v", evs)
		}
		revs = append(revs, rev)
	}
	if revs[0] != 4 || revs[1] != 5 {
		t.Fatalf("chained revs %v, want [4 5]", revs)
	}
	tx := e.s.Begin(b, nil)
	if rev, evs := tx.End(); rev != 5 || evs != nil {
		t.Fatalf("empty txn End = %d %v, want 5 nil", rev, evs)
	}
	// Two changes of two records each (version, revision log), then one
	// current-revision record for the whole batch.
	if err := e.s.Seal(b); err != nil {
		t.Fatal(err)
	}
	if n := b.Count(); n != 5 {
		t.Fatalf("batch holds %d records, want 5 (one current-revision record per batch)", n)
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		t.Fatal(err)
	}
	if e.s.Rev() != 3 || len(e.get(&pb.RangeRequest{Key: []byte("x")}).Kvs) != 0 {
		t.Fatal("unpublished revision visible")
	}
	if _, err := e.s.Range(&pb.RangeRequest{Key: []byte("x"), Revision: 4}); !errors.Is(err, ErrFutureRev) {
		t.Fatalf("read at unpublished rev: %v", err)
	}
	e.s.Publish(5)
	if got := kvsString(e.get(&pb.RangeRequest{Key: []byte("x"), RangeEnd: []byte("z")}).Kvs); got != `"x"="x"@4/4/1 "y"="y"@5/5/1` {
		t.Fatalf("after publish: %s", got)
	}
	if got := e.s.Rev(); got != 5 {
		t.Fatalf("Rev = %d", got)
	}
	e.reopen()
	if got := e.s.Rev(); got != 5 {
		t.Fatalf("after reopen Rev = %d, want the sealed 5", got)
	}
}

// Publishing a revision that no batch recorded panics: a restart would go
// back to an older revision.
func TestPublishWithoutSealPanics(t *testing.T) {
	e := newEnv(t)
	b := e.db.NewIndexedBatch()
	defer b.Close()
	tx := e.s.Begin(b, nil)
	if _, err := tx.Put(&pb.PutRequest{Key: []byte("k"), Value: []byte("v")}); err != nil {
		t.Fatal(err)
	}
	rev, _ := tx.End()
	if err := b.Commit(pebble.NoSync); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("Publish of an unsealed revision did not panic")
		}
	}()
	e.s.Publish(rev)
}

func TestAbandon(t *testing.T) {
	e := newEnv(t)
	e.put("a", "1")
	b := e.db.NewIndexedBatch()
	tx := e.s.Begin(b, nil)
	if _, err := tx.Put(&pb.PutRequest{Key: []byte("a"), Value: []byte("lost")}); err != nil {
		t.Fatal(err)
	}
	tx.End()
	b.Close()
	e.s.Abandon()
	if r := e.put("b", "1"); r != 3 {
		t.Fatalf("after Abandon next rev = %d, want 3", r)
	}
}

func setupRange(e *env) {
	// rev 2..: a(2) b(3) c(4) a(5) d(6) b(7) del c(8) e(9)
	e.put("a", "va1")
	e.put("b", "vb1")
	e.put("c", "vc1")
	e.put("a", "va2")
	e.put("d", "vd1")
	e.put("b", "vb2")
	e.del("c", "")
	e.put("e", "ve1")
}

func TestRangeOptions(t *testing.T) {
	e := newEnv(t)
	setupRange(e)
	all := `"a"="va2"@2/5/2 "b"="vb2"@3/7/2 "d"="vd1"@6/6/1 "e"="ve1"@9/9/1`
	tests := []struct {
		name  string
		req   *pb.RangeRequest
		kvs   string
		count int64
		more  bool
	}{
		{"single key", &pb.RangeRequest{Key: []byte("a")}, `"a"="va2"@2/5/2`, 1, false},
		{"missing key", &pb.RangeRequest{Key: []byte("c")}, ``, 0, false},
		{"range", &pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte("d")}, `"a"="va2"@2/5/2 "b"="vb2"@3/7/2`, 2, false},
		{"from key", &pb.RangeRequest{Key: []byte("b"), RangeEnd: []byte{0}}, `"b"="vb2"@3/7/2 "d"="vd1"@6/6/1 "e"="ve1"@9/9/1`, 3, false},
		{"all", &pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}}, all, 4, false},
		{"end before key", &pb.RangeRequest{Key: []byte("d"), RangeEnd: []byte("a")}, ``, 0, false},
		{"limit", &pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte("z"), Limit: 2}, `"a"="va2"@2/5/2 "b"="vb2"@3/7/2`, 4, true},
		{"limit exact", &pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte("z"), Limit: 4}, all, 4, false},
		{"at rev 4", &pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte("z"), Revision: 4}, `"a"="va1"@2/2/1 "b"="vb1"@3/3/1 "c"="vc1"@4/4/1`, 3, false},
		{"at rev 7", &pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte("z"), Revision: 7}, `"a"="va2"@2/5/2 "b"="vb2"@3/7/2 "c"="vc1"@4/4/1 "d"="vd1"@6/6/1`, 4, false},
		{"at rev 8 tombstone", &pb.RangeRequest{Key: []byte("c"), Revision: 8}, ``, 0, false},
		{"at rev 1", &pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte("z"), Revision: 1}, ``, 0, false},
		{"keys only", &pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte("c"), KeysOnly: true}, `"a"=""@2/5/2 "b"=""@3/7/2`, 2, false},
		{"count only", &pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte("z"), CountOnly: true, Limit: 1}, ``, 4, false},
		{"sort key desc", &pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte("z"), SortOrder: pb.RangeRequest_DESCEND}, `"e"="ve1"@9/9/1 "d"="vd1"@6/6/1 "b"="vb2"@3/7/2 "a"="va2"@2/5/2`, 4, false},
		{"sort key desc limit", &pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte("z"), SortOrder: pb.RangeRequest_DESCEND, Limit: 1}, `"e"="ve1"@9/9/1`, 4, true},
		{"sort key asc limit", &pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte("z"), SortOrder: pb.RangeRequest_ASCEND, Limit: 3}, `"a"="va2"@2/5/2 "b"="vb2"@3/7/2 "d"="vd1"@6/6/1`, 4, true},
		{"sort mod asc", &pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte("z"), SortOrder: pb.RangeRequest_ASCEND, SortTarget: pb.RangeRequest_MOD}, `"a"="va2"@2/5/2 "d"="vd1"@6/6/1 "b"="vb2"@3/7/2 "e"="ve1"@9/9/1`, 4, false},
		{"sort mod desc limit", &pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte("z"), SortOrder: pb.RangeRequest_DESCEND, SortTarget: pb.RangeRequest_MOD, Limit: 2}, `"e"="ve1"@9/9/1 "b"="vb2"@3/7/2`, 4, true},
		{"sort create desc", &pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte("z"), SortOrder: pb.RangeRequest_DESCEND, SortTarget: pb.RangeRequest_CREATE}, `"e"="ve1"@9/9/1 "d"="vd1"@6/6/1 "b"="vb2"@3/7/2 "a"="va2"@2/5/2`, 4, false},
		{"sort version desc (stable by key)", &pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte("z"), SortOrder: pb.RangeRequest_DESCEND, SortTarget: pb.RangeRequest_VERSION}, `"a"="va2"@2/5/2 "b"="vb2"@3/7/2 "d"="vd1"@6/6/1 "e"="ve1"@9/9/1`, 4, false},
		{"sort value desc", &pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte("z"), SortOrder: pb.RangeRequest_DESCEND, SortTarget: pb.RangeRequest_VALUE}, `"e"="ve1"@9/9/1 "d"="vd1"@6/6/1 "b"="vb2"@3/7/2 "a"="va2"@2/5/2`, 4, false},
		{"sort none target mod = ascend", &pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte("z"), SortTarget: pb.RangeRequest_MOD}, `"a"="va2"@2/5/2 "d"="vd1"@6/6/1 "b"="vb2"@3/7/2 "e"="ve1"@9/9/1`, 4, false},
		{"min mod", &pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte("z"), MinModRevision: 6}, `"b"="vb2"@3/7/2 "d"="vd1"@6/6/1 "e"="ve1"@9/9/1`, 4, false},
		{"max mod", &pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte("z"), MaxModRevision: 6}, `"a"="va2"@2/5/2 "d"="vd1"@6/6/1`, 4, false},
		{"min create", &pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte("z"), MinCreateRevision: 3}, `"b"="vb2"@3/7/2 "d"="vd1"@6/6/1 "e"="ve1"@9/9/1`, 4, false},
		{"max create", &pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte("z"), MaxCreateRevision: 3}, `"a"="va2"@2/5/2 "b"="vb2"@3/7/2`, 4, false},
		{"filter + limit: more counts filtered", &pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte("z"), MinModRevision: 6, Limit: 2}, `"b"="vb2"@3/7/2 "d"="vd1"@6/6/1`, 4, true},
		{"filter + limit: no more", &pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte("z"), MinModRevision: 7, Limit: 2}, `"b"="vb2"@3/7/2 "e"="ve1"@9/9/1`, 4, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := e.get(tc.req)
			if got := kvsString(r.Kvs); got != tc.kvs {
				t.Errorf("kvs\n got %s\nwant %s", got, tc.kvs)
			}
			if r.Count != tc.count || r.More != tc.more {
				t.Errorf("count %d more %v, want %d %v", r.Count, r.More, tc.count, tc.more)
			}
			if r.Header.GetRevision() != e.s.Rev() {
				t.Errorf("Store.Range header = %v, want the current revision %d (etcd's RangeResult.Rev)", r.Header, e.s.Rev())
			}
			// The same request through a write txn answers the same.
			_, _, err := e.apply(func(tx *Txn) error {
				r2, err := tx.Range(tc.req)
				if err != nil {
					return err
				}
				if got := kvsString(r2.Kvs); got != tc.kvs || r2.Count != tc.count || r2.More != tc.more {
					t.Errorf("txn range: %s count %d more %v", got, r2.Count, r2.More)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
	if _, err := e.s.Range(&pb.RangeRequest{Key: []byte("a"), Revision: 10}); !errors.Is(err, ErrFutureRev) {
		t.Errorf("future rev: %v", err)
	}
	if _, err := e.s.Range(&pb.RangeRequest{Key: []byte("d"), RangeEnd: []byte("a"), Revision: 10}); !errors.Is(err, ErrFutureRev) {
		t.Errorf("future rev on empty interval: %v", err)
	}
}

func TestKeysWithZeroBytes(t *testing.T) {
	e := newEnv(t)
	keys := []string{"a", "a\x00", "a\x00\x00", "a\x00b", "a\x01", "ab", "\x00", "\x00\xff", "b"}
	for i, k := range keys {
		e.put(k, string(rune('0'+i)))
	}
	tests := []struct {
		key, end string
		want     string
	}{
		{"a", "", `"a"`},
		{"a\x00", "", `"a\x00"`},
		{"a", "b", `"a" "a\x00" "a\x00\x00" "a\x00b" "a\x01" "ab"`},
		{"a\x00", "a\x01", `"a\x00" "a\x00\x00" "a\x00b"`}, // prefix "a\x00"
		{"a\x00\x00", "a\x00b", `"a\x00\x00"`},
		{"\x00", "\x00", `"\x00" "\x00\xff" "a" "a\x00" "a\x00\x00" "a\x00b" "a\x01" "ab" "b"`},
		{"\x00", "\x01", `"\x00" "\x00\xff"`},
		{"a\x00b", "\x00", `"a\x00b" "a\x01" "ab" "b"`},
	}
	for _, tc := range tests {
		r := e.get(&pb.RangeRequest{Key: []byte(tc.key), RangeEnd: bs(tc.end)})
		if got := keysString(r.Kvs); got != tc.want {
			t.Errorf("range [%q,%q): got %s want %s", tc.key, tc.end, got, tc.want)
		}
		if r.Count != int64(len(r.Kvs)) {
			t.Errorf("count %d", r.Count)
		}
	}
	// Deleting "a\x00" must not touch "a" or "a\x00\x00".
	e.del("a\x00", "")
	if got := keysString(e.get(&pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte("a\x01")}).Kvs); got != `"a" "a\x00\x00" "a\x00b"` {
		t.Errorf("after delete: %s", got)
	}
}

func TestPutOptions(t *testing.T) {
	e := newEnv(t)
	mustPut := func(req *pb.PutRequest) *pb.PutResponse {
		t.Helper()
		var resp *pb.PutResponse
		_, _, err := e.apply(func(tx *Txn) error {
			var err error
			resp, err = tx.Put(req)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	putErr := func(req *pb.PutRequest) error {
		rev := e.s.Rev()
		r, evs, err := e.apply(func(tx *Txn) error { _, err := tx.Put(req); return err })
		if r != rev || evs != nil {
			t.Fatalf("failed put created revision %d", r)
		}
		return err
	}
	r := mustPut(&pb.PutRequest{Key: []byte("k"), Value: []byte("v1"), Lease: 100, PrevKv: true})
	if r.PrevKv != nil || r.Header.Revision != 2 {
		t.Fatalf("first put: %v", r)
	}
	if !e.leases.attached[100]["k"] {
		t.Fatal("lease 100 not attached")
	}
	r = mustPut(&pb.PutRequest{Key: []byte("k"), Value: []byte("v2"), PrevKv: true, IgnoreLease: true})
	if got := kvsString(e.get(&pb.RangeRequest{Key: []byte("k")}).Kvs); got != `"k"="v2"@2/3/2[100]` {
		t.Fatalf("ignore_lease: %s", got)
	}
	if r.PrevKv == nil || string(r.PrevKv.Value) != "v1" {
		t.Fatalf("prev_kv: %v", r.PrevKv)
	}
	mustPut(&pb.PutRequest{Key: []byte("k"), IgnoreValue: true, Lease: 200})
	if got := kvsString(e.get(&pb.RangeRequest{Key: []byte("k")}).Kvs); got != `"k"="v2"@2/4/3[200]` {
		t.Fatalf("ignore_value: %s", got)
	}
	if e.leases.attached[100]["k"] || !e.leases.attached[200]["k"] {
		t.Fatalf("lease move: %v", e.leases.attached)
	}
	mustPut(&pb.PutRequest{Key: []byte("k"), Value: []byte("v3")}) // drops the lease
	if e.leases.attached[200]["k"] {
		t.Fatal("lease not detached on put without lease")
	}
	if err := putErr(&pb.PutRequest{Key: []byte("missing"), IgnoreValue: true}); !errors.Is(err, ErrKeyNotFound) {
		t.Fatalf("ignore_value on missing: %v", err)
	}
	if err := putErr(&pb.PutRequest{Key: []byte("missing"), IgnoreLease: true}); !errors.Is(err, ErrKeyNotFound) {
		t.Fatalf("ignore_lease on missing: %v", err)
	}
	if err := putErr(&pb.PutRequest{Key: []byte("k"), Lease: 999}); !errors.Is(err, ErrLeaseNotFound) {
		t.Fatalf("unknown lease: %v", err)
	}
	// delete then re-create: version and create revision restart
	mustPut(&pb.PutRequest{Key: []byte("k"), Value: []byte("v4"), Lease: 100})
	_, resp := e.del("k", "")
	if resp.Deleted != 1 || kvsString(resp.PrevKvs) != `"k"="v4"@2/6/5[100]` {
		t.Fatalf("delete: %v", resp)
	}
	if e.leases.attached[100]["k"] {
		t.Fatal("lease not detached on delete")
	}
	mustPut(&pb.PutRequest{Key: []byte("k"), Value: []byte("v5")})
	if got := kvsString(e.get(&pb.RangeRequest{Key: []byte("k")}).Kvs); got != `"k"="v5"@8/8/1` {
		t.Fatalf("recreate: %s", got)
	}
}

func TestDeleteRangeAndEvents(t *testing.T) {
	e := newEnv(t)
	e.put("a", "1")
	e.put("b", "2")
	e.put("c", "3")
	rev, evs, err := e.apply(func(tx *Txn) error {
		resp, err := tx.DeleteRange(&pb.DeleteRangeRequest{Key: []byte("a"), RangeEnd: []byte("c"), PrevKv: true})
		if err == nil && (resp.Deleted != 2 || len(resp.PrevKvs) != 2 || resp.Header.Revision != 5) {
			t.Errorf("resp %v", resp)
		}
		if err != nil {
			return err
		}
		resp, err = tx.DeleteRange(&pb.DeleteRangeRequest{Key: []byte("a"), RangeEnd: []byte("c")})
		if err == nil && (resp.Deleted != 0 || resp.PrevKvs != nil) {
			t.Errorf("second delete in txn saw deleted keys: %v", resp)
		}
		return err
	})
	if err != nil || rev != 5 {
		t.Fatal(rev, err)
	}
	want := `DELETE "a"=""@0/5/0 prev "a"="1"@2/2/1; DELETE "b"=""@0/5/0 prev "b"="2"@3/3/1`
	if got := evString(evs); got != want {
		t.Fatalf("events\n got %s\nwant %s", got, want)
	}
	if got := keysString(e.get(&pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}}).Kvs); got != `"c"` {
		t.Fatalf("left: %s", got)
	}
	// DeleteKeys: existing ones only, sorted.
	e.put("x", "1")
	_, evs, _ = e.apply(func(tx *Txn) error {
		tx.DeleteKeys([][]byte{[]byte("x"), []byte("nope"), []byte("c")})
		return nil
	})
	if got := evString(evs); got != `DELETE "c"=""@0/7/0 prev "c"="3"@4/4/1; DELETE "x"=""@0/7/0 prev "x"="1"@6/6/1` {
		t.Fatalf("DeleteKeys events: %s", got)
	}
}
