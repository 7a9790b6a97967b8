package api

import (
	"errors"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

func put(k string) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(k), Value: []byte("v")}}}
}

func del(k, end string) *pb.RequestOp {
	r := &pb.DeleteRangeRequest{Key: []byte(k)}
	if end != "" {
		r.RangeEnd = []byte(end)
	}
	return &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: r}}
}

func get(k string) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte(k)}}}
}

func nested(success ...*pb.RequestOp) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestTxn{RequestTxn: &pb.TxnRequest{Success: success}}}
}

func TestCheckTxn(t *testing.T) {
	many := make([]*pb.RequestOp, 4)
	for i := range many {
		many[i] = get("k")
	}
	cases := []struct {
		name string
		txn  *pb.TxnRequest
		want error
	}{
		{"ok", &pb.TxnRequest{Success: []*pb.RequestOp{put("a"), put("b"), get("a")}}, nil},
		{"same key in both branches is fine", &pb.TxnRequest{Success: []*pb.RequestOp{put("a")}, Failure: []*pb.RequestOp{put("a")}}, nil},
		{"put twice", &pb.TxnRequest{Success: []*pb.RequestOp{put("a"), put("a")}}, rpctypes.ErrGRPCDuplicateKey},
		{"put inside deleted range", &pb.TxnRequest{Success: []*pb.RequestOp{del("a", "c"), put("b")}}, rpctypes.ErrGRPCDuplicateKey},
		{"put and delete same key", &pb.TxnRequest{Failure: []*pb.RequestOp{put("a"), del("a", "")}}, rpctypes.ErrGRPCDuplicateKey},
		{"from-key delete is compared literally, as etcd does", &pb.TxnRequest{Success: []*pb.RequestOp{del("a", "\x00"), put("zzz")}}, nil},
		{"nested branches are exclusive", &pb.TxnRequest{Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestTxn{RequestTxn: &pb.TxnRequest{
			Success: []*pb.RequestOp{put("a"), del("d", "")}, Failure: []*pb.RequestOp{put("d"), put("a")}}}}}}, nil},
		{"nested put inside outer delete", &pb.TxnRequest{Success: []*pb.RequestOp{del("a", "c"), nested(put("b"))}}, rpctypes.ErrGRPCDuplicateKey},
		{"put outside deleted range", &pb.TxnRequest{Success: []*pb.RequestOp{del("a", "c"), put("c")}}, nil},
		{"overlapping deletes are allowed", &pb.TxnRequest{Success: []*pb.RequestOp{del("a", "c"), del("b", "d")}}, nil},
		{"nested put duplicates outer put", &pb.TxnRequest{Success: []*pb.RequestOp{put("a"), nested(put("a"))}}, rpctypes.ErrGRPCDuplicateKey},
		{"too many compares", &pb.TxnRequest{Compare: make([]*pb.Compare, 4)}, rpctypes.ErrGRPCTooManyOps},
		{"too many ops", &pb.TxnRequest{Success: many}, rpctypes.ErrGRPCTooManyOps},
		{"too many ops nested", &pb.TxnRequest{Success: []*pb.RequestOp{nested(many...)}}, rpctypes.ErrGRPCTooManyOps},
		{"compare without key", &pb.TxnRequest{Compare: []*pb.Compare{{}}}, rpctypes.ErrGRPCEmptyKey},
		{"empty op", &pb.TxnRequest{Success: []*pb.RequestOp{{}}}, rpctypes.ErrGRPCEmptyKey},
		{"put without key", &pb.TxnRequest{Success: []*pb.RequestOp{put("")}}, rpctypes.ErrGRPCEmptyKey},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if err := checkTxn(c.txn, 3); !errors.Is(err, c.want) && err != c.want {
				t.Fatalf("got %v, want %v", err, c.want)
			}
		})
	}
}

func TestCheckPutRange(t *testing.T) {
	cases := []struct {
		name string
		err  error
		want error
	}{
		{"put empty key", checkPut(&pb.PutRequest{}), rpctypes.ErrGRPCEmptyKey},
		{"ignore_value with value", checkPut(&pb.PutRequest{Key: []byte("a"), Value: []byte("x"), IgnoreValue: true}), rpctypes.ErrGRPCValueProvided},
		{"ignore_lease with lease", checkPut(&pb.PutRequest{Key: []byte("a"), Lease: 5, IgnoreLease: true}), rpctypes.ErrGRPCLeaseProvided},
		{"put ok", checkPut(&pb.PutRequest{Key: []byte("a"), Value: []byte("x")}), nil},
		{"range empty key", checkRange(&pb.RangeRequest{}), rpctypes.ErrGRPCEmptyKey},
		{"range bad sort order", checkRange(&pb.RangeRequest{Key: []byte("a"), SortOrder: 9}), rpctypes.ErrGRPCInvalidSortOption},
		{"range bad sort target", checkRange(&pb.RangeRequest{Key: []byte("a"), SortTarget: 9}), rpctypes.ErrGRPCInvalidSortOption},
		{"delete empty key", checkDelete(&pb.DeleteRangeRequest{}), rpctypes.ErrGRPCEmptyKey},
	}
	for _, c := range cases {
		if c.err != c.want {
			t.Errorf("%s: got %v, want %v", c.name, c.err, c.want)
		}
	}
}
