package mvcc

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/tenure-io/tenure/server/storage"
)

func putOp(k, v string) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(k), Value: []byte(v)}}}
}
func getOp(k, end string) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte(k), RangeEnd: bs(end)}}}
}

func TestTxnCompare(t *testing.T) {
	e := newEnv(t)
	e.put("a", "x")  // 2
	e.put("b", "y")  // 3
	e.put("a", "x2") // 4: a create 2 mod 4 version 2
	if _, _, err := e.apply(func(tx *Txn) error {
		_, err := tx.Put(&pb.PutRequest{Key: []byte("l"), Value: []byte("v"), Lease: 100})
		return err
	}); err != nil { // 5
		t.Fatal(err)
	}
	cmp := func(key, end string, target pb.Compare_CompareTarget, result pb.Compare_CompareResult, u any) *pb.Compare {
		c := &pb.Compare{Key: []byte(key), RangeEnd: bs(end), Target: target, Result: result}
		switch target {
		case pb.Compare_VALUE:
			c.TargetUnion = &pb.Compare_Value{Value: []byte(u.(string))}
		case pb.Compare_VERSION:
			c.TargetUnion = &pb.Compare_Version{Version: int64(u.(int))}
		case pb.Compare_CREATE:
			c.TargetUnion = &pb.Compare_CreateRevision{CreateRevision: int64(u.(int))}
		case pb.Compare_MOD:
			c.TargetUnion = &pb.Compare_ModRevision{ModRevision: int64(u.(int))}
		case pb.Compare_LEASE:
			c.TargetUnion = &pb.Compare_Lease{Lease: int64(u.(int))}
		}
		return c
	}
	const (
		EQ = pb.Compare_EQUAL
		NE = pb.Compare_NOT_EQUAL
		GT = pb.Compare_GREATER
		LT = pb.Compare_LESS
	)
	tests := []struct {
		name string
		c    *pb.Compare
		want bool
	}{
		{"value eq", cmp("a", "", pb.Compare_VALUE, EQ, "x2"), true},
		{"value ne", cmp("a", "", pb.Compare_VALUE, NE, "x2"), false},
		{"value gt", cmp("a", "", pb.Compare_VALUE, GT, "x"), true},
		{"value lt", cmp("a", "", pb.Compare_VALUE, LT, "x"), false},
		{"value on missing key fails", cmp("zz", "", pb.Compare_VALUE, NE, "q"), false},
		{"version eq", cmp("a", "", pb.Compare_VERSION, EQ, 2), true},
		{"version missing = 0", cmp("zz", "", pb.Compare_VERSION, EQ, 0), true},
		{"create eq", cmp("a", "", pb.Compare_CREATE, EQ, 2), true},
		{"create missing = 0 (lock-free check)", cmp("zz", "", pb.Compare_CREATE, EQ, 0), true},
		{"create lt", cmp("b", "", pb.Compare_CREATE, LT, 3), false},
		{"mod eq", cmp("a", "", pb.Compare_MOD, EQ, 4), true},
		{"mod gt", cmp("a", "", pb.Compare_MOD, GT, 3), true},
		{"mod lt", cmp("a", "", pb.Compare_MOD, LT, 4), false},
		{"lease eq", cmp("l", "", pb.Compare_LEASE, EQ, 100), true},
		{"lease none", cmp("a", "", pb.Compare_LEASE, EQ, 0), true},
		{"range: all keys must match", cmp("a", "c", pb.Compare_MOD, GT, 2), true},
		{"range: one fails", cmp("a", "c", pb.Compare_MOD, GT, 3), false},
		{"range: version of all", cmp("a", "c", pb.Compare_VERSION, EQ, 2), false},
		{"range from key", cmp("a", "\x00", pb.Compare_CREATE, GT, 1), true},
		{"empty range, create eq 0", cmp("m", "z", pb.Compare_CREATE, EQ, 0), true},
		{"empty range, value", cmp("m", "z", pb.Compare_VALUE, EQ, ""), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, rev, err := e.txn(&pb.TxnRequest{
				Compare: []*pb.Compare{tc.c},
				Success: []*pb.RequestOp{getOp("a", "")},
				Failure: []*pb.RequestOp{getOp("b", ""), getOp("a", "")},
			})
			if err != nil {
				t.Fatal(err)
			}
			if resp.Succeeded != tc.want {
				t.Fatalf("succeeded = %v, want %v", resp.Succeeded, tc.want)
			}
			wantN := 1
			if !tc.want {
				wantN = 2
			}
			if len(resp.Responses) != wantN || rev != 5 || resp.Header.Revision != 5 {
				t.Fatalf("responses %d rev %d header %v", len(resp.Responses), rev, resp.Header)
			}
		})
	}
}

func TestTxnOps(t *testing.T) {
	e := newEnv(t)
	e.put("a", "1") // 2
	// Writes and reads in one txn: one revision, sub revisions in order,
	// reads see earlier writes; nested txn compares see the pre-txn state.
	req := &pb.TxnRequest{
		Compare: []*pb.Compare{{Key: []byte("a"), Target: pb.Compare_VALUE, Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_Value{Value: []byte("1")}}},
		Success: []*pb.RequestOp{
			putOp("a", "2"),
			putOp("b", "1"),
			getOp("a", "c"),
			{Request: &pb.RequestOp_RequestTxn{RequestTxn: &pb.TxnRequest{
				// evaluated before the outer ops ran: a is still "1"
				Compare: []*pb.Compare{{Key: []byte("a"), Target: pb.Compare_VALUE, Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_Value{Value: []byte("1")}}},
				Success: []*pb.RequestOp{putOp("n", "yes"), {Request: &pb.RequestOp_RequestTxn{RequestTxn: &pb.TxnRequest{
					Compare: []*pb.Compare{{Key: []byte("b"), Target: pb.Compare_VERSION, Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_Version{Version: 1}}},
					Failure: []*pb.RequestOp{putOp("nn", "b did not exist before the txn")},
				}}}},
				Failure: []*pb.RequestOp{putOp("n", "no")},
			}}},
			{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte("b"), PrevKv: true}}},
		},
	}
	var evs []*mvccpb.Event
	var resp *pb.TxnResponse
	rev, evs, err := e.apply(func(tx *Txn) error {
		var err error
		resp, err = tx.Txn(req)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if rev != 3 || !resp.Succeeded || resp.Header.Revision != 3 {
		t.Fatalf("rev %d resp %v", rev, resp)
	}
	rr := resp.Responses[2].GetResponseRange()
	if got := kvsString(rr.Kvs); got != `"a"="2"@2/3/2 "b"="1"@3/3/1` || rr.Header.Revision != 3 {
		t.Fatalf("range in txn: %s header %v", got, rr.Header)
	}
	if resp.Responses[0].GetResponsePut().Header.Revision != 3 {
		t.Fatal("nested put header")
	}
	nested := resp.Responses[3].GetResponseTxn()
	if !nested.Succeeded || len(nested.Responses) != 2 || nested.Header == nil || nested.Header.Revision != 0 {
		t.Fatalf("nested: %v", nested)
	}
	if nn := nested.Responses[1].GetResponseTxn(); nn.Succeeded || len(nn.Responses) != 1 {
		t.Fatalf("nested 2: %v", nn)
	}
	if dr := resp.Responses[4].GetResponseDeleteRange(); dr.Deleted != 1 || kvsString(dr.PrevKvs) != `"b"="1"@3/3/1` {
		t.Fatalf("delete in txn: %v", dr)
	}
	want := `PUT "a"="2"@2/3/2 prev "a"="1"@2/2/1; PUT "b"="1"@3/3/1; PUT "n"="yes"@3/3/1; PUT "nn"="b did not exist before the txn"@3/3/1; DELETE "b"=""@0/3/0 prev "b"="1"@3/3/1`
	if got := evString(evs); got != want {
		t.Fatalf("events\n got %s\nwant %s", got, want)
	}
	if got := keysString(e.get(&pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}}).Kvs); got != `"a" "n" "nn"` {
		t.Fatalf("state: %s", got)
	}

	// A failing check aborts the whole txn before anything is written.
	for _, tc := range []struct {
		op   *pb.RequestOp
		want error
	}{
		{&pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("zz"), IgnoreValue: true}}}, ErrKeyNotFound},
		{&pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("zz"), Lease: 7}}}, ErrLeaseNotFound},
		{&pb.RequestOp{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte("a"), Revision: 99}}}, ErrFutureRev},
		{&pb.RequestOp{Request: &pb.RequestOp_RequestTxn{RequestTxn: &pb.TxnRequest{Success: []*pb.RequestOp{
			{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("zz"), IgnoreLease: true}}}}}}}, ErrKeyNotFound},
	} {
		before := countRecords(t, e.db, storage.PrefixKV)
		_, rev, err := e.txn(&pb.TxnRequest{Success: []*pb.RequestOp{putOp("first", "x"), tc.op}})
		if !errors.Is(err, tc.want) {
			t.Fatalf("got %v want %v", err, tc.want)
		}
		if rev != 3 || countRecords(t, e.db, storage.PrefixKV) != before {
			t.Fatalf("failed txn wrote something (rev %d)", rev)
		}
	}
	// Ops on the branch not taken are not checked.
	resp, _, err = e.txn(&pb.TxnRequest{
		Compare: []*pb.Compare{{Key: []byte("a"), Target: pb.Compare_VERSION, Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_Version{Version: 99}}},
		Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("zz"), IgnoreValue: true}}}},
	})
	if err != nil || resp.Succeeded || resp.Header.Revision != 3 {
		t.Fatalf("untaken branch: %v %v", resp, err)
	}
}

func TestCompaction(t *testing.T) {
	e := newEnv(t)
	e.put("a", "1") // 2
	e.put("a", "2") // 3
	e.put("b", "1") // 4
	e.del("b", "")  // 5
	e.put("c", "1") // 6
	e.put("a", "3") // 7
	e.put("c", "2") // 8

	if err := e.compact(9, false); !errors.Is(err, ErrFutureRev) {
		t.Fatalf("compact future: %v", err)
	}
	if err := e.compact(6, true); err != nil {
		t.Fatal(err)
	}
	if e.s.CompactRev() != 6 || e.s.CompactDone() != 6 || e.s.Rev() != 8 {
		t.Fatalf("compact %d done %d rev %d", e.s.CompactRev(), e.s.CompactDone(), e.s.Rev())
	}
	if err := e.compact(6, false); !errors.Is(err, ErrCompacted) {
		t.Fatalf("compact again: %v", err)
	}
	for _, rev := range []int64{1, 2, 5} {
		if _, err := e.s.Range(&pb.RangeRequest{Key: []byte("a"), Revision: rev}); !errors.Is(err, ErrCompacted) {
			t.Errorf("read at %d: %v", rev, err)
		}
	}
	// At the compaction revision and later, everything is as before.
	all := &pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}, Revision: 6}
	if got := kvsString(e.get(all).Kvs); got != `"a"="2"@2/3/2 "c"="1"@6/6/1` {
		t.Fatalf("at 6: %s", got)
	}
	all.Revision = 0
	if got := kvsString(e.get(all).Kvs); got != `"a"="3"@2/7/3 "c"="2"@6/8/2` {
		t.Fatalf("latest: %s", got)
	}
	// Physically: a@3, a@7, c@6, c@8 remain; a@2 and b's versions are gone.
	if n := countRecords(t, e.db, storage.PrefixKV); n != 4 {
		t.Fatalf("%d version records left, want 4", n)
	}
	if n := countRecords(t, e.db, storage.PrefixRevLog); n != 3 {
		t.Fatalf("%d revlog records left, want 3 (revs 6,7,8)", n)
	}
	if _, _, err := e.s.History(5, 0, []byte("a"), nil, 0); !errors.Is(err, ErrCompacted) {
		t.Fatalf("history below compaction: %v", err)
	}
	evs, next, err := e.s.History(6, 0, []byte{0}, []byte{0}, 0)
	if err != nil || next != 9 {
		t.Fatal(err, next)
	}
	if got := evString(evs); got != `PUT "c"="1"@6/6/1; PUT "a"="3"@2/7/3 prev "a"="2"@2/3/2; PUT "c"="2"@6/8/2 prev "c"="1"@6/6/1` {
		t.Fatalf("history after compaction: %s", got)
	}
	// Txn reads see the compaction too.
	_, _, err = e.apply(func(tx *Txn) error {
		_, err := tx.Range(&pb.RangeRequest{Key: []byte("a"), Revision: 5})
		return err
	})
	if !errors.Is(err, ErrCompacted) {
		t.Fatalf("txn read below compaction: %v", err)
	}
	// Revision survives reopen.
	e.reopen()
	if e.s.Rev() != 8 || e.s.CompactRev() != 6 {
		t.Fatalf("after reopen rev %d compact %d", e.s.Rev(), e.s.CompactRev())
	}
	if r := e.put("d", "1"); r != 9 {
		t.Fatalf("next rev %d", r)
	}
}

func TestCompactionResumesAfterCrash(t *testing.T) {
	old := compactBatchSize
	compactBatchSize = 3
	defer func() { compactBatchSize = old }()
	e := newEnv(t)
	for i := 0; i < 20; i++ {
		e.put("k", string(rune('a'+i)))
		e.put(string(rune('a'+i)), "x")
	}
	e.del("a", "c")
	// Stage the compaction, commit, but "crash" before the physical work: the
	// store is closed before Publish.
	b := e.db.NewIndexedBatch()
	tx := e.s.Begin(b, nil)
	if err := tx.Compact(30); err != nil {
		t.Fatal(err)
	}
	tx.End()
	if err := e.s.Seal(b); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(nil); err != nil {
		t.Fatal(err)
	}
	b.Close()
	before := e.get(&pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}})
	e.reopen()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.s.WaitCompaction(ctx, 30); err != nil {
		t.Fatal(err)
	}
	after := e.get(&pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}})
	if kvsString(before.Kvs) != kvsString(after.Kvs) {
		t.Fatalf("state changed by compaction:\n%s\n%s", kvsString(before.Kvs), kvsString(after.Kvs))
	}
	if e.s.Rev() != 42 {
		t.Fatalf("rev %d", e.s.Rev())
	}
	if _, err := e.s.Range(&pb.RangeRequest{Key: []byte("k"), Revision: 29}); !errors.Is(err, ErrCompacted) {
		t.Fatal(err)
	}
}

func TestHistory(t *testing.T) {
	e := newEnv(t)
	e.put("a", "1")               // 2
	e.put("b", "1")               // 3
	e.apply(func(tx *Txn) error { // 4: two changes
		tx.Put(&pb.PutRequest{Key: []byte("a"), Value: []byte("2")})
		tx.Put(&pb.PutRequest{Key: []byte("c"), Value: []byte("1")})
		return nil
	})
	e.del("a", "")  // 5
	e.put("a", "3") // 6
	tests := []struct {
		from, to int64
		key, end string
		limit    int
		want     string
		next     int64
	}{
		{2, 0, "a", "", 0, `PUT "a"="1"@2/2/1; PUT "a"="2"@2/4/2 prev "a"="1"@2/2/1; DELETE "a"=""@0/5/0 prev "a"="2"@2/4/2; PUT "a"="3"@6/6/1`, 7},
		{3, 4, "\x00", "\x00", 0, `PUT "b"="1"@3/3/1; PUT "a"="2"@2/4/2 prev "a"="1"@2/2/1; PUT "c"="1"@4/4/1`, 5},
		{2, 0, "b", "d", 0, `PUT "b"="1"@3/3/1; PUT "c"="1"@4/4/1`, 7},
		{2, 0, "\x00", "\x00", 2, `PUT "a"="1"@2/2/1; PUT "b"="1"@3/3/1`, 4},
		{4, 0, "\x00", "\x00", 1, `PUT "a"="2"@2/4/2 prev "a"="1"@2/2/1; PUT "c"="1"@4/4/1`, 5}, // not split
		{7, 0, "a", "", 0, ``, 7},
		{2, 100, "c", "", 0, `PUT "c"="1"@4/4/1`, 7},
	}
	for _, tc := range tests {
		evs, next, err := e.s.History(tc.from, tc.to, []byte(tc.key), bs(tc.end), tc.limit)
		if err != nil {
			t.Fatal(err)
		}
		if got := evString(evs); got != tc.want || next != tc.next {
			t.Errorf("History(%d,%d,%q,%q,%d)\n got %s next %d\nwant %s next %d", tc.from, tc.to, tc.key, tc.end, tc.limit, got, next, tc.want, tc.next)
		}
	}
}

func TestReopenAndReload(t *testing.T) {
	e := newEnv(t)
	setupRange(e)
	all := &pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}}
	want := kvsString(e.get(all).Kvs)
	at5 := kvsString(e.get(&pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}, Revision: 5}).Kvs)
	e.reopen()
	if e.s.Rev() != 9 || kvsString(e.get(all).Kvs) != want ||
		kvsString(e.get(&pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}, Revision: 5}).Kvs) != at5 {
		t.Fatal("state differs after reopen")
	}
	// Reload after the key range changed underneath (as a snapshot install).
	e.s.PauseCompaction()
	if err := e.db.Set(storage.KeyCurrentRev, storage.U64(42), nil); err != nil {
		t.Fatal(err)
	}
	if err := e.db.Set(storage.KeyCompactRev, storage.U64(3), nil); err != nil {
		t.Fatal(err)
	}
	if err := e.s.Reload(); err != nil {
		t.Fatal(err)
	}
	if e.s.Rev() != 42 || e.s.CompactRev() != 3 {
		t.Fatalf("after reload rev %d compact %d", e.s.Rev(), e.s.CompactRev())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.s.WaitCompaction(ctx, 3); err != nil { // resumed
		t.Fatal(err)
	}
	if r := e.put("z", "1"); r != 43 {
		t.Fatalf("next rev after reload %d", r)
	}
}

// DeleteAt deletes a key only if its live version was created at the given
// revision: a wrong revision or a missing key leaves everything as it was
// (no revision, no event).
func TestDeleteAt(t *testing.T) {
	e := newEnv(t)
	created := e.put("lock/1", "a")
	e.put("lock/1", "b") // a rewrite keeps the create revision
	for _, c := range []struct {
		key string
		rev int64
	}{{"lock/1", created - 1}, {"lock/1", created + 1}, {"lock/2", created}} {
		before := e.s.Rev()
		rev, evs, err := e.apply(func(tx *Txn) error {
			ok, err := tx.DeleteAt([]byte(c.key), c.rev)
			if ok {
				t.Errorf("DeleteAt(%s, %d) deleted; the key was created at %d", c.key, c.rev, created)
			}
			return err
		})
		if err != nil || rev != before || len(evs) != 0 {
			t.Fatalf("refused DeleteAt(%s, %d): rev %d (was %d), %d events, %v", c.key, c.rev, rev, before, len(evs), err)
		}
	}
	rev, evs, err := e.apply(func(tx *Txn) error {
		ok, err := tx.DeleteAt([]byte("lock/1"), created)
		if !ok {
			t.Error("DeleteAt at the create revision did not delete")
		}
		return err
	})
	if err != nil || len(evs) != 1 || evs[0].Type != mvccpb.DELETE || evs[0].Kv.ModRevision != rev {
		t.Fatalf("DeleteAt at the create revision: rev %d, events %v, %v", rev, evs, err)
	}
	if n := len(e.get(&pb.RangeRequest{Key: []byte("lock/1")}).Kvs); n != 0 {
		t.Fatal("key still there after DeleteAt")
	}
}

// A txn whose range results nobody reads (DiscardRangeValues: a member that
// did not propose the request) leaves the values out and nothing else: the
// same keys and metadata, the same writes, events and revision, and the same
// errors as the txn that loads them.
func TestTxnDiscardRangeValues(t *testing.T) {
	req := &pb.TxnRequest{
		Compare: []*pb.Compare{{Key: []byte("a"), Target: pb.Compare_VALUE, Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_Value{Value: []byte("1")}}},
		Success: []*pb.RequestOp{putOp("a", "2"), getOp("a", "c"), putOp("b", "3")},
	}
	type outcome struct{ ranged, events, state string }
	run := func(discard bool) outcome {
		e := newEnv(t)
		e.put("a", "1")
		e.put("b", "1")
		var resp *pb.TxnResponse
		_, evs, err := e.apply(func(tx *Txn) error {
			if discard {
				tx.DiscardRangeValues()
			}
			var err error
			resp, err = tx.Txn(req)
			return err
		})
		if err != nil || !resp.Succeeded {
			t.Fatalf("discard=%v: %v %v", discard, resp, err)
		}
		// A range the txn cannot serve fails the txn either way, before it
		// writes anything.
		_, _, err = e.apply(func(tx *Txn) error {
			if discard {
				tx.DiscardRangeValues()
			}
			_, err := tx.Txn(&pb.TxnRequest{Success: []*pb.RequestOp{putOp("z", "x"),
				{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte("a"), Revision: 99}}}}})
			return err
		})
		if !errors.Is(err, ErrFutureRev) {
			t.Fatalf("discard=%v: future-revision range in a txn: %v", discard, err)
		}
		return outcome{kvsString(resp.Responses[1].GetResponseRange().Kvs), evString(evs),
			kvsString(e.get(&pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}}).Kvs)}
	}
	loaded, discarded := run(false), run(true)
	if loaded.ranged != `"a"="2"@2/4/2 "b"="1"@3/3/1` {
		t.Fatalf("loaded range: %s", loaded.ranged)
	}
	if discarded.ranged != `"a"=""@2/4/2 "b"=""@3/3/1` {
		t.Fatalf("discarded range: %s", discarded.ranged)
	}
	if loaded.events != discarded.events || loaded.state != discarded.state {
		t.Fatalf("discarding values changed the txn's effects:\n%+v\n%+v", loaded, discarded)
	}
}

// An empty value is known from the index alone, written or rebuilt at
// open: reading it (a range in a txn, clientv3's Mutex reading its lock's
// owner) reads no version record. Shown by removing the records behind the
// store's back: the empty key still reads, the other one cannot.
func TestEmptyValueNeedsNoStorageRead(t *testing.T) {
	for _, reopen := range []bool{false, true} {
		e := newEnv(t)
		revEmpty := e.put("empty", "")
		revFull := e.put("full", "x")
		if reopen {
			e.reopen() // the index comes from the records now
		}
		for _, k := range []struct {
			key string
			rev int64
		}{{"empty", revEmpty}, {"full", revFull}} {
			if err := e.db.Delete(appendVersionKey(nil, []byte(k.key), k.rev), pebble.NoSync); err != nil {
				t.Fatal(err)
			}
		}
		read := func(key string) (*pb.RangeResponse, error) {
			var rr *pb.RangeResponse
			_, _, err := e.apply(func(tx *Txn) error {
				resp, err := tx.Txn(&pb.TxnRequest{Success: []*pb.RequestOp{getOp(key, "")}})
				if err == nil {
					rr = resp.Responses[0].GetResponseRange()
				}
				return err
			})
			return rr, err
		}
		rr, err := read("empty")
		if err != nil || len(rr.Kvs) != 1 || rr.Kvs[0].Value == nil || len(rr.Kvs[0].Value) != 0 {
			t.Fatalf("reopen=%v: empty key: %v, %v", reopen, rr, err)
		}
		if _, err := read("full"); err == nil || !strings.Contains(err.Error(), "missing") {
			t.Fatalf("reopen=%v: a key whose record is gone read without error (%v): the test reads nothing", reopen, err)
		}
	}
}
