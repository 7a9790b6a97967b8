package apply

import (
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/proto"

	"github.com/tenure-io/tenure/server/storage"
)

// rangeThenPutEntry is a txn that reads key, then writes put=w.
func rangeThenPutEntry(t *testing.T, id uint64, key, put string) []byte {
	t.Helper()
	body, err := proto.Marshal(&pb.InternalRaftRequest{ID: id, Txn: &pb.TxnRequest{Success: []*pb.RequestOp{
		{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte(key)}}},
		{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(put), Value: []byte("w")}}}}}})
	if err != nil {
		t.Fatal(err)
	}
	return append([]byte{KindEtcd}, body...)
}

// Only the member whose caller waits for a txn reads the values its ranges
// return; a member that merely applies it (every other one) skips them.
// awaited is what tells the two apart.
func TestTxnRangeValuesReadOnlyWhereAwaited(t *testing.T) {
	h := newApplyHarness(t)
	h.apply(putEntry(t, 0, "k"))

	id := h.a.nextID()
	ch := h.a.expect(id)
	if !h.a.awaited(id) {
		t.Fatal("a request with a waiting caller is not awaited")
	}
	h.apply(rangeThenPutEntry(t, id, "k", "k1"))
	res := <-ch
	txn, _ := res.Resp.(*pb.TxnResponse)
	if res.Err != nil || txn == nil {
		t.Fatalf("txn result: %+v", res)
	}
	kvs := txn.Responses[0].GetResponseRange().GetKvs()
	if len(kvs) != 1 || string(kvs[0].Value) != "v" {
		t.Fatalf("the waiting caller got %v, want k=v", kvs)
	}
	h.a.forget(id)

	orphanID := h.a.nextID()
	h.a.mu.Lock()
	h.a.orphans[orphanID] = orphan{fn: func(Result) {}}
	h.a.mu.Unlock()
	for _, tc := range []struct {
		id   uint64
		want bool
	}{
		{id, false},           // answered and forgotten
		{h.a.nextID(), false}, // never registered here: another member's request
		{0, false},            // no caller at all
		{orphanID, true},      // the caller left a function for the result
	} {
		if got := h.a.awaited(tc.id); got != tc.want {
			t.Errorf("awaited(%d) = %v, want %v", tc.id, got, tc.want)
		}
	}
	// Another member's txn (nobody waits here) still writes what it writes.
	h.apply(rangeThenPutEntry(t, h.a.nextID(), "k", "k2"))
	got, err := h.a.kv.Range(&pb.RangeRequest{Key: []byte("k2")})
	if err != nil || len(got.Kvs) != 1 || string(got.Kvs[0].Value) != "w" {
		t.Fatalf("another member's txn did not write k2: %v, %v", got, err)
	}
	if h.tracked() != 1 {
		t.Fatalf("tracked requests: %d, want the orphan alone", h.tracked())
	}
}

// The apply loop itself skips the values where nobody waits: with the
// version records removed behind the store's back, a txn that reads k and
// then writes k2 fails on the member that awaits it (its range must load k's
// value) and still writes k2 on a member where nobody waits.
func TestApplySkipsRangeValuesNobodyAwaits(t *testing.T) {
	h := newApplyHarness(t)
	h.apply(putEntry(t, 0, "k"))
	if err := h.a.db.DeleteRange([]byte{storage.PrefixKV}, []byte{storage.PrefixKV + 1}, pebble.NoSync); err != nil {
		t.Fatal(err)
	}
	written := func(key string) bool {
		got, err := h.a.kv.Range(&pb.RangeRequest{Key: []byte(key)})
		return err == nil && len(got.Kvs) == 1
	}

	id := h.a.nextID()
	ch := h.a.expect(id)
	h.apply(rangeThenPutEntry(t, id, "k", "mine"))
	if res := <-ch; res.Err == nil || !strings.Contains(res.Err.Error(), "missing") {
		t.Fatalf("the awaited txn read k without its record (%v): the test removes nothing", res.Err)
	}
	if written("mine") {
		t.Fatal("the awaited txn failed and still wrote")
	}
	h.apply(rangeThenPutEntry(t, h.a.nextID(), "k", "theirs"))
	if !written("theirs") {
		t.Fatal("a txn nobody awaits here loaded the values of its range")
	}
}
