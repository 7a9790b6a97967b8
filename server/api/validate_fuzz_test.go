package api

import (
	"bytes"
	"errors"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/protobuf/proto"
)

// txnBuilder turns fuzz bytes into a small txn over the keys a..d, with
// puts, point and range deletes, reads, empty ops and nested txns, so that
// the duplicate-key rule is exercised on inputs where it matters.
type txnBuilder struct{ b []byte }

func (t *txnBuilder) next() byte {
	if len(t.b) == 0 {
		return 0
	}
	c := t.b[0]
	t.b = t.b[1:]
	return c
}

func (t *txnBuilder) key() []byte { return []byte{'a' + t.next()%4} }

func (t *txnBuilder) ops(depth int) []*pb.RequestOp {
	n := int(t.next() % 5)
	var out []*pb.RequestOp
	for i := 0; i < n && len(t.b) > 0; i++ {
		switch c := t.next() % 8; {
		case c < 3:
			out = append(out, &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: t.key()}}})
		case c == 3:
			out = append(out, &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: t.key()}}})
		case c == 4:
			d := &pb.DeleteRangeRequest{Key: t.key(), RangeEnd: t.key()}
			if t.next()%4 == 0 {
				d.RangeEnd = []byte{0}
			}
			out = append(out, &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: d}})
		case c == 5:
			out = append(out, &pb.RequestOp{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: t.key()}}})
		case c == 6 && depth < 3:
			out = append(out, &pb.RequestOp{Request: &pb.RequestOp_RequestTxn{RequestTxn: &pb.TxnRequest{Success: t.ops(depth + 1), Failure: t.ops(depth + 1)}}})
		default:
			out = append(out, &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: t.key()}}})
		}
	}
	return out
}

// refRange is a deleted range in the reference: end nil = the single key
// start, otherwise [start, end) compared as plain strings. Like etcd's
// interval tree, an end of "\x00" (from-key) is taken literally there, so
// etcd's check never sees a put inside a from-key delete.
type refRange struct{ start, end []byte }

func (r refRange) has(k []byte) bool {
	if r.end == nil {
		return bytes.Equal(r.start, k)
	}
	return bytes.Compare(k, r.start) >= 0 && bytes.Compare(k, r.end) < 0
}

// refDuplicate is a brute-force statement of etcd v3's rule for one txn
// branch (etcd server/etcdserver/api/v3rpc/key.go, checkIntervals): this
// level's deletes are collected first; each nested txn's then-puts and
// else-puts may not repeat a put of an earlier nested txn nor fall in a
// delete collected so far (a key put by both branches of the same nested
// txn is fine: they are exclusive), and its deletes join the set
// afterwards; finally this level's puts may not repeat any put nor fall in
// any delete.
func refDuplicate(ops []*pb.RequestOp) (map[string]bool, []refRange, bool) {
	puts := map[string]bool{}
	var dels []refRange
	inDel := func(k string) bool {
		for _, d := range dels {
			if d.has([]byte(k)) {
				return true
			}
		}
		return false
	}
	for _, op := range ops {
		if d := op.GetRequestDeleteRange(); d != nil {
			r := refRange{start: d.Key}
			if len(d.RangeEnd) > 0 {
				r.end = d.RangeEnd
			}
			dels = append(dels, r)
		}
	}
	for _, op := range ops {
		t := op.GetRequestTxn()
		if t == nil {
			continue
		}
		tp, td, dup1 := refDuplicate(t.Success)
		ep, ed, dup2 := refDuplicate(t.Failure)
		if dup1 || dup2 {
			return nil, nil, true
		}
		for k := range tp {
			if puts[k] || inDel(k) {
				return nil, nil, true
			}
		}
		for k := range tp {
			puts[k] = true
		}
		for k := range ep {
			if (puts[k] && !tp[k]) || inDel(k) {
				return nil, nil, true
			}
		}
		for k := range ep {
			puts[k] = true
		}
		dels = append(dels, td...)
		dels = append(dels, ed...)
	}
	for _, op := range ops {
		p := op.GetRequestPut()
		if p == nil {
			continue
		}
		k := string(p.Key)
		if puts[k] || inDel(k) {
			return nil, nil, true
		}
		puts[k] = true
	}
	return puts, dels, false
}

// FuzzCheckTxnDuplicateKeys: checkTxn never panics, and on well-formed
// txns it reports ErrGRPCDuplicateKey exactly when etcd would.
func FuzzCheckTxnDuplicateKeys(f *testing.F) {
	for _, s := range [][]byte{
		{},
		{2, 0, 0, 0, 0},       // put a, put a
		{2, 0, 1, 3, 1},       // put b, delete b
		{2, 4, 0, 2, 1, 1, 0}, // range delete a..c, put b
		{1, 6, 1, 0, 0, 1, 0, 0, 0, 0},
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		tb := &txnBuilder{b: data}
		r := &pb.TxnRequest{Success: tb.ops(0), Failure: tb.ops(0)}
		err := checkTxn(r, 128)
		if err != nil && !errors.Is(err, rpctypes.ErrGRPCDuplicateKey) {
			t.Fatalf("well-formed txn rejected with %v", err)
		}
		_, _, d1 := refDuplicate(r.Success)
		_, _, d2 := refDuplicate(r.Failure)
		want := d1 || d2
		if got := err != nil; got != want {
			t.Fatalf("duplicate key: checkTxn says %v (%v), etcd's rule says %v\nsuccess: %v\nfailure: %v", got, err, want, r.Success, r.Failure)
		}
	})
}

// FuzzCheckRequests: the validators never panic on any wire message, and a
// txn they accept has no empty key anywhere.
func FuzzCheckRequests(f *testing.F) {
	seeds := []*pb.TxnRequest{
		{},
		{Success: []*pb.RequestOp{put("a"), del("b", ""), get("c")}},
		{Success: []*pb.RequestOp{nested(put("a"), put("a"))}},
		{Compare: []*pb.Compare{{Key: []byte("k"), Target: pb.Compare_VALUE}}, Failure: []*pb.RequestOp{{}}},
	}
	for i := range seeds {
		b, err := proto.Marshal(seeds[i])
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, b)
	}
	f.Fuzz(func(t *testing.T, txn, other []byte) {
		var r pb.TxnRequest
		if proto.Unmarshal(txn, &r) == nil {
			if checkTxn(&r, 8) == nil {
				assertKeys(t, &r)
			}
		}
		var rr pb.RangeRequest
		if proto.Unmarshal(other, &rr) == nil {
			if checkRange(&rr) == nil && len(rr.Key) == 0 {
				t.Fatal("range with an empty key accepted")
			}
		}
		var pr pb.PutRequest
		if proto.Unmarshal(other, &pr) == nil {
			if checkPut(&pr) == nil && len(pr.Key) == 0 {
				t.Fatal("put with an empty key accepted")
			}
		}
		var dr pb.DeleteRangeRequest
		if proto.Unmarshal(other, &dr) == nil {
			if checkDelete(&dr) == nil && len(dr.Key) == 0 {
				t.Fatal("delete with an empty key accepted")
			}
		}
	})
}

func assertKeys(t *testing.T, r *pb.TxnRequest) {
	for _, c := range r.Compare {
		if len(c.Key) == 0 {
			t.Fatal("compare with an empty key accepted")
		}
	}
	for _, ops := range [][]*pb.RequestOp{r.Success, r.Failure} {
		for _, op := range ops {
			switch o := op.Request.(type) {
			case *pb.RequestOp_RequestRange:
				if len(o.RequestRange.Key) == 0 {
					t.Fatal("range op with an empty key accepted")
				}
			case *pb.RequestOp_RequestPut:
				if len(o.RequestPut.Key) == 0 {
					t.Fatal("put op with an empty key accepted")
				}
			case *pb.RequestOp_RequestDeleteRange:
				if len(o.RequestDeleteRange.Key) == 0 {
					t.Fatal("delete op with an empty key accepted")
				}
			case *pb.RequestOp_RequestTxn:
				assertKeys(t, o.RequestTxn)
			case nil:
				t.Fatal("empty op accepted")
			}
		}
	}
}
