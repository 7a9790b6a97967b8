package apply

import (
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/proto"
)

func rangeTxnEntry(t *testing.T, id uint64, key string) []byte {
	t.Helper()
	body, err := proto.Marshal(&pb.InternalRaftRequest{ID: id, Header: &pb.RequestHeader{ID: id}, Txn: &pb.TxnRequest{
		Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte(key)}}}}}})
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
	h.apply(rangeTxnEntry(t, id, "k"))
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
	body, err := proto.Marshal(&pb.InternalRaftRequest{ID: h.a.nextID(), Txn: &pb.TxnRequest{Success: []*pb.RequestOp{
		{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte("k")}}},
		{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("k2"), Value: []byte("w")}}}}}})
	if err != nil {
		t.Fatal(err)
	}
	h.apply(append([]byte{KindEtcd}, body...))
	got, err := h.a.kv.Range(&pb.RangeRequest{Key: []byte("k2")})
	if err != nil || len(got.Kvs) != 1 || string(got.Kvs[0].Value) != "w" {
		t.Fatalf("another member's txn did not write k2: %v, %v", got, err)
	}
	if h.tracked() != 1 {
		t.Fatalf("tracked requests: %d, want the orphan alone", h.tracked())
	}
}
