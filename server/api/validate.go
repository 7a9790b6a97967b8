package api

import (
	"bytes"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

func checkRange(r *pb.RangeRequest) error {
	if len(r.Key) == 0 {
		return rpctypes.ErrGRPCEmptyKey
	}
	if _, ok := pb.RangeRequest_SortOrder_name[int32(r.SortOrder)]; !ok {
		return rpctypes.ErrGRPCInvalidSortOption
	}
	if _, ok := pb.RangeRequest_SortTarget_name[int32(r.SortTarget)]; !ok {
		return rpctypes.ErrGRPCInvalidSortOption
	}
	return nil
}

func checkPut(r *pb.PutRequest) error {
	if len(r.Key) == 0 {
		return rpctypes.ErrGRPCEmptyKey
	}
	if r.IgnoreValue && len(r.Value) != 0 {
		return rpctypes.ErrGRPCValueProvided
	}
	if r.IgnoreLease && r.Lease != 0 {
		return rpctypes.ErrGRPCLeaseProvided
	}
	return nil
}

func checkDelete(r *pb.DeleteRangeRequest) error {
	if len(r.Key) == 0 {
		return rpctypes.ErrGRPCEmptyKey
	}
	return nil
}

// checkTxn validates a txn (recursively) and applies etcd's rule that one txn
// branch may not write a key twice (a put and another put or a delete over it).
func checkTxn(r *pb.TxnRequest, maxOps int) error {
	if err := checkTxnOps(r, maxOps); err != nil {
		return err
	}
	_, _, err := txnWrites(r)
	return err
}

func checkTxnOps(r *pb.TxnRequest, maxOps int) error {
	if len(r.Compare) > maxOps || len(r.Success) > maxOps || len(r.Failure) > maxOps {
		return rpctypes.ErrGRPCTooManyOps
	}
	for _, c := range r.Compare {
		if len(c.Key) == 0 {
			return rpctypes.ErrGRPCEmptyKey
		}
	}
	for _, ops := range [][]*pb.RequestOp{r.Success, r.Failure} {
		for _, op := range ops {
			if err := checkOp(op, maxOps); err != nil {
				return err
			}
		}
	}
	return nil
}

func checkOp(op *pb.RequestOp, maxOps int) error {
	switch o := op.Request.(type) {
	case *pb.RequestOp_RequestRange:
		return checkRange(o.RequestRange)
	case *pb.RequestOp_RequestPut:
		return checkPut(o.RequestPut)
	case *pb.RequestOp_RequestDeleteRange:
		return checkDelete(o.RequestDeleteRange)
	case *pb.RequestOp_RequestTxn:
		return checkTxnOps(o.RequestTxn, maxOps)
	default:
		return rpctypes.ErrGRPCEmptyKey // an empty op carries no key
	}
}

type interval struct{ start, end []byte } // end nil: single key

// contains follows etcd: [start, end) compared literally, so a from-key
// delete (end "\x00") never conflicts with a put — etcd accepts
// "delete --from-key a; put a" and so must a drop-in replacement.
func (iv interval) contains(key []byte) bool {
	if iv.end == nil {
		return bytes.Equal(iv.start, key)
	}
	return bytes.Compare(key, iv.start) >= 0 && bytes.Compare(key, iv.end) < 0
}

func inAny(dels []interval, key []byte) bool {
	for _, d := range dels {
		if d.contains(key) {
			return true
		}
	}
	return false
}

// txnWrites checks one branch (ops) with etcd's rule (v3rpc checkIntervals)
// and returns the keys it puts and the ranges it deletes. This level's
// deletes come first; each nested txn's then-puts and else-puts may not
// repeat a put of an earlier nested txn nor fall in a delete collected so
// far — a key put by both branches of one nested txn is fine, they are
// exclusive — and its deletes join afterwards; this level's puts come last
// and may repeat nothing and fall in no delete.
func txnWrites(r *pb.TxnRequest) (map[string]struct{}, []interval, error) {
	if _, _, err := branchWrites(r.Success); err != nil {
		return nil, nil, err
	}
	if _, _, err := branchWrites(r.Failure); err != nil {
		return nil, nil, err
	}
	return nil, nil, nil
}

func branchWrites(ops []*pb.RequestOp) (map[string]struct{}, []interval, error) {
	var dels []interval
	for _, op := range ops {
		if d := op.GetRequestDeleteRange(); d != nil {
			var end []byte
			if len(d.RangeEnd) > 0 {
				end = d.RangeEnd
			}
			dels = append(dels, interval{d.Key, end})
		}
	}
	puts := map[string]struct{}{}
	for _, op := range ops {
		t := op.GetRequestTxn()
		if t == nil {
			continue
		}
		thenPuts, thenDels, err := branchWrites(t.Success)
		if err != nil {
			return nil, nil, err
		}
		elsePuts, elseDels, err := branchWrites(t.Failure)
		if err != nil {
			return nil, nil, err
		}
		for k := range thenPuts {
			if _, dup := puts[k]; dup || inAny(dels, []byte(k)) {
				return nil, nil, rpctypes.ErrGRPCDuplicateKey
			}
			puts[k] = struct{}{}
		}
		for k := range elsePuts {
			if _, dup := puts[k]; dup {
				if _, sameNested := thenPuts[k]; !sameNested {
					return nil, nil, rpctypes.ErrGRPCDuplicateKey
				}
			}
			if inAny(dels, []byte(k)) {
				return nil, nil, rpctypes.ErrGRPCDuplicateKey
			}
			puts[k] = struct{}{}
		}
		dels = append(dels, thenDels...)
		dels = append(dels, elseDels...)
	}
	for _, op := range ops {
		p := op.GetRequestPut()
		if p == nil {
			continue
		}
		k := string(p.Key)
		if _, dup := puts[k]; dup || inAny(dels, p.Key) {
			return nil, nil, rpctypes.ErrGRPCDuplicateKey
		}
		puts[k] = struct{}{}
	}
	return puts, dels, nil
}
